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
from ..measure import make_evaluator
from ..measure.evaluator import Evaluator
from ..measure.config import MeasureConfig
from ..errors import NotConvertible
from ..result import Label, Result, Status
from ..space.default import DefaultSpace
from ..target import Target, check_runnable
from ..tuning.round import TaskTuner, record, run_round
from ..tuning.tuner import TuneConfig, finish, task_tuner
from .build import compile_model, fresh_case
from .defaults import default_task, stored_default
from .importer import ImportedModel, ModelKernel
from .vm import vm_seconds

MIN_GAIN = 0.01
TRIALS_PER_KERNEL = 32  # the budget without --trials; MetaSchedule's model tuning is compared at the same


def default_trials(model: ImportedModel) -> int:
    """A budget that fits the model: TRIALS_PER_KERNEL for each tunable kernel of its all-TVM build
    (the kernels left around torch's operations are elementwise and need fewer)."""
    return TRIALS_PER_KERNEL * max(1, sum(k.tunable for k in model.kernels))


@dataclass
class TaskState:
    """A kernel of the model and how its tuning stands."""

    kernel: ModelKernel
    default: Result  # TVM's untuned kernel
    tuner: TaskTuner | None = None  # None for a kernel that is not tuned
    gains: list[float] = field(default_factory=list)  # relative improvement of each round
    weight: float = 1.0  # how much the kernel's time counts for the model (see _weigh)

    @property
    def latency(self) -> float:
        """Seconds per call of the best verified kernel so far, the default included."""
        return min(self.default.latency, self.tuner.best if self.tuner else float("inf"))

    @property
    def priority(self) -> float:
        if self.tuner is None or self.tuner.exhausted:
            return 0.0
        expected = sum(self.gains[-2:]) / len(self.gains[-2:]) if self.gains else 1.0
        return self.weight * self.kernel.calls * self.latency * max(expected, MIN_GAIN)


@dataclass
class ModelSummary:
    model: ImportedModel
    tasks: list[TaskState]
    trials: int  # search trials stored for the model's tasks
    new_trials: int
    tuning_s: float

    @property
    def estimate(self) -> tuple[float, float]:
        """(default, tuned) seconds: the sum over the all-TVM build's kernels of calls x latency,
        of those whose default could be timed (`untimed` names the others)."""
        keys = {k.workload.key for k in self.model.kernels}
        tasks = [t for t in self.tasks if t.kernel.workload.key in keys and t.default.ok]
        return sum(t.kernel.calls * t.default.latency for t in tasks), sum(t.kernel.calls * t.latency for t in tasks)


    @property
    def untimed(self) -> list[str]:
        """The kernels whose default could not be timed (left out of `estimate`), with why."""
        return [f"{t.kernel.name}: {t.default.status.value}" for t in self.tasks if not t.default.ok]


Progress = Callable[[list[TaskState], int, int], None]  # (tasks, trials done, trials wanted)


def tune_model(model: ImportedModel, target: Target, db: Database, config: TuneConfig, measure: MeasureConfig,
               progress: Progress = lambda *_: None) -> ModelSummary:
    """Tune the model's kernels with `config.trials` in all (earlier runs' included): those of
    its all-TVM build and, where it has one, of its build that calls torch (model.torch_ops)."""
    check_runnable(target)
    with db.claim([Task(k.workload.key, target.name, target.hardware, config.space) for k in model.all_kernels()]):
        return _tune_model(model, target, db, config, measure, progress)


def _tune_model(model, target, db, config, measure, progress) -> ModelSummary:
    start = time.perf_counter()
    db.start_run(config.strategy, config.seed, dict(config.options))
    db.add_model(model.name, model.key, model.kernel_rows())
    with make_evaluator(target, measure) as measurer:
        states = [_state(k, target, db, config, measurer) for k in model.all_kernels()]
        tuned = [s for s in states if s.tuner]
        past = sum(s.tuner.trials for s in tuned)
        done = past
        weigh = _weigher(model, target, states)
        progress(states, done, config.trials)
        while done < config.trials and any(s.priority > 0 for s in tuned):
            weigh()
            state = max(tuned, key=lambda s: s.priority)
            before = state.latency
            done += len(run_round(state.tuner, measurer, min(config.batch, config.trials - done)))
            state.gains.append(_gain(before, state.latency))
            progress(states, done, config.trials)
        for state in tuned:
            if state.tuner.trials > state.tuner.past:  # a resumed, finished task is not re-timed
                finish(state.tuner, measurer, target, config.final_top, baselines=False)  # its default is the baseline
    return ModelSummary(model, states, done, done - past, time.perf_counter() - start)


def _weigher(model: ImportedModel, target: Target, states: list[TaskState]) -> Callable[[], None]:
    """With two builds (all in TVM, and calling torch's operators), only the faster is kept,
    so a kernel found in one build only counts in proportion to how close that build is to the
    other: weight min(1, other's estimate / its build's estimate), where a build's estimate is
    the sum of calls x latency of its kernels, plus, for the build calling torch, the time of
    torch's operators (timed once: that build end to end at its defaults, less its kernels).
    Early rounds still go to the slow kernels of a build far behind (their time is large), and
    once its kernels are tuned, their weight has grown back."""
    if model.with_torch_ops is None:
        return lambda: None
    by_key = {s.kernel.workload.key: s for s in states}
    builds = [(model.kernels, 0.0), (model.with_torch_ops.kernels, _torch_seconds(model.with_torch_ops, target, by_key))]
    keys = [{k.workload.key for k in kernels} for kernels, _ in builds]

    def weigh() -> None:
        estimates = [fixed + sum(k.calls * by_key[k.workload.key].latency for k in kernels) for kernels, fixed in builds]
        for state in states:
            inside = [i for i, build in enumerate(keys) if state.kernel.workload.key in build]
            state.weight = 1.0 if len(inside) == 2 else min(1.0, estimates[1 - inside[0]] / estimates[inside[0]])

    return weigh


def _torch_seconds(build: ImportedModel, target: Target, by_key: dict[str, TaskState]) -> float:
    """Seconds per call of torch's operators in `build`: the build end to end with every kernel
    at its default, less the kernels' calls x default latency."""
    from .torch_ops import register

    register()
    inputs, _ = fresh_case(build, seed=0)
    whole = vm_seconds(compile_model(build, target, {}), inputs, target)
    return max(0.0, whole - sum(k.calls * by_key[k.workload.key].default.latency for k in build.kernels))


def _state(kernel: ModelKernel, target: Target, db: Database, config: TuneConfig, measurer: Evaluator) -> TaskState:
    """The kernel's default, measured once and stored; a tuner for a kernel that can be tuned."""
    default = stored_default(db, kernel.workload.key, target)
    if default is None:
        (default,) = record(measurer, db, default_task(kernel.workload.key, target),
                            DefaultSpace(kernel.workload, target), Label.DEFAULT, [{}])
    if default.status is Status.BUILD_ERROR:  # nor will the model: say so now, not after tuning
        raise NotConvertible(f"{kernel.name} does not compile in TVM even at its default schedule "
                             f"({default.reason[:200]})")
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
