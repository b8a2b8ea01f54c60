"""MetaSchedule's inner loop: an evolutionary search on a model instead of on measurements.

Each batch a population, started from given points (the best measured, the model's own
favourites) and filled with random samples, is mutated for a few generations; every
generation is scored by a cheap function (a model's prediction: microseconds a point, no
build) and parents are drawn by rank, so thousands of candidates are looked at for the price
of none measured. What comes back is every candidate seen, best first, for a costlier judge
to shortlist. Points are not checked for validity here (that costs an apply each).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from ..points import Point, point_key

MUTATION_RATE = 0.85  # MetaSchedule's genetic_mutate_prob: the rest of the children are their parent again


def evolve(space, score: Callable[[list[Point]], Sequence[float]], start: list[Point], rng: random.Random,
           population: int, generations: int, exclude: set[str]) -> list[Point]:
    """Every point scored over `generations` generations of `population`, best first, except
    those whose key is in `exclude` (measured or proposed before)."""
    seen: dict[str, tuple[float, Point]] = {}
    current = _fill(space, start, rng, population)
    for generation in range(generations):
        values = list(score(current))
        for point, value in zip(current, values):
            seen.setdefault(point_key(point), (value, point))
        if generation < generations - 1:
            current = _fill(space, _children(space, current, values, rng), rng, population)
    return [p for k, (_, p) in sorted(seen.items(), key=lambda item: -item[1][0]) if k not in exclude]


def _fill(space, points: list[Point], rng: random.Random, population: int) -> list[Point]:
    """The distinct points of `points`, topped up with random samples to `population`."""
    unique = {point_key(p): p for p in points}
    for _ in range(population * 4):  # a tiny space may hold fewer points than the population
        if len(unique) >= population:
            break
        point = space.sample(rng, checked=False)
        unique.setdefault(point_key(point), point)
    return list(unique.values())[:population]


def _children(space, parents: list[Point], values: list[float], rng: random.Random) -> list[Point]:
    """As many children as parents, each of a parent drawn with weight falling linearly with
    its rank (scale-free: the model's scores need not be latencies), mostly mutated."""
    order = sorted(range(len(parents)), key=lambda i: -values[i])
    weights = [len(order) - rank for rank in range(len(order))]
    drawn = rng.choices([parents[i] for i in order], weights, k=len(parents))
    return [space.mutate(p, rng, checked=False) if rng.random() < MUTATION_RATE else p for p in drawn]
