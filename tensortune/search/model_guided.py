"""Cost-model-guided search: a ranking model that has seen other tasks screens candidates
before any is built.

The model (costmodel.CostModel) scores MetaSchedule's per-store features of the scheduled
kernel, which mean the same in every task, so it ranks a new task's candidates from its
first batch on; the packaged pretrained model for the target kind is used unless another is
given. From the task's own measurements a copy is fine-tuned before each batch (a few trees
more), so the model learns where this task departs from the ones it was trained on. Without
any pretrained model it learns from the task's own measurements alone, once `warmup` are
known. Candidates come as in `lfbo` (mutants and crossovers of the best, and samples) and the
batch takes the best-scored ones, kept diverse.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..costmodel import CostModel, FeatureExtractor, pretrained, relevance, target_kind
from ..points import Point, point_key
from .lfbo import ClassifierGuided


class ModelGuided(ClassifierGuided):
    """`--strategy model`: batches ranked by a cost model that transfers across tasks."""

    name = "model"
    # each candidate of the pool is scheduled and its features extracted (5-10 ms): a smaller one
    options = tuple(replace(o, default=160) if o.name == "pool" else o for o in ClassifierGuided.options)

    def __init__(self, space, seed: int = 0, cost_model: CostModel | None | str = "pretrained", **options):
        """`cost_model`: the base model; by default the packaged one for the space's target
        kind (if any); None to learn from the task's own measurements only."""
        super().__init__(space, seed, **options)
        self.base = pretrained(target_kind(space)) if cost_model == "pretrained" else cost_model
        self.extract = FeatureExtractor(space)
        self.features: dict[str, np.ndarray | None] = {}  # by point key; None: the point does not schedule

    def _ready(self) -> bool:
        known = self.prior + self.history
        return self.base is not None or (len(known) >= self.warmup and any(r.ok for _, r in known))

    def _scores(self, pool: list[Point]) -> list[float] | None:
        model = self._model()
        vectors = self._features(pool)
        valid = [i for i, v in enumerate(vectors) if v is not None]
        if model is None or not valid:
            return None
        scores = np.full(len(pool), -np.inf)
        scores[valid] = model.score(np.stack([vectors[i] for i in valid]))
        for i in set(range(len(pool))) - set(valid):
            self.seen.add(point_key(pool[i]))  # does not schedule: never proposed
        return list(scores)

    def _model(self) -> CostModel | None:
        """The base model fine-tuned on this task's measurements; without a base, a model of
        them alone (None while none is correct)."""
        known = self.prior + self.history
        kept = [(v, r) for v, (_, r) in zip(self._features([p for p, _ in known]), known) if v is not None]
        if not any(r.ok for _, r in kept):
            return self.base
        group = (np.stack([v for v, _ in kept]), relevance([r for _, r in kept]))
        if self.base is None:
            return CostModel.train([group], {"tasks": [self.space.workload.key]})
        return self.base.fine_tuned(*group)

    def _features(self, points: list[Point]) -> list[np.ndarray | None]:
        missing = {point_key(p): p for p in points if point_key(p) not in self.features}
        self.features.update(zip(missing, self.extract(list(missing.values()))))
        return [self.features[point_key(p)] for p in points]
