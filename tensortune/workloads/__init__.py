"""Operators defined once in TVM tensor expressions, with references and presets.

The built-in families import TVM inside their compute functions: registering and listing
them loads no compiler (the command line checks names before paying for one)."""
from . import conv1d, dwconv2d, gemm, half  # noqa: F401  (registering the built-in families)
from .ident import resolve
from .registry import (FAMILIES, PRESETS, Family, Workload, check_memory, get_workload, load_user_family, preset, workload,
                       workload_from_key)

__all__ = ["FAMILIES", "PRESETS", "Family", "Workload", "check_memory", "get_workload", "load_user_family", "preset", "resolve",
           "workload", "workload_from_key"]
