"""Tune one operator: rounds until the budget is spent, then the best re-timed with the baselines.

Every round is `round.run_round`, so each batch lands in the database before the strategy hears
of it, and the points already stored for this task are told to the strategy first: an
interrupted run resumes without measuring anything twice. At the end naive, hand and the best
few search results are timed again, together and more carefully, so the reported ratios come
from one sitting. `--strategy metaschedule` runs TVM's own tuner first, then its recorded
traces go through the same rounds (a `Given` strategy), re-verified and re-timed by us.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from typing import Callable

from ..db import Database, Task
from ..measure import make_evaluator
from ..measure.config import MeasureConfig
from ..measure.evaluator import Evaluator
from ..result import Label, Result, Status
from ..measure.roofline import floor_s
from ..objectives import pareto_front
from ..points import InvalidPoint, Point
from ..search import DEFAULT, make_strategy, metaschedule
from ..search.given import Given
from ..space import TEMPLATES, make_space
from ..space.sketch import TraceSpace
from ..target import Target, check_runnable
from ..workloads import Workload, workload_from_key
from .round import CUTOFF, TaskTuner, record, run_round


@dataclass(frozen=True)
class TuneConfig:
    """How `tune` searches: the trial budget (earlier runs' counted), strategy and its options,
    space, seed, batch size, how many finalists are re-timed, and the objectives."""

    trials: int = 64  # total search trials for the task, counting earlier runs'
    strategy: str = DEFAULT
    seed: int = 0
    batch: int = 16  # candidates per round: enough to keep the builders busy
    final_top: int = 3  # best search results re-timed at the end
    cutoff: float = CUTOFF  # candidates this many times slower than the best so far are timed once
    space: str = "cpu-template"  # or "sketch": MetaSchedule's design space, for any operator
    warm_start_family: bool = False  # also learn from other shapes of the same operator
    options: tuple[tuple[str, object], ...] = ()  # the strategy's options (search/options.py), as (name, value)
    objectives: tuple[str, ...] = ("latency",)  # several (objectives.py): the summary gives their Pareto front


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
    objectives: tuple[str, ...] = ("latency",)
    front: list[tuple[Point, Result]] = field(default_factory=list)  # the task's Pareto front, with several objectives

    @property
    def trials_per_min(self) -> float:
        return 60 * self.new_trials / self.tuning_s if self.tuning_s > 0 else 0.0


Progress = Callable[[int, int, float], None]  # (trials done, trials wanted, best seconds so far)


def task_tuner(workload: Workload, target: Target, db: Database, config: TuneConfig, space=None,
               strategy=None) -> TaskTuner:
    """The round state of a task as `config` says (its space and strategy unless given); with
    `config.warm_start_family`, the strategy also learns from other shapes' records."""
    space = space or make_space(config.space, workload, target)
    strategy = strategy or make_strategy(config.strategy, space, config.seed, dict(config.options))
    tuner = TaskTuner(Task(workload.key, target.name, target.hardware, space.name), space, strategy, db,
                      floor=floor_s(workload, target), cutoff=config.cutoff)
    if config.warm_start_family:
        strategy.warm_start(*_family_evidence(workload, tuner.task, space, db))
    return tuner


def tune(workload: Workload, target: Target, db: Database, config: TuneConfig,
         measure: MeasureConfig, progress: Progress = lambda *_: None, evaluator: Evaluator | None = None) -> Summary:
    """Tune one operator: `config.trials` in all (earlier runs' included), then re-time. With
    `evaluator`, measure with it (its workers already started; the caller closes it)."""
    check_runnable(target)
    space = TraceSpace.name if config.strategy == metaschedule.NAME else config.space
    with db.claim([Task(workload.key, target.name, target.hardware, space)]):
        db.start_run(config.strategy, config.seed, dict(config.options))
        start = time.perf_counter()  # tuning time includes setting up the space and the workers
        with nullcontext(evaluator) if evaluator else make_evaluator(target, measure) as measurer:
            if config.strategy == metaschedule.NAME:
                tuner, tuning_s = _metaschedule_tuner(workload, target, db, config, measure)
            else:
                tuner, tuning_s = task_tuner(workload, target, db, config), None
            progress(tuner.trials, config.trials, tuner.best)
            while tuner.trials < config.trials and run_round(tuner, measurer, min(config.batch,
                                                                                  config.trials - tuner.trials)):
                progress(tuner.trials, config.trials, tuner.best)
            tuning_s = time.perf_counter() - start if tuning_s is None else tuning_s
            finals = finish(tuner, measurer, target, config.final_top)
    summary = _summary(workload, tuner, measure, finals, tuning_s)
    summary.proposals = tuner.strategy.proposals()
    if len(config.objectives) > 1:  # from every stored trial of the task, whichever run measured it
        summary.objectives = config.objectives
        summary.front = pareto_front(tuner.strategy.history, config.objectives)
    return summary


def _metaschedule_tuner(workload, target, db, config, measure) -> tuple[TaskTuner, float]:
    """MetaSchedule tunes under its own loop, in a folder beside the database (so that an
    interrupted run resumes); its recorded traces, in measurement order, are then the points
    of a Given strategy: re-verified and re-timed by our rounds, each once. Returns the round
    state and MetaSchedule's own tuning seconds (0 when it had nothing left to do)."""
    space = make_space(TraceSpace.name, workload, target)
    tuner = task_tuner(workload, target, db, config, space, Given(space))
    folder = metaschedule.work_dir(db.path, tuner.task)
    missing = config.trials - len(metaschedule.recorded_traces(folder))
    tuning_s = 0.0
    if missing > 0 and tuner.past < config.trials:  # a finished run is not repeated
        tuning_s = metaschedule.run_metaschedule(workload, target, missing, measure.threads, folder, config.seed)
    tuner.strategy.give([{"trace": t} for t in metaschedule.recorded_traces(folder)])
    return tuner, tuning_s


def finish(tuner: TaskTuner, evaluator: Evaluator, target: Target, top: int,
           baselines: bool = True) -> dict[str, list]:
    """Time naive and hand (from the target's template space, whatever the search space;
    unless `baselines` is False: a model's kernel, whose baseline is its stored default) and
    the `top` best search results in one sitting, with the final settings, each stored."""
    out: dict[str, list] = {}
    if baselines:
        template = make_space(TEMPLATES[target.kind], tuner.space.workload, target)
        labelled, out = _baselines(template)
        results = record(evaluator, tuner.db, tuner.task, template, [l for l, _ in labelled],
                         [p for _, p in labelled], final=True)
        for (label, point), result in zip(labelled, results):
            out[label] = [(point, result)]
    ranked = [p for p, _ in tuner.strategy.ranked()[:top]]
    if ranked:
        results = record(evaluator, tuner.db, tuner.task, tuner.space, Label.FINAL, ranked, floor=tuner.floor, final=True)
        out[Label.FINAL] = list(zip(ranked, results))
    return out


def _summary(workload, tuner: TaskTuner, measure, finals, tuning_s: float) -> Summary:
    # the fastest verified kernel re-timed in the final sitting: naive or hand where no search result beats them
    timed = [f for label in (Label.FINAL, Label.NAIVE, Label.HAND) for f in finals.get(label, []) if f[1].ok]
    best_point, best = min(timed, key=lambda f: f[1].latency, default=(None, None))
    history = tuner.strategy.history
    return Summary(workload, tuner.task, measure.threads, best_point, best, _only(finals.get(Label.NAIVE)),
                   _only(finals.get(Label.HAND)), len(history), len(history) - tuner.past, tuning_s, _failures(history))


def _baselines(template) -> tuple[list[tuple[Label, Point]], dict[str, list]]:
    """The baselines to time, and the reason hand is not among them (it has none for this
    workload, or is invalid at this shape) as its result, to report."""
    labelled = [(Label.NAIVE, template.named("naive"))]
    try:
        labelled.append((Label.HAND, template.named("hand")))
    except InvalidPoint as err:
        return labelled, {Label.HAND: [(None, Result(Status.INVALID, str(err)))]}
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
        for stored in db.records(other):
            r = stored.result
            points.append(space.project(stored.point))
            results.append(replace(r, runs=tuple(t * scale for t in r.runs)))
    return points, results


def _only(entries: list | None) -> Result | None:
    return entries[0][1] if entries else None


def _failures(history) -> dict[str, int]:
    counts: dict[str, int] = {}
    for _, result in history:
        if not result.ok:
            counts[str(result.status)] = counts.get(str(result.status), 0) + 1
    return counts
