"""Classifier-guided search (likelihood-free Bayesian optimisation, as in PyTorch Helion's
default autotuner).

Instead of a regression model of latency, a classifier learns "is this point in the best
`quantile` of what was measured": every measured point is an example, failed builds and
wrong kernels are negatives, so the model learns where not to go as well as where to go. A
batch screens a pool of candidates (mutants and crossovers of the best points, plus random
samples) and takes the most probable ones, kept diverse: a candidate too like one already
taken waits until the others are used up. Until `warmup` points are known, proposals are
random. The classifier is XGBoost's gradient-boosted trees (single-threaded, seeded: the same
seed gives the same proposals).
"""
from __future__ import annotations

import math

from ..points import Point, point_key
from .base import Option, Strategy


class ClassifierGuided(Strategy):
    """`--strategy lfbo`: batches screened by a classifier of the best quantile (see above)."""

    name = "lfbo"
    requires = ("xgboost",)
    options = (Option("warmup", 16, "random points before the classifier screens the pool"),
               Option("pool", 400, "candidates screened per batch", low=1),
               Option("parents", 8, "best points the pool's mutants come from", low=1),
               Option("quantile", 0.2, "the share of measured points labelled good", low=0.01, high=1),
               Option("distinct", 2, "knobs in which two points of one batch should differ"))

    def propose(self) -> Point:
        return self.space.sample(self.rng)

    def ask(self, n: int) -> list[Point]:
        pool = self._pool() if self._ready() else []
        scores = self._scores(pool) if pool else None
        if scores is None:
            return super().ask(n)
        chosen = diverse(self.space, pool, scores, n, self.seen, self.distinct)
        return chosen + (super().ask(n - len(chosen)) if len(chosen) < n else [])  # a pool short of valid points

    def _ready(self) -> bool:
        """Whether the pool can be screened yet (else proposals are random)."""
        known = self.prior + self.history
        return len(known) >= self.warmup and any(r.ok for _, r in known)

    def _scores(self, pool: list[Point]) -> list[float] | None:
        """How promising each pool point is (higher first); None when there is nothing to
        learn from yet (no point is in the best quantile, or all are)."""
        known = self.prior + self.history
        labels = _labels(known, self.quantile)
        if len(set(labels)) < 2:
            return None
        return list(self._classifier([p for p, _ in known], labels).predict_proba(self._encode(pool))[:, 1])

    def _pool(self) -> list[Point]:
        """Unmeasured candidates: mostly local moves around the best, some random ones (all
        random before a correct point is known). They are not checked for validity here
        (applying a schedule costs milliseconds): only those about to be taken are (see
        diverse)."""
        best = [p for p, _ in self.ranked(with_prior=True)[: self.parents]]
        pool: dict[str, Point] = {}
        for _ in range(self.pool):
            draw = self.rng.random()
            if draw < 0.6 and best:
                point = self.space.mutate(self.rng.choice(best), self.rng, steps=self.rng.choice((1, 1, 2, 3)),
                                          checked=False)
            elif draw < 0.8 and len(best) > 1:
                a, b = self.rng.sample(best, 2)
                point = self.space.mutate(self.space.crossover(a, b, self.rng, checked=False), self.rng,
                                          checked=False)
            else:
                point = self.space.sample(self.rng, checked=False)
            key = point_key(point)
            if key not in self.seen:
                pool.setdefault(key, point)
        return list(pool.values())

    def _classifier(self, points: list[Point], labels: list[int]):
        import xgboost

        model = xgboost.XGBClassifier(n_estimators=60, max_depth=4, learning_rate=0.3, subsample=1.0,
                                      n_jobs=1, random_state=0, verbosity=0)
        return model.fit(self._encode(points), labels)

    def _encode(self, points: list[Point]):
        import numpy as np

        return np.array([self.space.encode(p) for p in points], dtype=np.float32)

def diverse(space, pool: list[Point], scores: list[float], n: int, seen: set[str], distinct: int) -> list[Point]:
    """The n best-scored valid candidates, skipping one that differs from a taken one in
    fewer than `distinct` knobs while others remain. Each candidate looked at joins `seen`:
    taken, or invalid, it is not proposed again either way."""
    order = [pool[i] for i in sorted(range(len(pool)), key=lambda i: -scores[i])]
    chosen: list[Point] = []
    for near_ok in (False, True):  # first diverse ones, then any
        for point in order:
            if len(chosen) == n:
                return chosen
            if point_key(point) in seen or not (near_ok or all(_differing(point, c) >= distinct for c in chosen)):
                continue
            seen.add(point_key(point))
            if space.check(point) is None:
                chosen.append(point)
    return chosen


def _labels(known: list, quantile: float) -> list[int]:
    """1 for a correct point among the fastest `quantile` of the correct ones (at least one),
    0 for the rest, failures included."""
    latencies = sorted(r.latency for _, r in known if r.ok)
    threshold = latencies[max(0, math.ceil(quantile * len(latencies)) - 1)] if latencies else -1.0
    return [int(r.ok and r.latency <= threshold) for _, r in known]


def _differing(a: Point, b: Point) -> int:
    return sum(a[k] != b[k] for k in a)
