"""The one tuning round every driver runs: ask -> measure -> re-check the implausible -> store
-> tell.

`tune` (tuner.py), the model scheduler (model/scheduler.py), MetaSchedule's records, an
agent's workbench (agents/workbench.py), a batch coming home (tuning/batch.py) and the
benchmarks' replays all go through `run_round`; re-timings and baselines through `record`,
its measure-and-store half. So the cutoff, the implausible re-check and storing each batch
in one transaction before the strategy hears of it exist once, whatever the evaluator
(local, replay, batch: measure/evaluator.py) and whatever proposes the points.
"""
from __future__ import annotations

from dataclasses import replace

from ..db import Database, Task
from ..measure.evaluator import Evaluator
from ..result import Label, Result, Status
from ..points import Point
from ..search.base import Strategy

IMPLAUSIBLE = 10  # a candidate this many times faster than the best so far is checked again before it counts
CUTOFF = 10.0  # a candidate this many times slower than the best so far is timed by one call


class TaskTuner:
    """One task's tuning state: its records key, space, strategy (told every stored record of
    the task first, so that a resumed run measures nothing twice) and the thresholds of its
    checks. `floor` is the roofline's least possible time (measure/roofline.py)."""

    def __init__(self, task: Task, space, strategy: Strategy, db: Database, floor: float = 0.0,
                 cutoff: float = CUTOFF, label: Label = Label.SEARCH):
        self.task, self.space, self.strategy, self.db = task, space, strategy, db
        self.floor, self.cutoff, self.label = floor, cutoff, label
        past = db.records(task, (label,))
        strategy.tell([r.point for r in past], [r.result for r in past])
        self.past = len(past)
        self.exhausted = False  # the strategy has no unmeasured point left

    @property
    def trials(self) -> int:
        return len(self.strategy.history)

    @property
    def best(self) -> float:
        """Seconds of the fastest correct trial so far (infinity before one)."""
        return min((r.latency for _, r in self.strategy.history), default=float("inf"))


def run_round(tuner: TaskTuner, evaluator: Evaluator, n: int) -> list[tuple[Point, Result]]:
    """One round of up to n candidates, stored before the strategy hears of them; returns
    what was measured (nothing once the strategy is exhausted)."""
    points = tuner.strategy.ask(n)
    if not points:
        tuner.exhausted = True
        return []
    results = record(evaluator, tuner.db, tuner.task, tuner.space, tuner.label, points,
                     best=tuner.best, floor=tuner.floor, cutoff=tuner.cutoff)
    tuner.strategy.tell(points, results)
    return list(zip(points, results))


def record(evaluator: Evaluator, db: Database, task: Task, space, label: Label | list[Label], points: list[Point],
           best: float = float("inf"), floor: float = 0.0, cutoff: float = CUTOFF, final: bool = False) -> list[Result]:
    """Measure, re-check the implausible, store in one transaction: the half of a round that
    re-timings and baselines use too. `label` is the points' label, or one label per point.
    A candidate `cutoff` times slower than `best` is timed by one call (not in a final
    re-timing, whose every kernel is timed carefully)."""
    cutoff_s = float("inf") if final else cutoff * best
    results = evaluator.measure(space, points, cutoff_s=cutoff_s, final=final)
    results = recheck_implausible(evaluator, space, points, results, best, floor)
    labels = label if isinstance(label, list) else [label] * len(points)
    db.add_many([(task, l, p, r) for l, p, r in zip(labels, points, results)])
    return results


def recheck_implausible(evaluator: Evaluator, space, points: list[Point], results: list[Result], best: float,
                        floor: float = 0.0) -> list[Result]:
    """Candidates timed below the roofline floor, or far faster than the best so far (not in
    a task's first round: there is none), are re-verified on fresh inputs and re-timed
    carefully; what they then show is what is stored, flagged in its reason. One still below
    the floor does not count: that timing cannot be right."""
    suspects = [i for i, r in enumerate(results)
                if r.ok and (r.latency < floor or r.latency * IMPLAUSIBLE < best < float("inf"))]
    again = evaluator.measure(space, [points[i] for i in suspects], final=True) if suspects else []
    results = list(results)
    for i, result in zip(suspects, again):
        flag = (f"re-checked: timed below the roofline floor {floor:.3g} s" if results[i].latency < floor
                else f"re-checked: over {IMPLAUSIBLE}x faster than the best so far")
        if result.ok and result.latency < floor:
            result = Result(Status.IMPLAUSIBLE, f"{flag}, and again at {result.latency:.3g} s: that timing cannot "
                            "be right", build_s=result.build_s)
        results[i] = replace(result, reason="; ".join(filter(None, (result.reason, flag)))) if result.ok else result
    return results
