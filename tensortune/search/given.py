"""Points chosen outside the search loop, asked in the order given: an agent's schedules, the
traces MetaSchedule's own tuner measured, a batch's candidates coming home. Through it those
drivers run the same tuning round as every strategy (tuning/round.py). Not a strategy a user
picks: it proposes nothing of its own."""
from __future__ import annotations

from ..points import Point, point_key
from .base import Strategy


class Given(Strategy):
    """Points chosen outside the search (an agent's, MetaSchedule's, a batch's), asked in the order given."""
    name = "given"
    replayable = False

    def __init__(self, space, points: list[Point] = (), seed: int = 0):
        super().__init__(space, seed)
        self.queue: list[Point] = list(points)

    def give(self, points: list[Point]) -> None:
        """More points to ask, after those already given."""
        self.queue.extend(points)

    def ask(self, n: int) -> list[Point]:
        """The next n given points not measured before (a point told already is skipped)."""
        out: list[Point] = []
        while self.queue and len(out) < n:
            point = self.queue.pop(0)
            key = point_key(point)
            if key not in self.seen:
                self.seen.add(key)
                out.append(point)
        return out
