"""Linear layers side by side merged into one: the matmuls that read the same activation with
constant weights (attention's Q, K and V projections), each with its bias or none, become one
matmul with their weights side by side and one bias add, then a slice per layer. The build
calling torch then makes one vendor call where it made three, on a GEMM three times wider,
which runs faster than three narrow ones.

Found in a Relax module before lowering (constants folded): `matmul(x, W)` with x 2-D (or a
reshape of an activation to 2-D: layers reading the same tensor through equal reshapes are
side by side), W a constant, optionally a reshape, then `add(·, b)` with b a constant of W's
width. A layer is merged only where its output feeds reshapes and transposes alone: one
followed by an activation or a residual add stays its own fused call (model/epilogue.py),
whose post-op a slice would lose.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .dataflow import all_users, bindings_of, dtype_of, op_name, shape_of, uses, value_of
from .layout import each_function

LAYOUT = ("relax.reshape", "relax.permute_dims", "relax.strided_slice")


@dataclass
class Layer:
    """One linear layer of a group: `x` the 2-D activation it reads, `last` the variable whose
    value its output is (the matmul's, or its bias add's, maybe reshaped)."""

    x: object
    last: object
    weight: np.ndarray  # in x out, as the matmul reads it
    bias: np.ndarray | None


def merge_parallel_linears(mod):
    """The module with each group of linear layers side by side as one (see the module's
    docstring); a module with none comes back as it was."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    groups = {layer.last: (group, i) for func in mod.functions.values() if isinstance(func, relax.Function)
              for group in find_groups(func) for i, layer in enumerate(group)}  # a layer's output -> where
    if not groups:
        return mod

    @mutator
    class Merge(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.merged: dict = {}  # id(group) -> the merged output, once emitted

        def visit_var_binding_(self, binding):
            if binding.var not in groups:
                return super().visit_var_binding_(binding)
            group, i = groups[binding.var]
            if id(group) not in self.merged:
                self.merged[id(group)] = self._merged(group)
            start = sum(layer.weight.shape[1] for layer in group[:i])
            piece = self.builder_.emit(relax.op.strided_slice(self.merged[id(group)], axes=[1], begin=[start],
                                                              end=[start + group[i].weight.shape[1]]))
            if shape_of(piece) != shape_of(group[i].last):
                piece = self.builder_.emit(relax.op.reshape(piece, shape_of(group[i].last)))
            self.set_var_remap(binding.var, piece)

        def _merged(self, group):
            """matmul(x, [W1 W2 ...]) + [b1 b2 ...], emitted where the group's first output is
            bound: every layer's x is the first's, bound before the first matmul."""
            weight = relax.const(np.concatenate([layer.weight for layer in group], axis=1))
            out = self.builder_.emit(relax.op.matmul(self.visit_expr(group[0].x), weight))
            if group[0].bias is not None:
                out = self.builder_.emit(relax.op.add(out, relax.const(np.concatenate([g.bias for g in group]))))
            return out

    return relax.transform.DeadCodeElimination()(each_function(mod, Merge(mod)))


def find_groups(func) -> list[list[Layer]]:
    """The groups of two or more linear layers side by side in a Relax function, each in the
    order its layers' matmuls are bound."""
    values = {b.var: b.value for b in bindings_of(func)}
    counts, users = uses(func), all_users(func)
    groups: dict = {}
    for binding in bindings_of(func):
        layer = _layer(binding, values, counts, users)
        if layer is not None:
            x = values.get(layer.x)
            source = x.args[0] if op_name(x) == "relax.reshape" else layer.x
            groups.setdefault((source, shape_of(layer.x), layer.bias is None), []).append(layer)
    return [group for group in groups.values() if len(group) > 1]


def _layer(binding, values: dict, counts: dict, users: dict) -> Layer | None:
    """The linear layer whose matmul `binding` binds, if it is one that may merge."""
    from tvm.ir.expr import Constant

    call = binding.value
    if not (op_name(call) == "relax.matmul" and dtype_of(call) == "float32" and isinstance(call.args[1], Constant)
            and len(shape_of(call.args[0])) == 2 and len(shape_of(call.args[1])) == 2):
        return None
    weight, var, bias = value_of(call.args[1]), binding.var, None
    following = _only_user(var, counts, users)
    if op_name(getattr(following, "value", None)) == "relax.reshape":
        var, following = following.var, _only_user(following.var, counts, users)
    add = getattr(following, "value", None)
    constant = next((a for a in getattr(add, "args", []) if isinstance(a, Constant)), None)
    if op_name(add) == "relax.add" and constant is not None and value_of(constant).shape == (weight.shape[1],):
        var, bias = following.var, value_of(constant)
    if counts.get(var) != len(users.get(var, [])) or not all(op_name(u.value) in LAYOUT for u in users.get(var, [])):
        return None
    return Layer(call.args[0], var, weight.astype(np.float32), bias)


def _only_user(var, counts: dict, users: dict):
    """The one binding that uses `var`, where it is used once and not returned."""
    bindings = users.get(var, [])
    return bindings[0] if counts.get(var) == 1 and len(bindings) == 1 else None
