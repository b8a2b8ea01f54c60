"""Whole PyTorch models: import (kernels as tasks), one budget across tasks, build and check."""
from .build import BuiltModel, build_model, export_model
from .importer import ImportedModel, ModelKernel, import_model, load_factory
from .scheduler import ModelSummary, TaskState, default_trials, tune_model

__all__ = ["BuiltModel", "ImportedModel", "ModelKernel", "ModelSummary", "TaskState", "build_model", "default_trials", "export_model",
           "import_model", "load_factory", "tune_model"]
