"""What a Relax function's bindings say, for the rewrites that find patterns in them
(model/epilogue.py, model/attention.py): who uses each variable, constants' values, shapes
and dtypes."""
from __future__ import annotations

import numpy as np


def bindings_of(func) -> list:
    """The function's bindings, in order, across its blocks."""
    return [b for block in func.body.blocks for b in block.bindings]


def uses(func) -> dict:
    """How many bindings use each variable, the function's output counting as one more: a
    value returned is never folded into a fused call."""
    counts: dict = {}
    for expr in [b.value for b in bindings_of(func)] + [func.body.body]:
        for var in free_vars(expr):
            counts[var] = counts.get(var, 0) + 1
    return counts


def first_users(func) -> dict:
    """Each variable's first binding that uses it."""
    return {var: bindings[0] for var, bindings in all_users(func).items()}


def all_users(func) -> dict:
    """Each variable's bindings that use it, in order."""
    users: dict = {}
    for binding in bindings_of(func):
        for var in free_vars(binding.value):
            users.setdefault(var, []).append(binding)
    return users


def free_vars(expr) -> list:
    from tvm import relax

    return list(relax.analysis.free_vars(expr)) if not isinstance(expr, relax.Var) else [expr]


def scalar_operand(call, var) -> float | None:
    """The other operand of `var op other`, where it is a scalar constant."""
    from tvm.ir.expr import Constant

    other = call.args[1] if call.args[0].same_as(var) else call.args[0]
    return float(value_of(other)) if isinstance(other, Constant) and value_of(other).size == 1 else None


def value_of(constant) -> np.ndarray:
    """A constant's value (a tensor's, or a scalar's as a 0-d array)."""
    value = constant.value
    return value.numpy() if hasattr(value, "numpy") else np.asarray(value, np.float32)


def op_name(call) -> str:
    """The Relax operator a call calls ("relax.matmul"), or "" for anything else."""
    return getattr(getattr(call, "op", None), "name", "")


def shape_of(expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.ty.shape)


def dtype_of(expr) -> str | None:
    return getattr(expr.ty, "dtype", None)
