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
from .roofline import floor_s
from .search import DEFAULT, make_strategy, metaschedule
from .search.base import fastest_first
from .space import TEMPLATES, InvalidPoint, Point, make_space, point_key
from .space.sketch import TraceSpace
from .target import Target, check_runnable
from .workloads import Workload, workload_from_key


@dataclass(frozen=True)
class TuneConfig:
    trials: int = 64  # total search trials for the task, counting earlier runs'
    strategy: str = DEFAULT
    seed: int = 0
    batch: int = 16  # candidates per round: enough to keep the builders busy
    final_top: int = 3  # best search results re-timed at the end
    cutoff: float = 10.0  # candidates this many times slower than the best so far are timed once
    space: str = "cpu-template"  # or "sketch": MetaSchedule's design space, for any operator
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
    proposals: dict[str, int] = field(default_factory=dict)  # the strategy's own account (Strategy.proposals)

    @property
    def trials_per_min(self) -> float:
        return 60 * self.new_trials / self.tuning_s if self.tuning_s > 0 else 0.0


Progress = Callable[[int, int, float], None]  # (trials done, trials wanted, best seconds so far)


class TaskTuner:
    """The loop for one task, a round at a time: ask, measure, store, tell. A model's tasks
    are each one of these, driven by the task scheduler; `tune` drives a single one."""

    def __init__(self, workload: Workload, target: Target, db: Database, config: TuneConfig):
        self.workload, self.db, self.config = workload, db, config
        self.space = make_space(config.space, workload, target.spec)
        self.task = Task(workload.key, target.name, target.hardware, config.space)
        self.floor = floor_s(workload, target)  # no correct timing can be faster
        self.strategy = make_strategy(config.strategy, self.space, config.seed)
        past = db.records(self.task)  # same workload, target and hardware: a resumed run or warm start
        self.strategy.tell([r.point for r in past], [r.result for r in past])
        self.past = len(past)
        self.exhausted = False  # the space has no unmeasured point left
        if config.warm_start_family:
            self.strategy.warm_start(*_family_evidence(workload, self.task, self.space, db))

    @property
    def trials(self) -> int:
        return len(self.strategy.history)

    @property
    def best(self) -> float:
        """Seconds of the fastest correct trial so far (infinity before one)."""
        return _best(self.strategy.history)

    def step(self, measurer: Measurer, n: int) -> int:
        """One round of up to n candidates, stored before the strategy hears of them; returns
        how many were measured (0 once the space is exhausted)."""
        points = self.strategy.ask(n)
        if not points:
            self.exhausted = True
            return 0
        results = measurer.measure(points, cutoff_s=self.config.cutoff * self.best, space=self.space)
        results = recheck_implausible(measurer, self.space, points, results, self.best, self.floor)
        self.db.add(self.task, "search", points, results)
        self.strategy.tell(points, results)
        return len(points)

    def finish(self, measurer: Measurer, baselines: bool = True) -> dict[str, list]:
        """The best few search results re-timed together, carefully, with naive and hand
        unless `baselines` is False (a model's kernel, whose baseline is its stored default)."""
        return _retime(self.space, self.strategy.ranked()[: self.config.final_top], measurer, self.db, self.task,
                       baselines)


def tune(workload: Workload, target: Target, db: Database, config: TuneConfig,
         measure: MeasureConfig, progress: Progress = lambda *_: None) -> Summary:
    """Tune one operator: `config.trials` in all (earlier runs' included), then re-time."""
    check_runnable(target)
    with db.claim([Task(workload.key, target.name, target.hardware, config.space)]):
        if config.strategy == metaschedule.NAME:
            return _tune_with_metaschedule(workload, target, db, config, measure, progress)
        return _tune(workload, target, db, config, measure, progress)


IMPLAUSIBLE = 10  # a candidate this many times faster than the best so far is checked again before it counts


def recheck_implausible(measurer: Measurer, space, points: list, results: list[Result], best: float,
                         floor: float = 0.0) -> list[Result]:
    """Candidates timed below the roofline floor (see roofline.py), or far faster than the
    best so far (not in a task's first round: there is none), are re-verified on fresh inputs
    and re-timed carefully; what they then show is what is stored, flagged in its reason. One
    still below the floor does not count: that timing cannot be right."""
    suspects = [i for i, r in enumerate(results)
                if r.ok and (r.latency < floor or r.latency * IMPLAUSIBLE < best < float("inf"))]
    again = measurer.measure([points[i] for i in suspects], final=True, space=space) if suspects else []
    results = list(results)
    for i, result in zip(suspects, again):
        flag = (f"re-checked: timed below the roofline floor {floor:.3g} s" if results[i].latency < floor
                else f"re-checked: over {IMPLAUSIBLE}x faster than the best so far")
        if result.ok and result.latency < floor:
            result = Result("implausible", f"{flag}, and again at {result.latency:.3g} s: that timing cannot be right",
                            build_s=result.build_s)
        results[i] = replace(result, reason="; ".join(filter(None, (result.reason, flag)))) if result.ok else result
    return results


