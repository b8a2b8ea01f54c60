"""The records store: one SQLite file, one row per measured candidate.

Rows are keyed by task (workload key, target, hardware fingerprint, space) and point; a
point is measured once per task, which is what lets an interrupted run resume without
re-measuring. Each batch is committed in one transaction, so a crash leaves whole batches.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import shlex
import sqlite3
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .result import BASELINES, Label, Result
from .points import point_from_json, point_key

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    workload TEXT NOT NULL, target TEXT NOT NULL, hardware TEXT NOT NULL, space TEXT NOT NULL,
    point TEXT NOT NULL,          -- canonical JSON (space.point_key): equal points, equal text
    label TEXT NOT NULL,          -- result.Label: search, final, naive, hand, default
    status TEXT NOT NULL, reason TEXT NOT NULL,
    latency_s REAL, spread REAL, runs TEXT NOT NULL, threads INTEGER, build_s REAL,
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_task ON records (workload, target, hardware, space, label);
-- kernels extracted from models: their TensorIR, so that show/export need not re-import the model
CREATE TABLE IF NOT EXISTS kernels (key TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS models (
    name TEXT NOT NULL, model_key TEXT NOT NULL, kernel TEXT NOT NULL, -- kernels.key
    function TEXT NOT NULL, calls INTEGER NOT NULL, outputs INTEGER NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (model_key, function)
);
-- each process that stored records: what it ran and with what (records.run points here)
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY, command TEXT NOT NULL, strategy TEXT NOT NULL, seed INTEGER,
    options TEXT NOT NULL, versions TEXT NOT NULL, started REAL NOT NULL
);
-- a model timed end to end after tuning (model.end_to_end): torch eager, TVM default, tuned
CREATE TABLE IF NOT EXISTS model_timings (
    model_key TEXT NOT NULL, target TEXT NOT NULL, hardware TEXT NOT NULL, threads INTEGER NOT NULL,
    eager_s REAL NOT NULL, default_s REAL NOT NULL, tuned_s REAL NOT NULL, created REAL NOT NULL
);
-- what the backend's partitioner found of a graph node tried alone (model/partition.py): its
-- signature (operator, input shapes and dtypes, other arguments) and why TVM cannot take it
-- ("" where it can), per target and per version of the converting code, so that another
-- process compiling the same kinds of node does not convert and compile them again
CREATE TABLE IF NOT EXISTS conversions (
    signature TEXT NOT NULL, target TEXT NOT NULL, versions TEXT NOT NULL, why TEXT NOT NULL,
    created REAL NOT NULL, PRIMARY KEY (signature, target, versions)
);
-- which build of a model was kept (model.build: all-TVM, calling torch, or mixed, with the
-- operations put back in TVM): a later build, while no newer record of its kernels is stored,
-- builds that one alone instead of timing every candidate again
CREATE TABLE IF NOT EXISTS build_choices (
    choice_key TEXT NOT NULL, target TEXT NOT NULL, hardware TEXT NOT NULL,
    kept TEXT NOT NULL, in_tvm TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (choice_key, target, hardware)
);
"""


@dataclass(frozen=True)
class Task:
    workload: str
    target: str
    hardware: str
    space: str


@dataclass(frozen=True)
class Record:
    point: dict
    label: str
    result: Result
    created: float
    run: int | None = None  # runs.id of the process that stored it (None: stored before runs were kept)


@dataclass(frozen=True)
class Run:
    """A process that stored records: its command line, strategy (empty where the process did
    not say: a batch import, an agent), seed, strategy options, package versions, start time."""
    id: int
    command: str
    strategy: str
    seed: int | None
    options: dict
    versions: dict
    started: float


