"""A ranking model of kernel speed across tasks (XGBoost, pairwise ranking).

Trained on groups of measured kernels, one group per task: within a group it learns which
of two kernels is faster, from their features (features.py), so tasks whose latencies
differ by orders of magnitude train one model. A pretrained model ships in the package, one
file per target kind, with the hardware it was measured on and the tasks it saw; a tuning
run fine-tunes a copy on its own task's measurements (a few more trees on top).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..result import Result
from .features import FEATURE_SETS

PRETRAINED = Path(__file__).parent / "pretrained"
# pairs drawn at random within a group ("mean"), 8 per kernel: XGBoost's default for pairwise
# ranking forms pairs only among the top few, which here ranked held-out kernels far worse
PARAMS = {"objective": "rank:pairwise", "lambdarank_pair_method": "mean", "lambdarank_num_pair_per_sample": 8, "eta": 0.1, "max_depth": 6, "min_child_weight": 2, "subsample": 0.8,
          "colsample_bytree": 0.8, "seed": 0, "nthread": 1, "verbosity": 0}
ROUNDS = 200
FINE_TUNE_ROUNDS = 20


def relevance(results: list[Result]) -> np.ndarray:
    """What the ranking learns per kernel of one task: its speed relative to the task's
    fastest (1 for the fastest, 0.5 for one twice as slow), 0 for a failed one."""
    best = min((r.latency for r in results), default=float("inf"))
    return np.array([best / r.latency if r.ok else 0.0 for r in results], dtype=np.float32)


class CostModel:
    """Scores kernels by their features: a higher score means a faster kernel of the same
    task (scores of different tasks are not comparable)."""

    def __init__(self, booster, info: dict):
        self.booster, self.info = booster, info

    @classmethod
    def train(cls, groups: list[tuple[np.ndarray, np.ndarray]], info: dict, rounds: int = ROUNDS,
              threads: int = 1, features: str = "absolute") -> "CostModel":
        """From (features, relevance) per task, learning from the columns of FEATURE_SETS[features];
        `info` is kept with the model (hardware, tasks). `threads`: XGBoost's (one while
        tuning, which times kernels on the others; more offline)."""
        import xgboost

        model = cls(None, info | {"features": features})
        data = _matrix([(model.columns(f), r) for f, r in groups])
        model.booster = xgboost.train(PARAMS | {"nthread": threads}, data, num_boost_round=rounds)
        return model

    def columns(self, features: np.ndarray) -> np.ndarray:
        """The columns of full feature vectors (FeatureExtractor's) this model learns from."""
        start, stop = FEATURE_SETS[self.info.get("features", "absolute")]
        return features[:, start:stop]

    def fine_tuned(self, features: np.ndarray, relevance_: np.ndarray, rounds: int = FINE_TUNE_ROUNDS) -> "CostModel":
        """A copy with `rounds` more trees fitted to one task's own measurements."""
        import xgboost

        booster = xgboost.train(PARAMS, _matrix([(self.columns(features), relevance_)]), num_boost_round=rounds,
                                xgb_model=self.booster.copy())
        return CostModel(booster, self.info)

    def score(self, features: np.ndarray) -> np.ndarray:
        import xgboost

        return self.booster.predict(xgboost.DMatrix(self.columns(features)))

    def save(self, path: Path) -> None:
        self.booster.set_attr(tensortune=json.dumps(self.info))
        self.booster.save_model(str(path))

    @classmethod
    def load(cls, path: Path) -> "CostModel":
        import xgboost

        booster = xgboost.Booster(params={"nthread": 1}, model_file=str(path))
        return cls(booster, json.loads(booster.attr("tensortune") or "{}"))


def pretrained_path(kind: str) -> Path:
    """Where the packaged model for a target kind ('llvm', 'cuda') is kept."""
    return PRETRAINED / f"{kind}.ubj"


def pretrained(kind: str) -> CostModel | None:
    """The packaged model for a target kind ('llvm', 'cuda'), or None if there is none."""
    path = pretrained_path(kind)
    return CostModel.load(path) if path.exists() else None


def _matrix(groups: list[tuple[np.ndarray, np.ndarray]]):
    import xgboost

    features = np.concatenate([f for f, _ in groups])
    labels = np.concatenate([r for _, r in groups])
    qid = np.concatenate([np.full(len(r), i) for i, (_, r) in enumerate(groups)])
    return xgboost.DMatrix(features, label=labels, qid=qid)