def _tune(workload, target, db, config, measure, progress) -> Summary:
    start = time.perf_counter()  # tuning time includes setting up the space and the workers
    tuner = TaskTuner(workload, target, db, config)
    with Measurer(tuner.space, target.spec, measure) as measurer:
        progress(tuner.trials, config.trials, tuner.best)
        while tuner.trials < config.trials and tuner.step(measurer, min(config.batch, config.trials - tuner.trials)):
            progress(tuner.trials, config.trials, tuner.best)
        tuning_s = time.perf_counter() - start
        finals = tuner.finish(measurer)
    summary = _summary(workload, tuner.task, measure, finals, tuner.strategy.history, tuner.past, tuning_s)
    summary.proposals = tuner.strategy.proposals()
    return summary


def _tune_with_metaschedule(workload, target, db, config, measure, progress) -> Summary:
    """MetaSchedule tunes under its own loop, in a folder beside the database (so that an
    interrupted run resumes); we then re-verify and re-time each of its records, once."""
    space = make_space(TraceSpace.name, workload, target.spec)
    task = Task(workload.key, target.name, target.hardware, space.name)
    history = [(r.point, r.result) for r in db.records(task)]
    past, tuning_s, floor = len(history), 0.0, floor_s(workload, target)
    folder = metaschedule.work_dir(db.path, task)
    with Measurer(space, target.spec, measure) as measurer:
        missing = config.trials - len(metaschedule.recorded_traces(folder))
        if missing > 0 and past < config.trials:  # a finished run is not repeated
            tuning_s = metaschedule.run_metaschedule(workload, target.spec, missing, measure.threads, folder,
                                                     config.seed)
        seen = {point_key(p) for p, _ in history}
        todo = [p for p in ({"trace": t} for t in metaschedule.recorded_traces(folder)) if point_key(p) not in seen]
        for i in range(0, min(len(todo), config.trials - past), config.batch):
            points = todo[i:min(i + config.batch, config.trials - past)]
            results = measurer.measure(points, cutoff_s=config.cutoff * _best(history))
            results = recheck_implausible(measurer, space, points, results, _best(history), floor)
            db.add(task, "search", points, results)
            history += zip(points, results)
            progress(len(history), config.trials, _best(history))
        finals = _retime(space, fastest_first(history)[: config.final_top], measurer, db, task)
    return _summary(workload, task, measure, finals, history, past, tuning_s)


def _summary(workload, task, measure, finals, history, past: int, tuning_s: float) -> Summary:
    # the fastest verified kernel re-timed in the final sitting: naive or hand where no search result beats them
    timed = [f for label in ("final", "naive", "hand") for f in finals.get(label, []) if f[1].ok]
    best_point, best = min(timed, key=lambda f: f[1].latency, default=(None, None))
    return Summary(workload, task, measure.threads, best_point, best, _only(finals.get("naive")),
                   _only(finals.get("hand")), len(history), len(history) - past, tuning_s, _failures(history))


def _retime(space, ranked, measurer: Measurer, db: Database, task: Task, baselines: bool = True) -> dict[str, list]:
    """Time naive, hand (both from the target's template space, whatever the search space)
    and the top search results in one sitting, with the final settings."""
    template = make_space(TEMPLATES[measurer.target["kind"]], space.workload, measurer.target)
    labelled, out = _baselines(template) if baselines else ([], {})
    results = measurer.measure([p for _, p in labelled], final=True, space=template) if labelled else []
    results += measurer.measure([p for p, _ in ranked], final=True, space=space)
    labelled += [("final", p) for p, _ in ranked]
    db.add_many([(task, label, point, result) for (label, point), result in zip(labelled, results)])
    for (label, point), result in zip(labelled, results):
        out.setdefault(label, []).append((point, result))
    return out


def _baselines(template) -> tuple[list[tuple[str, Point]], dict[str, list]]:
    """The baselines to time, and the reason hand is not among them (it has none for this
    workload, or is invalid at this shape) as its result, to report."""
    labelled = [("naive", template.named("naive"))]
    try:
        labelled.append(("hand", template.named("hand")))
    except InvalidPoint as err:
        return labelled, {"hand": [(None, Result("invalid", str(err)))]}
    return labelled, {}


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
