"""Operators defined once in TVM tensor expressions, with references and presets."""
from . import conv1d, dwconv2d, gemm  # noqa: F401  (registering the built-in families)
from .registry import (FAMILIES, PRESETS, Family, Workload, check_memory, get_workload, load_user_family, preset, resolve, workload,
                       workload_from_key)

__all__ = ["FAMILIES", "PRESETS", "Family", "Workload", "check_memory", "get_workload", "load_user_family", "preset", "resolve",
           "workload", "workload_from_key"]
