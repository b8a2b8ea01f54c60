"""The closed loop: ask the strategy, build and run the batch, store, tell; then re-time.

Every batch lands in the database before the strategy hears of it, and the points already
stored for this task are told to the strategy first, so an interrupted run resumes without
measuring anything twice. At the end naive, hand and the best few search results are timed
again, together and more carefully, so the reported ratios come from one sitting.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable

from .db import Database, Task
from .measure import Measurer, MeasureConfig, Result
from .search import DEFAULT, make_strategy
from .space import InvalidPoint, Point, make_space
from .target import Target
from .workloads import Workload, workload_from_key


@dataclass(frozen=True)
class TuneConfig:
    trials: int = 64  # total search trials for the task, counting earlier runs'
    strategy: str = DEFAULT
    seed: int = 0
    batch: int = 16  # candidates per round: enough to keep the builders busy
    final_top: int = 3  # best search results re-timed at the end
    cutoff: float = 10.0  # candidates this many times slower than the best so far are timed once
    space: str = "cpu-template"
    warm_start_family: bool = False  # also learn from other shapes of the same operator


@dataclass
class Summary:
    workload: Workload
    task: Task
    threads: int
    best_point: Point | None
    best: Result | None
    naive: Result | None
    hand: Result | None
    trials: int  # search trials stored for the task
    new_trials: int  # measured by this run
    tuning_s: float
    failures: dict[str, int] = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)

    @property
    def trials_per_min(self) -> float:
        return 60 * self.new_trials / self.tuning_s if self.tuning_s > 0 else 0.0


Progress = Callable[[int, int, float], None]  # (trials done, trials wanted, best seconds so far)


def tune(workload: Workload, target: Target, db: Database, config: TuneConfig,
         measure: MeasureConfig, progress: Progress = lambda *_: None) -> Summary:
    space = make_space(config.space, workload)
    task = Task(workload.key, target.name, target.hardware, config.space)
    strategy = make_strategy(config.strategy, space, config.seed)
    past = db.records(task)  # same workload, target and hardware: a resumed run or warm start
    strategy.tell([r.point for r in past], [r.result for r in past])
    if config.warm_start_family:
        strategy.warm_start(*_family_evidence(workload, task, space, db))
    with Measurer(workload, config.space, target.spec, measure) as measurer:
        start, done = time.perf_counter(), len(past)
        progress(done, config.trials, _best(strategy.history))
        while done < config.trials:
            points = strategy.ask(min(config.batch, config.trials - done))
            if not points:
                break  # the space has no unmeasured point left
            results = measurer.measure(points, cutoff_s=config.cutoff * _best(strategy.history))
            db.add(task, "search", points, results)
            strategy.tell(points, results)
            done += len(points)
            progress(done, config.trials, _best(strategy.history))
        tuning_s = time.perf_counter() - start
        finals = _retime(space, strategy.ranked()[: config.final_top], measurer, db, task)
    best_point, best = min(finals.get("final", []), key=lambda f: f[1].latency, default=(None, None))
    return Summary(workload, task, measure.threads, best_point, best,
                   _only(finals.get("naive")), _only(finals.get("hand")), done, done - len(past), tuning_s,
                   _failures(strategy.history))


def _retime(space, ranked, measurer: Measurer, db: Database, task: Task) -> dict[str, list]:
    """Time naive, hand and the top search results in one batch with the final settings."""
    labelled = [("naive", space.named("naive"))]
    try:
        labelled.append(("hand", space.named("hand")))
    except InvalidPoint:
        pass  # a workload without a hand schedule
    labelled += [("final", point) for point, _ in ranked]
    results = measurer.measure([p for _, p in labelled], final=True)
    out: dict[str, list] = {}
    for (label, point), result in zip(labelled, results):
        db.add(task, label, [point], [result])
        out.setdefault(label, []).append((point, result))
    return out


def _family_evidence(workload: Workload, task: Task, space, db: Database) -> tuple[list, list]:
    """Other shapes' records on this hardware, projected into this space, latencies rescaled
    by FLOPs so that a kernel's throughput carries over."""
    points, results = [], []
    for other in db.tasks():
        sibling = workload_from_key(other.workload)
        if sibling is None or sibling.name != workload.name or other.workload == task.workload \
                or (other.target, other.hardware, other.space) != (task.target, task.hardware, task.space):
            continue
        scale = workload.flops / sibling.flops
        for record in db.records(other):
            r = record.result
            points.append(space.project(record.point))
            results.append(replace(r, runs=tuple(t * scale for t in r.runs)))
    return points, results


def _only(entries: list | None) -> Result | None:
    return entries[0][1] if entries else None


def _best(history) -> float:
    return min((r.latency for _, r in history), default=float("inf"))


def _failures(history) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, result in history:
        if not result.ok:
            counts[result.status] = counts.get(result.status, 0) + 1
    return counts
