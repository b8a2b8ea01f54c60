"""Points a cost model picks before a task has measured anything, kept as spread as random ones.

Each pick is the model's favourite among a few fresh random samples (a tournament), not the
top of one ranking of many: the winners of separate tournaments are as spread as the samples
(a model that misjudges the task cannot make them cluster where it is wrong), and where the
model is right each is better than a random sample, on average from its best 1/(size+1).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import numpy as np

from ..points import Point, point_key


def tournament_winners(space, score: Callable[[np.ndarray], np.ndarray],
                       features: Callable[[list[Point]], Sequence[np.ndarray | None]], rng: random.Random, n: int,
                       size: int, seen: set[str]) -> list[Point]:
    """Up to n points not in `seen`, each the best-scored of `size` random samples (samples
    without features, those that do not schedule, cannot win); winners join `seen`."""
    entrants = [p for p in (space.sample(rng, checked=False) for _ in range(n * size)) if point_key(p) not in seen]
    vectors = features(entrants)
    winners = []
    for start in range(0, len(entrants), size):
        group = [(v, p) for v, p in zip(vectors[start:start + size], entrants[start:start + size])
                 if v is not None and point_key(p) not in seen]
        if group:
            winner = group[int(np.argmax(score(np.stack([v for v, _ in group]))))][1]
            seen.add(point_key(winner))
            winners.append(winner)
    return winners
