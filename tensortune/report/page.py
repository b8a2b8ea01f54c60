"""The HTML report of a tuned operator or model: one self-contained file (figures inline as
SVG, no script, nothing fetched) from the records alone, so it can be made on any machine that
has the database, long after the run.

An operator's page: per task (target, hardware, space) its provenance (each run's command,
strategy, seed, versions; the hardware fingerprint and threads), convergence against trials
and wall time per run, failures by status and reason, the roofline with every correct kernel,
knob importance (knob spaces), the Pareto front of latency and build time, and the best
kernel's TVMScript beside the unscheduled one. A model's page: its end-to-end timings, each
kernel's calls x latency at TVM's default and tuned, trials and choice, the roofline of its
kernels, its failures and the runs that tuned it.
"""
from __future__ import annotations

import html
import json
import math
from datetime import datetime, timezone

from .. import objectives
from ..db import Database, Record, Task
from ..result import Label
from ..measure.roofline import ceilings
from . import history, plots
from .tables import _fmt, _ms

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; margin-top: 2em; }
h3 { font-size: 1.05em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 1em; }
pre { background: #f7f7f7; padding: .6em; overflow: auto; max-height: 32em; font-size: 12px; }
.note { color: #666; font-size: 13px; }
"""


def operator_page(db: Database, workload, tasks: list[Task], target_for) -> str:
    """The page of one operator (or a model's kernel) over its tasks; `target_for(task)` gives
    the Target whose roofline ceilings and space rebuild the task's kernels."""
    sections = []
    for task in tasks:
        records = db.records(task)
        sections.append(_h(2, f"{task.space} on {task.target} ({task.hardware})")
                        + _provenance(db, task, records) + _convergence(records, db.runs())
                        + _failures(records) + _roofline(workload, task, target_for(task), records)
                        + _importance(records) + _front(records) + _kernels(db, workload, task, target_for(task)))
    return _page(f"{workload.preset or workload.key}: tuning report", sections)


def model_page(db: Database, name: str, kernels: list[tuple[str, str, int, int]], workload_of, target_for) -> str:
    """The page of a tuned model: `kernels` as Database.model_kernels gives them,
    `workload_of(key)` a kernel's workload."""
    rows, points, records_all, runs_seen = [], [], [], set()
    for function, key, calls, outputs in kernels:
        workload = workload_of(key)
        by_device: dict[tuple[str, str], list[Task]] = {}
        for task in db.tasks(key):  # a kernel's default and its search can be tasks of different spaces
            by_device.setdefault((task.target, task.hardware), []).append(task)
        for tasks in by_device.values():
            records = [r for t in tasks for r in db.records(t)]
            defaults = [r for t in tasks for r in db.records(t, (Label.DEFAULT,)) if r.result.ok]
            best = min((b for t in tasks if (b := db.best(t))), key=lambda b: b.result.latency, default=None)
            default_s = min((r.result.latency for r in defaults), default=math.inf)
            rows.append((function, key, calls, tasks[0], default_s, best, len(records)))
            records_all += records
            runs_seen |= {r.run for r in records + defaults}
            target = target_for(tasks[0])
            if workload.flops:  # a kernel that moves data only has no place on a roofline
                points += [("default", *_position(workload, target, default_s))] if math.isfinite(default_s) else []
                points += [("tuned", *_position(workload, target, best.result.latency))] if best else []
        if outputs > 1 and not by_device:
            rows.append((function, key, calls, None, math.inf, None, 0))
    rows.sort(key=lambda row: -row[2] * (row[5].result.latency if row[5] else 0.0))  # the heaviest first
    sections = [_h(2, "End to end") + _timings(db, name), _h(2, "Kernels") + _kernel_table(rows)
                + _figure("kernel-times", plots.kernel_times(
                    [(f, c * d * 1e3 if math.isfinite(d) else 0.0, c * b.result.latency * 1e3 if b else 0.0)
                     for f, _, c, t, d, b, _ in rows if t is not None]))]
    if points:
        sections.append(_h(2, "Roofline") + _figure("roofline", plots.roofline(
            points, ceilings(workload, target), "each kernel that computes (FLOPs known) at TVM's default and tuned")))
    sections.append(_h(2, "Failures") + _failures(records_all))
    sections.append(_h(2, "Runs") + _runs_table(db, runs_seen))
    return _page(f"{name}: tuning report", sections)


def _provenance(db: Database, task: Task, records: list[Record]) -> str:
    threads = sorted({r.result.threads for r in records if r.result.threads})
    head = _table(["workload", "target", "hardware fingerprint", "space", "threads", "search trials"],
                  [[task.workload, task.target, task.hardware, task.space, ", ".join(map(str, threads)) or "-",
                    str(len(records))]])
    return _h(3, "Provenance") + head + _runs_table(db, {r.run for r in records})


def _runs_table(db: Database, ids: set) -> str:
    runs = db.runs()
    rows = [[str(run.id), _when(run.started), run.command, run.strategy or "-",
             "-" if run.seed is None else str(run.seed), json.dumps(run.options) if run.options else "-",
             ", ".join(f"{k} {v}" for k, v in run.versions.items())]
            for run in sorted((runs[i] for i in ids if i in runs), key=lambda r: r.id)]
    note = "" if None not in ids else _note("some records were stored before runs were kept: their command is not known")
    return _table(["run", "started (UTC)", "command", "strategy", "seed", "options", "versions"], rows) + note


def _convergence(records: list[Record], runs: dict) -> str:
    curves = history.curves(records, runs)
    if not any(math.isfinite(b) for c in curves for b in c.best_s):
        return _h(3, "Convergence") + _note("no correct trial yet")
    return _h(3, "Convergence") + _figure("convergence", plots.convergence(curves)) + _note(
        "each run's own trials; a run that resumed a task started from the records before it (they are not re-measured)")


def _failures(records: list[Record]) -> str:
    if not records:
        return _h(3, "Trials by status") + _note("no trials")
    rows = [[status, reason, str(n)] for status, reason, n in history.failures(records)]
    return (_h(3, "Trials by status") + _figure("statuses", plots.statuses(history.statuses(records)))
            + (_table(["status", "reason", "trials"], rows) if rows else _note("no trial failed")))


def _roofline(workload, task: Task, target, records: list[Record]) -> str:
    ok = [r for r in records if r.result.ok]
    if not ok or not workload.flops or target is None:
        return _h(3, "Roofline") + _note("no correct kernel, or the operator's work (FLOPs) is unknown")
    points = [(task.space, *_position(workload, target, r.result.latency)) for r in ok]
    return _h(3, "Roofline") + _figure("roofline", plots.roofline(
        points, ceilings(workload, target), f"every correct kernel ({len(ok)}); the ceilings bound every "
                                            "possible kernel, they are not a realistic peak"))


def _position(workload, target, seconds: float) -> tuple[float, float]:
    """(arithmetic intensity, GFLOP/s) of a kernel of the workload timed at `seconds`."""
    return workload.flops / workload.bytes, workload.flops / seconds / 1e9


def _importance(records: list[Record]) -> str:
    shares = history.importance(records)
    if not shares:
        return ""
    return _h(3, "Knob importance") + _figure("importance", plots.importance(shares)) + _note(
        "each knob's share of the variance of log latency among correct trials that its value alone explains "
        "(correlation ratio); knobs interact, so the shares need not add up to one")


def _front(records: list[Record], names: tuple[str, str] = ("latency", "build_s")) -> str:
    front = history.pareto_front(records, names)
    ok = [r for r in records if r.result.ok and all(objectives.value(r.result, n) > 0 for n in names)]
    if len(ok) < 2:
        return ""
    pairs = lambda rs: [tuple(objectives.value(r.result, n) for n in names) for r in rs]  # noqa: E731
    rows = [[f"{r.result.latency * 1e3:.4f}", f"{r.result.build_s:.3f}", _short(json.dumps(r.point))] for r in front]
    return (_h(3, "Pareto front: latency and build time") + _figure("front", plots.front(pairs(ok), pairs(front), names))
            + _table(["latency (ms)", "build (s)", "point"], rows))


def _kernels(db: Database, workload, task: Task, target) -> str:
    from ..space import make_space, stored_space

    best = db.best(task)
    naive = workload.prim_func().script()
    if best is None or target is None:
        return _h(3, "Kernels") + _note("no correct kernel to show") + _pre(naive)
    try:
        space = make_space(stored_space(task.space, best.label, target), workload, target)
        tuned = space.apply(best.point).mod.script()
    except Exception as err:  # the space may not rebuild here (another TVM, another machine): say so
        tuned = f"could not rebuild the best kernel here: {type(err).__name__}: {err}"
    return (_h(3, f"Kernels: the best ({best.result.latency * 1e3:.4f} ms, {best.label.value}) beside the unscheduled one")
            + f'<div class="pair"><div>{_pre(tuned)}</div><div>{_pre(naive)}</div></div>')


def _timings(db: Database, name: str) -> str:
    from .tables import end_to_end_line

    lines = [f"{_when(t['measured'])} UTC on {t['target']} ({t['hardware']}): {end_to_end_line(t)}"
             for t in db.model_timings(name)]
    return "".join(f"<p>{html.escape(line)}</p>" for line in lines) or _note("not timed end to end (tune-model times "
                                                                             "it on CPU targets)")


def _kernel_table(rows) -> str:
    body = []
    for function, key, calls, task, default_s, best, trials in rows:
        if task is None:
            body.append([function, key, str(calls), "-", "-", "-", "-", "not tunable (several outputs)"])
            continue
        tuned = best.result.latency if best else math.inf
        chosen = "-" if best is None else "TVM's default" if best.label is Label.DEFAULT else _short(json.dumps(best.point))
        body.append([function, key, str(calls), *(_fmt(_ms(v), ".4f") for v in (default_s, tuned, calls * tuned)),
                     str(trials), chosen])
    return _table(["function", "kernel", "calls", "default ms", "best ms", "calls x best ms", "trials", "chosen"], body)


def _page(title: str, sections: list[str]) -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            + _note(f"made {_when(datetime.now(timezone.utc).timestamp())} UTC by tensortune report from the records")
            + "".join(sections) + "</body></html>\n")


def _table(head: list[str], rows: list[list[str]]) -> str:
    cell = lambda v: f'<td class="n">{html.escape(v)}</td>' if _number(v) else f"<td>{html.escape(v)}</td>"  # noqa: E731
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join("<tr>" + "".join(cell(v) for v in row) + "</tr>" for row in rows) + "</table>")


def _figure(name: str, svg: str) -> str:
    return f'<figure id="{name}">{svg}</figure>'


def _h(level: int, text: str) -> str:
    return f"<h{level}>{html.escape(text)}</h{level}>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def _when(timestamp: float) -> str:
    return f"{datetime.fromtimestamp(timestamp, timezone.utc):%Y-%m-%d %H:%M}"


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
