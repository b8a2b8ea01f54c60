"""A replay table: each distinct point is measured once, then answered from the table.

Strategy comparisons draw from it so that every strategy sees identical measurements (noise
cannot decide a ranking) and a point proposed by several strategies or seeds costs one
measurement. The table lives in the records database, so a comparison can be resumed or
re-run offline.
"""
from __future__ import annotations

from ..space import Point, point_from_json, point_key
from .result import Result


class ReplayTable:
    def __init__(self, db, task, measurer=None, cutoff: float = 10.0):
        self.db, self.task, self.measurer, self.cutoff = db, task, measurer, cutoff
        # careful re-timings ('final') override the first measurement of the same point
        self.table: dict[str, Result] = {point_key(r.point): r.result for r in db.records(task, ("search", "final"))}
        self.measured = 0  # points this table had to measure

    def measure(self, points: list[Point]) -> list[Result]:
        keys = [point_key(p) for p in points]
        missing = list({k: p for k, p in zip(keys, points) if k not in self.table}.values())
        if missing:
            if self.measurer is None:
                raise KeyError(f"{len(missing)} points are not in the replay table and nothing can measure them")
            results = self.measurer.measure(missing, cutoff_s=self.cutoff * self.best())
            self.db.add(self.task, "search", missing, results)
            self.table.update(zip((point_key(p) for p in missing), results))
            self.measured += len(missing)
        return [self.table[k] for k in keys]

    def refine(self, top: int) -> None:
        """Re-time the `top` fastest points with the final (careful) settings, so that which
        point is best is not decided by one noisy first timing."""
        keys = sorted(self.table, key=lambda k: self.table[k].latency)[:top]
        points = [point_from_json(k) for k in keys]
        results = self.measurer.measure(points, final=True)
        self.db.add(self.task, "final", points, results)
        self.table.update(zip(keys, results))

    def best(self) -> float:
        return min((r.latency for r in self.table.values()), default=float("inf"))
