"""One trial budget across a model's kernels: rounds go where they should gain the most.

Every tunable kernel is a task tuned by the same round as a single operator (tuning/round.py).
Before any tuning each kernel's default (TVM's untuned kernel) is measured once. Then each
round goes to the task with the largest expected gain in end-to-end time:

    calls x current latency x expected relative improvement of its next round

where the expected improvement is the mean relative improvement of the task's last two rounds
(1 for a task not tuned yet: all of it may go), floored at MIN_GAIN so no task starves
forever. It is MetaSchedule's gradient task scheduler without its FLOP-based forward
estimate. Every round lands in the records before the next one starts, so an interrupted
run loses at most a round, the best-so-far model can be built from the records at any time,
and a re-run resumes (a finished model re-run measures nothing new).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..db import Database, Task
from ..measure.measurer import Measurer
from ..measure.config import MeasureConfig
from ..measure.result import Label, Result
from ..space.default import DefaultSpace
from ..target import Target, check_runnable
from ..tuning.round import TaskTuner, record, run_round
from ..tuning.tuner import TuneConfig, finish, task_tuner
from .importer import ImportedModel, ModelKernel

MIN_GAIN = 0.01
TRIALS_PER_KERNEL = 32  # the budget without --trials; MetaSchedule's model tuning is compared at the same


def default_trials(model: ImportedModel) -> int:
    """A budget that fits the model: TRIALS_PER_KERNEL for each kernel that can be tuned."""
    return TRIALS_PER_KERNEL * max(1, sum(k.tunable for k in model.kernels))


@dataclass
class TaskState:
    """A kernel of the model and how its tuning stands."""

    kernel: ModelKernel
    default: Result  # TVM's untuned kernel
    tuner: TaskTuner | None = None  # None for a kernel that is not tuned
    gains: list[float] = field(default_factory=list)  # relative improvement of each round

    @property
    def latency(self) -> float:
        """Seconds per call of the best verified kernel so far, the default included."""
        return min(self.default.latency, self.tuner.best if self.tuner else float("inf"))

    @property
    def priority(self) -> float:
        if self.tuner is None or self.tuner.exhausted:
            return 0.0
        expected = sum(self.gains[-2:]) / len(self.gains[-2:]) if self.gains else 1.0
        return self.kernel.calls * self.latency * max(expected, MIN_GAIN)


@dataclass
class ModelSummary:
    model: ImportedModel
    tasks: list[TaskState]
    trials: int  # search trials stored for the model's tasks
    new_trials: int
    tuning_s: float

    @property
    def estimate(self) -> tuple[float, float]:
        """(default, tuned) seconds: the sum over kernels of calls x latency."""
        return (sum(t.kernel.calls * t.default.latency for t in self.tasks),
                sum(t.kernel.calls * t.latency for t in self.tasks))


Progress = Callable[[list[TaskState], int, int], None]  # (tasks, trials done, trials wanted)


def tune_model(model: ImportedModel, target: Target, db: Database, config: TuneConfig, measure: MeasureConfig,
               progress: Progress = lambda *_: None) -> ModelSummary:
    """Tune the model's kernels with `config.trials` in all (earlier runs' included)."""
    check_runnable(target)
    with db.claim([Task(k.workload.key, target.name, target.hardware, config.space) for k in model.kernels]):
        return _tune_model(model, target, db, config, measure, progress)


def _tune_model(model, target, db, config, measure, progress) -> ModelSummary:
    start = time.perf_counter()
    db.add_model(model.name, model.key, model.kernel_rows())
    with Measurer(target.spec, measure) as measurer:
        states = [_state(k, target, db, config, measurer) for k in model.kernels]
        tuned = [s for s in states if s.tuner]
        past = sum(s.tuner.trials for s in tuned)
        done = past
        progress(states, done, config.trials)
        while done < config.trials and any(s.priority > 0 for s in tuned):
            state = max(tuned, key=lambda s: s.priority)
            before = state.latency
            done += len(run_round(state.tuner, measurer, min(config.batch, config.trials - done)))
            state.gains.append(_gain(before, state.latency))
            progress(states, done, config.trials)
        for state in tuned:
            if state.tuner.trials > state.tuner.past:  # a resumed, finished task is not re-timed
                finish(state.tuner, measurer, target.spec, config.final_top, baselines=False)  # its default is the baseline
    return ModelSummary(model, states, done, done - past, time.perf_counter() - start)


def _state(kernel: ModelKernel, target: Target, db: Database, config: TuneConfig, measurer: Measurer) -> TaskState:
    """The kernel's default, measured once and stored; a tuner for a kernel that can be tuned."""
    default = stored_default(db, kernel.workload.key, target)
    if default is None:
        (default,) = record(measurer, db, default_task(kernel.workload.key, target),
                            DefaultSpace(kernel.workload, target.spec), Label.DEFAULT, [{}])
    if not kernel.tunable or not default.ok:
        return TaskState(kernel, default)
    tuner = task_tuner(kernel.workload, target, db, config)
    state = TaskState(kernel, default, tuner)
    history = tuner.strategy.history  # earlier runs' rounds, for the expected gain
    best = default.latency
    for i in range(0, len(history), config.batch):
        now = min([best] + [r.latency for _, r in history[i:i + config.batch]])
        state.gains.append(_gain(best, now))
        best = now
    return state


def _gain(before: float, after: float) -> float:
    """The relative improvement of a round."""
    return max(0.0, 1 - after / before)


def default_task(key: str, target: Target) -> Task:
    """Where a kernel's default is stored: its task in the default space (TVM's own schedule)."""
    return Task(key, target.name, target.hardware, DefaultSpace.name)


def stored_default(db: Database, key: str, target: Target) -> Result | None:
    """The kernel's default (TVM's untuned kernel) as last measured on this hardware, or None."""
    stored = db.records(default_task(key, target), (Label.DEFAULT,))
    return stored[-1].result if stored else None
