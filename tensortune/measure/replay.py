"""The replay evaluator: each distinct point is measured once, then answered from a table.

Strategy comparisons draw from it so that every strategy sees identical measurements (noise
cannot decide a ranking) and a point proposed by several strategies or seeds costs one
measurement. The table lives in a records database (label search, and final for careful
re-timings), so a comparison can be resumed or re-run offline; a point missing from it is
measured by the evaluator behind it (none: offline only) and added.
"""
from __future__ import annotations

import time

from ..points import Point, point_from_json, point_key
from .evaluator import Evaluator
from ..result import Label, Result


class ReplayTable:
    """An evaluator that measures each distinct point of a task once (through `evaluator`, or
    none: offline) and answers repeats from the records."""

    def __init__(self, db, task, evaluator: Evaluator | None = None, cutoff: float = 10.0):
        self.db, self.task, self.evaluator, self.cutoff = db, task, evaluator, cutoff
        # careful re-timings ('final') override the first measurement of the same point
        self.table: dict[str, Result] = {point_key(r.point): r.result
                                         for r in db.records(task, (Label.SEARCH, Label.FINAL))}
        self.measured = 0  # points this table had to measure
        self.seconds = 0.0  # spent answering (measuring what was missing included)

    def measure(self, space, points: list[Point], cutoff_s: float = float("inf"),
                final: bool = False) -> list[Result]:
        """The table's answers; a missing point is measured with the tighter of the caller's
        cutoff and the table's own (relative to the table's best), so that an answer hardly
        depends on which run asked first. `final` answers come from the table too (see `refine`)."""
        start = time.perf_counter()
        keys = [point_key(p) for p in points]
        missing = list({k: p for k, p in zip(keys, points) if k not in self.table}.values())
        if missing:
            if self.evaluator is None:
                raise KeyError(f"{len(missing)} points are not in the replay table and nothing can measure them")
            results = self.evaluator.measure(space, missing, cutoff_s=min(cutoff_s, self.cutoff * self.best()))
            self.db.add(self.task, Label.SEARCH, missing, results)
            self.table.update(zip((point_key(p) for p in missing), results))
            self.measured += len(missing)
        self.seconds += time.perf_counter() - start
        return [self.table[k] for k in keys]

    def refine(self, space, top: int) -> None:
        """Re-time the `top` fastest points with the final (careful) settings, so that which
        point is best is not decided by one noisy first timing."""
        keys = sorted(self.table, key=lambda k: self.table[k].latency)[:top]
        points = [point_from_json(k) for k in keys]
        results = self.evaluator.measure(space, points, final=True)
        self.db.add(self.task, Label.FINAL, points, results)
        self.table.update(zip(keys, results))

    def best(self) -> float:
        return min((r.latency for r in self.table.values()), default=float("inf"))
