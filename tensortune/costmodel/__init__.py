"""A cost model that transfers across tasks: features of the scheduled kernel (features.py)
ranked by a model trained on many tasks' measurements (model.py)."""
from .features import LENGTH, FeatureExtractor, target_kind
from .model import CostModel, pretrained, relevance

__all__ = ["LENGTH", "CostModel", "FeatureExtractor", "pretrained", "relevance", "target_kind"]