class Database:
    """The records of measured candidates in one SQLite file (created if missing): tasks, runs,
    records, models; safe to share between processes (each batch one transaction)."""

    def __init__(self, path: str):
        self.path = path
        try:
            self.conn = sqlite3.connect(path)
            self.conn.executescript(SCHEMA)
            columns = {row[1] for row in self.conn.execute("PRAGMA table_info(records)")}
            if "run" not in columns:  # a database from before runs were kept: its records have none
                self.conn.execute("ALTER TABLE records ADD COLUMN run INTEGER")
        except sqlite3.DatabaseError as err:
            raise UserError(f"cannot use database '{path}': {err}; use a writable SQLite file", option="--db") from None
        self.run: int | None = None  # this process's runs.id, from its first record on (start_run)

    def start_run(self, strategy: str = "", seed: int | None = None, options: dict | None = None) -> int:
        """Begin a run: the records this process stores from now on point to it, with the
        command line and package versions (a report's provenance)."""
        try:
            with self.conn:
                self.run = self.conn.execute(
                    "INSERT INTO runs (command, strategy, seed, options, versions, started) VALUES (?,?,?,?,?,?)",
                    (_command_line(), strategy, seed, json.dumps(options or {}, default=str), json.dumps(versions()),
                     time.time())).lastrowid
        except sqlite3.DatabaseError as err:
            raise UserError(f"cannot write database '{self.path}': {err}; use a writable file", option="--db") from None
        return self.run

    def runs(self) -> dict[int, Run]:
        """Every run by id."""
        rows = self.conn.execute("SELECT id, command, strategy, seed, options, versions, started FROM runs")
        return {r[0]: Run(r[0], r[1], r[2], r[3], json.loads(r[4]), json.loads(r[5]), r[6]) for r in rows}

    def add(self, task: Task, label: str, points: list[dict], results: list[Result]) -> None:
        self.add_many([(task, label, p, r) for p, r in zip(points, results)])

    def add_many(self, entries: list[tuple[Task, str, dict, Result]]) -> None:
        """(task, label, point, result) rows, of any tasks, in one transaction."""
        if self.run is None and entries:  # a process that did not say what it runs: its command line still counts
            self.start_run()
        rows = [(task.workload, task.target, task.hardware, task.space, point_key(p), label,
                 r.status, r.reason, r.latency if r.ok else None, r.spread if r.ok else None,
                 json.dumps(r.runs), r.threads, r.build_s, time.time(), self.run) for task, label, p, r in entries]
        try:
            with self.conn:  # one transaction: all rows of a batch land, or none do
                self.conn.executemany("INSERT INTO records (workload, target, hardware, space, point, label,"
                                      " status, reason, latency_s, spread, runs, threads, build_s, created, run)"
                                      " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        except sqlite3.DatabaseError as err:
            raise UserError(f"cannot write database '{self.path}': {err}; use a writable file", option="--db") from None

    def records(self, task: Task, labels: tuple[Label, ...] = (Label.SEARCH,)) -> list[Record]:
        """The task's records in measurement order."""
        marks = ",".join("?" * len(labels))
        rows = self.conn.execute(
            "SELECT point, label, status, reason, runs, threads, build_s, created, run FROM records"
            f" WHERE workload=? AND target=? AND hardware=? AND space=? AND label IN ({marks}) ORDER BY id",
            (task.workload, task.target, task.hardware, task.space, *labels)).fetchall()
        return [Record(point_from_json(p), Label(label), Result(s, reason, tuple(json.loads(runs)), t or 0, b or 0.0), c, run)
                for p, label, s, reason, runs, t, b, c, run in rows]

    def best(self, task: Task) -> Record | None:
        """The fastest verified kernel of the task, naive, hand and a model kernel's default
        included. A point re-timed at the end counts with its latest careful timing (a failed
        re-check rules it out), never with the luckier timing it may have had during search."""
        latest: dict[tuple, Record] = {}
        for record in self.records(task, tuple(Label)):  # in measurement order
            baseline = record.label in BASELINES  # a template point: never equal to a search point
            key = (baseline, point_key(record.point))
            if record.label is not Label.SEARCH or key not in latest:
                latest[key] = record
        ok = [r for r in latest.values() if r.result.ok]
        return min(ok, key=lambda r: r.result.latency, default=None)

    def tasks(self, workload: str | None = None) -> list[Task]:
        query = "SELECT DISTINCT workload, target, hardware, space FROM records"
        rows = self.conn.execute(query + (" WHERE workload=?" if workload else ""), (workload,) if workload else ())
        return [Task(*row) for row in rows]

    def add_model(self, name: str, key: str, kernels: list[dict]) -> None:
        """A model's kernels (as model.importer.ImportedModel.kernel_rows gives them), once;
        known kernels are kept."""
        now = time.time()
        with self.conn:
            self.conn.executemany("INSERT OR IGNORE INTO kernels (key, name, source) VALUES (?,?,?)",
                                  [(k["key"], k["name"], k["source"]) for k in kernels])
            self.conn.executemany("INSERT OR IGNORE INTO models VALUES (?,?,?,?,?,?,?)",
                                  [(name, key, k["key"], k["function"], k["calls"], k["outputs"], now)
                                   for k in kernels])

    def kernel_source(self, key: str) -> tuple[str, str] | None:
        """(name, TensorIR JSON) of a kernel extracted from a model, or None."""
        return self.conn.execute("SELECT name, source FROM kernels WHERE key=?", (key,)).fetchone()

    def model_kernels(self, name: str) -> list[tuple[str, str, int, int]]:
        """(function, kernel key, calls, outputs) of the model last stored under `name` (its
        name or its key)."""
        return self.conn.execute("SELECT function, kernel, calls, outputs FROM models WHERE model_key=?"
                                 " ORDER BY rowid", (self._model_key(name),)).fetchall()

    def _model_key(self, name: str) -> str:
        """The key of the model last stored under `name` (its name or its key), or ''."""
        row = self.conn.execute("SELECT model_key FROM models WHERE name=? OR model_key=? ORDER BY created DESC"
                                " LIMIT 1", (name, name)).fetchone()
        return row[0] if row else ""

    def add_model_timing(self, model_key: str, target: str, hardware: str, timing: dict) -> None:
        """A model's end-to-end seconds (threads, eager_s, default_s, tuned_s, measured)."""
        with self.conn:
            self.conn.execute("INSERT INTO model_timings VALUES (?,?,?,?,?,?,?,?)",
                              (model_key, target, hardware, timing["threads"], timing["eager_s"],
                               timing["default_s"], timing["tuned_s"], timing["measured"]))

    def model_timings(self, name: str) -> list[dict]:
        """The latest end-to-end timing per target and hardware of the model last stored under
        `name` (its name or its key), as add_model_timing took it, with target and hardware."""
        rows = self.conn.execute("SELECT target, hardware, threads, eager_s, default_s, tuned_s, max(created)"
                                 " FROM model_timings WHERE model_key=? GROUP BY target, hardware",
                                 (self._model_key(name),)).fetchall()  # SQLite: the columns of the max row
        return [dict(zip(("target", "hardware", "threads", "eager_s", "default_s", "tuned_s", "measured"), r))
                for r in rows]

    def set_build_choice(self, choice_key: str, target: str, hardware: str, kept: str, in_tvm: frozenset[int]) -> None:
        """The build kept for a model (`kept`: "tvm", "torch ops" or "mixed", with the operations
        `in_tvm` put back in TVM), found again by `choice_key`; replaces the one stored before."""
        with self.conn:
            self.conn.execute("INSERT OR REPLACE INTO build_choices VALUES (?,?,?,?,?,?)",
                              (choice_key, target, hardware, kept, json.dumps(sorted(in_tvm)), time.time()))

    def build_choice(self, choice_key: str, target: str, hardware: str) -> tuple[str, frozenset[int], float] | None:
        """(kept, in_tvm, when it was stored) as set_build_choice took it, or None."""
        row = self.conn.execute("SELECT kept, in_tvm, created FROM build_choices WHERE choice_key=? AND target=?"
                                " AND hardware=?", (choice_key, target, hardware)).fetchone()
        return (row[0], frozenset(json.loads(row[1])), row[2]) if row else None

    def conversions(self, target: str, versions: str) -> dict[str, str]:
        """Node signature -> why TVM cannot take it ("" where it can), as add_conversions took them."""
        return dict(self.conn.execute("SELECT signature, why FROM conversions WHERE target=? AND versions=?",
                                      (target, versions)).fetchall())

    def add_conversions(self, target: str, versions: str, found: dict[str, str]) -> None:
        """What nodes tried alone gave (signature -> why, "" where TVM takes it), in one transaction."""
        with self.conn:
            self.conn.executemany("INSERT OR REPLACE INTO conversions VALUES (?,?,?,?,?)",
                                  [(signature, target, versions, why, time.time()) for signature, why in found.items()])

    def latest_record(self, workloads: list[str], target: str, hardware: str) -> float:
        """When the newest record of any of these workloads on this hardware was stored (0: none)."""
        marks = ",".join("?" * len(workloads))
        row = self.conn.execute(f"SELECT max(created) FROM records WHERE workload IN ({marks}) AND target=?"
                                " AND hardware=?", (*workloads, target, hardware)).fetchone()
        return row[0] or 0.0

    @contextmanager
    def claim(self, tasks: list[Task]):
        """Hold the tasks' workloads on their hardware for this process while it tunes them:
        a second process would measure the same points again and time on the same cores.
        It stops with a UserError instead. The claims are byte-range locks on one file beside
        the database, which the system releases when the process ends, however it ends. An
        in-memory database belongs to this process alone: nothing to claim."""
        if self.path == ":memory:":
            yield
            return
        try:
            claims = open(self.path + ".claims", "a+")
        except OSError as err:
            raise UserError(f"cannot claim tasks in '{self.path}': {err.strerror} ({self.path}.claims); use a database in a "
                            "writable folder", option="--db") from None
        with claims:
            for task in dict.fromkeys((t.workload, t.target, t.hardware) for t in tasks):
                offset = int(hashlib.sha1("|".join(task).encode()).hexdigest()[:10], 16)
                try:
                    fcntl.lockf(claims, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
                except OSError:
                    raise UserError(f"another tensortune process is tuning {task[0]} on this hardware with "
                                    f"'{self.path}'; let it finish (or stop it), then run again: it resumes "
                                    "from the records") from None
            yield

    def close(self) -> None:
        self.conn.close()


def _command_line() -> str:
    """This process's command, as typed: `tensortune tune ...` (`python -m tensortune` too)."""
    if not sys.argv or not sys.argv[0]:
        return "(python)"
    program = Path(sys.argv[0])
    return shlex.join([program.parent.name if program.name == "__main__.py" else program.name, *sys.argv[1:]])


def versions() -> dict[str, str]:
    """The versions a run's results depend on: Python, ours, TVM's, and torch's when loaded
    (importing torch for this alone would cost seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    found = {"python": platform.python_version()}
    for package in ("tensortune", "apache-tvm", *(["torch"] if "torch" in sys.modules else [])):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            pass
    return found
