"""What a task's records say, as data for the HTML report: each run's convergence, the
failures by status and reason, how much each knob matters, and the Pareto front of latency
against build time. Pure functions of records: no TVM, no plotting."""
from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from dataclasses import dataclass

from .. import objectives
from ..db import Record, Run


@dataclass
class Curve:
    """One run's search trials on a task: trial number, seconds since the run started, and
    the best latency (seconds) it had reached by then (infinity before its first correct one)."""
    name: str
    trials: list[int]
    elapsed_s: list[float]
    best_s: list[float]


def curves(records: list[Record], runs: dict[int, Run]) -> list[Curve]:
    """A curve per run that measured search trials of the task, in the order the runs started;
    records stored before runs were kept count as one run, 'earlier records'."""
    by_run: dict[int | None, list[Record]] = defaultdict(list)
    for record in records:
        by_run[record.run].append(record)
    out = []
    for run_id, mine in by_run.items():
        run = runs.get(run_id) if run_id is not None else None
        start = run.started if run else mine[0].created
        best, bests = math.inf, []
        for record in mine:
            if record.result.ok:
                best = min(best, record.result.latency)
            bests.append(best)
        out.append(Curve(run_name(run), list(range(1, len(mine) + 1)), [r.created - start for r in mine], bests))
    return out


def run_name(run: Run | None) -> str:
    """How a run is named in the report: its strategy and seed, and its id (two runs of one
    strategy stay apart)."""
    if run is None:
        return "earlier records"
    strategy = run.strategy or "unnamed"
    return f"{strategy}" + (f", seed {run.seed}" if run.seed is not None else "") + f" (run {run.id})"


def failures(records: list[Record]) -> list[tuple[str, str, int]]:
    """(status, reason's first line, count) of every failed trial, most frequent first."""
    counts = Counter((r.result.status.value, _first_line(r.result.reason)) for r in records if not r.result.ok)
    return [(status, reason, n) for (status, reason), n in counts.most_common()]


def statuses(records: list[Record]) -> dict[str, int]:
    """Trials per status (ok included)."""
    return dict(Counter(r.result.status.value for r in records).most_common())


def importance(records: list[Record]) -> list[tuple[str, float]]:
    """Each knob's share of the variance of log latency among correct trials that its value
    alone explains (the correlation ratio, eta squared), largest first. Knobs interact, so
    the shares need not add up to one. Only knobs taking at most a third as many values as
    there are trials count (else each value is one trial and explains everything: the
    decisions of MetaSchedule's sketches, a trace); none below 8 correct trials."""
    ok = [r for r in records if r.result.ok and r.result.latency > 0]
    if len(ok) < 8:
        return []
    logs = [math.log(r.result.latency) for r in ok]
    mean = sum(logs) / len(logs)
    total = sum((y - mean) ** 2 for y in logs)
    if total == 0:
        return []
    shares = {}
    for knob in sorted({k for r in ok for k in r.point}):
        groups: dict[str, list[float]] = defaultdict(list)
        for record, y in zip(ok, logs):
            groups[json.dumps(record.point.get(knob), sort_keys=True)].append(y)
        if 1 < len(groups) <= len(ok) / 3:
            shares[knob] = sum(len(g) * (sum(g) / len(g) - mean) ** 2 for g in groups.values()) / total
    return sorted(shares.items(), key=lambda kv: -kv[1])


def pareto_front(records: list[Record], names: tuple[str, ...] = ("latency", "build_s")) -> list[Record]:
    """The correct records no other correct record beats on every objective (ties kept once),
    by the first objective."""
    return [record for record, _ in objectives.pareto_front([(r, r.result) for r in records], names)]


def _first_line(text: str, limit: int = 160) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else "(no reason given)"
    return line if len(line) <= limit else line[:limit] + "..."
