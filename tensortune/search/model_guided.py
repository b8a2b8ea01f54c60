"""Cost-model-guided search: MetaSchedule's evolutionary search on a cost model, inside our loop.

The cost model (costmodel.CostModel) scores MetaSchedule's per-store features of the
scheduled kernel. Two models take turns. While fewer than `warmup` points are measured, the
packaged pretrained model for the target kind (unless another is given) picks a share of each
batch (`pretrained`, half by default) and the rest is random: features mean the same in every
task, so it ranks a new task's candidates before anything is measured, and the random half
samples the space broadly whatever it believes. Each of its picks wins a tournament among
`tournament` fresh random samples (tournament.py), not the top of one ranking: a model that
misjudges a task made its top picks cluster where it was wrong (on a MobileNetV2 depthwise
convolution, every seed's first 16 trials stayed 1.7x off MetaSchedule's). Then a model of
the task's own measurements alone, retrained every batch, as MetaSchedule's is. (Fine-tuning
the pretrained model on the task instead kept it where it started: on conv1d-1024 in the
sketch space it never tried an innermost tile of 1, that of the fastest kernels.)

Scoring a point by its features costs an apply and an extraction (5-13 ms in the sketch
space), too dear for the thousands of candidates MetaSchedule looks at per round. So each
batch:
1. every point whose features are known is scored by the model, and a cheap surrogate
   (gradient-boosted trees on the space's encoding, microseconds a point) learns those
   scores: the cost model distilled into the knobs;
2. an evolutionary search on the surrogate (inner_search.evolve: `population` points for
   `generations` generations, started from the best measured and the model's own favourites)
   looks at thousands of candidates;
3. its best unseen ones (`screen` per point asked) get their features and the model's score;
4. the batch takes the best-scored known candidates, kept diverse, and an `epsilon` share of
   random points (MetaSchedule's epsilon-greedy: a misleading model cannot keep the search
   from ever seeing where it is wrong).
"""
from __future__ import annotations

import numpy as np

from ..costmodel import CostModel, FeatureExtractor, pretrained, relevance, target_kind
from ..points import Point, point_key
from .base import Option, Strategy
from .inner_search import evolve
from .lfbo import diverse
from .tournament import tournament_winners

FIRST_SHORTLIST = 2  # times the shortlist, random points scored before the first batch: the surrogate's first lesson


class ModelGuided(Strategy):
    """`--strategy model`: MetaSchedule's evolutionary search on a cost model (see above)."""

    name = "model"
    requires = ("xgboost",)
    options = (Option("warmup", 16, "points measured (half of them random) before a model of the task takes over"),
               Option("parents", 16, "best measured points (and as many model favourites) the inner search starts from", low=1),
               Option("population", 512, "candidates per generation of the inner search", low=1),
               Option("generations", 4, "generations of the inner search per batch", low=1),
               Option("screen", 4, "inner-search winners scored by the cost model from their features, per point asked", low=1),
               Option("epsilon", 0.1, "share of each batch drawn at random", low=0, high=1),
               Option("pretrained", 0.5, "share of each batch the packaged model picks before `warmup` points are "
                      "measured (the rest at random)", low=0, high=1),
               Option("tournament", 4, "random samples each of the packaged model's picks is chosen from (1: random "
                      "picks)", low=1),
               Option("distinct", 2, "knobs in which two points of one batch should differ"))

    def __init__(self, space, seed: int = 0, cost_model: CostModel | None | str = "pretrained", **options):
        """`cost_model`: the model for the first `warmup` points; by default the packaged one
        for the space's target kind (if any); None for random ones."""
        super().__init__(space, seed, **options)
        self.base = pretrained(target_kind(space)) if cost_model == "pretrained" else cost_model
        self.extract = FeatureExtractor(space)
        self.features: dict[str, np.ndarray | None] = {}  # by point key; None: the point does not schedule
        self.points: dict[str, Point] = {}  # every point with known features, by key

    def propose(self) -> Point:
        return self.space.sample(self.rng)

    def ask(self, n: int) -> list[Point]:
        model = self._model()
        cold = len(self.prior + self.history) < self.warmup
        explore = 1 - self.pretrained if cold else self.epsilon
        greedy = n - min(n, round(explore * n)) if model is not None else 0
        if not greedy:
            chosen = []
        elif cold:
            chosen = tournament_winners(self.space, model.score, self._features, self.rng, greedy, self.tournament,
                                        self.seen)
        else:
            chosen = diverse(self.space, *self._candidates(model, self.screen * greedy), greedy, self.seen, self.distinct)
        return chosen + super().ask(n - len(chosen))  # the random share, and a short list's shortfall

    def _candidates(self, model: CostModel, shortlist: int) -> tuple[list[Point], list[float]]:
        """Unproposed points with their cost-model scores: the inner search's `shortlist`
        best and every earlier one not yet taken."""
        if not self.points:
            self._features([self.space.sample(self.rng, checked=False) for _ in range(FIRST_SHORTLIST * shortlist)])
        scores = self._scored(model)
        start = [p for p, _ in self.ranked(with_prior=True)[: self.parents]]
        start += [self.points[k] for k in sorted(scores, key=scores.get, reverse=True)[: self.parents]]
        surrogate = self._surrogate(scores)
        found = evolve(self.space, surrogate, start, self.rng, self.population, self.generations,
                       exclude=self.seen | set(self.features))
        self._features(found[:shortlist])
        scores = self._scored(model)
        keys = [k for k in scores if k not in self.seen]
        return [self.points[k] for k in keys], [scores[k] for k in keys]

    def _scored(self, model: CostModel) -> dict[str, float]:
        """The model's score of every point whose features are known and which schedules."""
        keys = [k for k, v in self.features.items() if v is not None]
        if not keys:
            return {}
        return dict(zip(keys, model.score(np.stack([self.features[k] for k in keys])).tolist()))

    def _surrogate(self, scores: dict[str, float]):
        """A function scoring points from their encoding alone, fitted to the cost model's
        scores (points that do not schedule learnt as worse than any that does)."""
        import xgboost

        floor = min(scores.values(), default=0.0) - 1.0
        keys = list(self.features)
        targets = [scores.get(k, floor) for k in keys]
        fitted = xgboost.XGBRegressor(n_estimators=80, max_depth=6, learning_rate=0.2, n_jobs=1, random_state=0,
                                      verbosity=0).fit(self._encode([self.points[k] for k in keys]), targets)
        return lambda points: fitted.predict(self._encode(points))

    def _encode(self, points: list[Point]) -> np.ndarray:
        return np.array([self.space.encode(p) for p in points], dtype=np.float32)

    def _model(self) -> CostModel | None:
        """The base model while fewer than `warmup` points are measured, then a model of the
        task's measurements (None while none of them is correct)."""
        known = self.prior + self.history
        if len(known) < self.warmup:
            return self.base
        kept = [(v, r) for v, (_, r) in zip(self._features([p for p, _ in known]), known) if v is not None]
        if not any(r.ok for _, r in kept):
            return None
        group = (np.stack([v for v, _ in kept]), relevance([r for _, r in kept]))
        return CostModel.train([group], {"tasks": [self.space.workload.key]})

    def _features(self, points: list[Point]) -> list[np.ndarray | None]:
        missing = {point_key(p): p for p in points if point_key(p) not in self.features}
        self.features.update(zip(missing, self.extract(list(missing.values()))))
        self.points.update(missing)
        return [self.features[point_key(p)] for p in points]
