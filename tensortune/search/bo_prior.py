"""Bayesian optimisation that starts from what the cost model knows (`--strategy bo-model`).

Plain BO starts from nothing: its first points are random, and a GP fitted on a handful of
them sees a needle only once something near it was measured. Here the packaged cost model's
opinion of each point is one more input of the GP, beside the space's encoding: its score
as a percentile among every point scored in this run (the ranking model's scores have no
scale of their own). Where the model is right, a few trials show the GP a trend along that
input, which it extrapolates to unmeasured points the model likes, anywhere in the space;
where the model is wrong, the GP gives that input a long length-scale and falls back on the
encoding: a prior the measurements can overrule. The initial design is tournament winners
(tournament.py) instead of random points.

Scoring a point costs a feature extraction (an apply and a lowering, 5-13 ms in the sketch
space), so the candidate pool is half bo's. Without a packaged model for the target kind
(CUDA) this is bo.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..costmodel import CostModel, FeatureExtractor, pretrained, target_kind
from ..points import Point, point_key
from .base import Option
from .bo import BayesianOptimisation
from .tournament import tournament_winners

POOL = {"pool_samples": 80, "pool_mutants": 240}  # half bo's: each candidate is scored from its features


class ModelPriorBO(BayesianOptimisation):
    """`--strategy bo-model`: bo with the cost model's score as an input of its GPs (see above)."""

    name = "bo-model"
    requires = (*BayesianOptimisation.requires, "xgboost")
    options = (*(replace(o, default=POOL.get(o.name, o.default)) for o in BayesianOptimisation.options),
               Option("tournament", 4, "random samples each point of the initial design is chosen from (1: random "
                      "points)", low=1))

    def __init__(self, space, seed: int = 0, cost_model: CostModel | None | str = "pretrained", **options):
        """`cost_model`: by default the packaged one for the space's target kind (if any);
        None for plain bo."""
        super().__init__(space, seed, **options)
        self.model = pretrained(target_kind(space)) if cost_model == "pretrained" else cost_model
        self.extract = FeatureExtractor(space) if self.model is not None else None
        self.scores: dict[str, float] = {}  # the model's score by point key; -inf: the point does not schedule

    def ask(self, n: int) -> list[Point]:
        if self.model is None or len(self.observations()) >= self.initial:
            return super().ask(n)
        chosen = tournament_winners(self.space, self.model.score, self.extract, self.rng, n, self.tournament, self.seen)
        return chosen + super().ask(n - len(chosen))  # random, as bo's initial design, for any shortfall

    def _select(self, pool: list[Point], n: int) -> list[Point]:
        if self.model is not None:  # scored first, so the measured points' percentiles are among the same scores
            self._score([p for p in pool if point_key(p) not in self.scores])
        return super()._select(pool, n)

    def inputs(self, points: list[Point]):
        """The encoding and, last, the model's score of each point as a percentile (in [0, 1])."""
        import torch

        encoded = super().inputs(points)
        if self.model is None:
            return encoded
        self._score([p for p in points if point_key(p) not in self.scores])
        known = np.sort([s for s in self.scores.values() if s > -np.inf])
        percentiles = [np.searchsorted(known, self.scores[point_key(p)], side="right") / max(len(known), 1)
                       for p in points]
        return torch.cat([encoded, torch.tensor(percentiles, dtype=torch.double).unsqueeze(-1)], dim=1)

    def _score(self, points: list[Point]) -> None:
        vectors = self.extract(points)
        valid = [v for v in vectors if v is not None]
        scored = iter(self.model.score(np.stack(valid)).tolist() if valid else [])
        for point, vector in zip(points, vectors):
            self.scores[point_key(point)] = -np.inf if vector is None else next(scored)
