"""Attention as one call: softmax(Q K^T x scale + mask) V, found in a Relax module before
lowering, becomes torch's `scaled_dot_product_attention` (on a CPU its flash-attention kernel:
the scores are never written out whole, and the softmax runs on blocks in cache).

The chain, each binding used only by the next, from a `matmul` of two activations:

    s = matmul(q, kt)            kt: K transposed (its last two axes swapped: passed as K where
                                 it is a permute_dims of one, else transposed back in torch);
                                 torch.export writes a 4-D matmul as a 3-D one of its operands
                                 broadcast and merged (reshape), which are looked through
    s = s * c  or  s / c         scalar constants, any number of them: the scale (default 1)
    s = s + mask                 an additive mask broadcast to s (a tensor, or a constant)
    s = where(cond, fill, s)     a constant condition (a causal mask): an additive constant mask;
    s = where(cond, s, fill)     also with the fill where the condition is false (GPT-Neo)
                                 (any number of masks, added up; no scale after one)
    p = softmax(s, axis=-1)
    p = where(all(s == -inf), 0, p)   optional: torch's "safe softmax" (rows masked whole give 0,
                                 as torch's fused attention does), the guard computed from s
    o = matmul(p, v)             v looked through as q and kt are

with reshapes and same-shape broadcasts anywhere between (the 3-D matmul's scores made 4-D and
back); the call's output takes `o`'s shape. A scale torch.export splits as sqrt(scale) on Q and
on K^T (ViT's attention through `scaled_dot_product_attention`) is gathered into the call's.

q, k, v of rank 3 or 4, float32. Each is read where it is a view of (`views`): through the
reshapes, transposes, split parts and one-axis slices that made it from another tensor (the
Q, K and V projections' merged output, model/parallel_linear.py), which torch takes as
strided views instead of TVM copying each; the reshapes and transposes after `o`, which only
bring the heads back side by side, are views of torch's output too (its flash kernel writes
the heads side by side already). In BERT's layer these copies were five TVM kernels, 0.3-0.45
ms of 7. What is found is data (`Attention`); model/torch_ops.py makes it a call of its
registered `attention`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .dataflow import all_users, bindings_of, dtype_of, op_name, scalar_operand, shape_of, uses, value_of


@dataclass
class Attention:
    """One attention: `last` the value of the binding the call replaces (`last_var`); `k` is K
    itself, or K transposed where `transposed`."""

    q: object
    k: object
    v: object
    last: object
    last_var: object = None
    transposed: bool = False
    scale: float = 1.0
    masks: list = field(default_factory=list)  # Relax expressions added to the scores
    chain: list = field(default_factory=list)  # every call replaced, the first matmul first
    shape: tuple = ()  # o's
    # how torch makes q, k, v from the tensors passed, and the output from o: `views`' programs
    views: list = field(default_factory=lambda: ["", "", "", ""])


def find_attention(func, fused: frozenset = frozenset(), views_from: int = 0) -> list[Attention]:
    """Every attention of a Relax function (see the module's docstring); q, k and v are not
    looked through the calls in `fused` (those of layers fused with their epilogue: only
    their last call's output will exist), nor at all where q has fewer than `views_from`
    elements (torch applying the views costs more there than TVM's copies)."""
    counts, users = uses(func), all_users(func)
    values = {b.var: b.value for b in bindings_of(func)}
    found = []
    for binding in bindings_of(func):
        site = _start(binding.value, values)
        if site is not None and _follow(site, binding.var, counts, users, values):
            site.shape = shape_of(site.last)
            found.append(_as_views(site, counts, users, values, fused) if np.prod(site.shape) >= views_from else site)
    return found


VIEWS = ("relax.reshape", "relax.permute_dims")


def _as_views(site: Attention, counts: dict, users: dict, values: dict, fused: frozenset) -> Attention:
    """The site reading q, k and v where they are views of, and ending after the views of o
    that follow it alone."""
    (site.q, q), (site.k, k), (site.v, v) = (_viewed_from(x, values, fused) for x in (site.q, site.k, site.v))
    after = []
    while len(users.get(site.last_var, [])) == counts.get(site.last_var) == 1 \
            and op_name((binding := users[site.last_var][0]).value) in VIEWS:
        after.append(_step(binding.value))
        site.chain.append(binding.value)
        site.last, site.last_var = binding.value, binding.var
    site.views = [q, k, v, ";".join(after)]
    return site


def _viewed_from(expr, values: dict, fused: frozenset) -> tuple[object, str]:
    """(source, program): `expr` is the program's steps applied to `source` in turn, each a
    reshape, a transpose (permute) or a part of a split or a slice (narrow), none a call in
    `fused`."""
    steps = []
    while values.get(expr) not in fused and (step := _view_step(values.get(expr), expr, values)) is not None:
        steps.append(step[0])
        expr = step[1]
    return expr, ";".join(reversed(steps))


def _view_step(made, expr, values: dict) -> tuple[str, object] | None:
    """(the step, its input) where `made`, the value bound to `expr`, is a view of one
    tensor: a reshape, a permute, a part of a split, a slice along one axis with stride 1;
    None for anything else."""
    from tvm import relax

    if op_name(made) in VIEWS:
        return _step(made), made.args[0]
    if isinstance(made, relax.TupleGetItem) and op_name(values.get(made.tuple_value)) == "relax.split":
        split = values[made.tuple_value]
        axis = int(split.attrs.axis) % len(shape_of(split.args[0]))
        start = sum(int(part.shape[axis]) for part in split.ty.fields[:made.index])
        return _narrow_step(axis, start, shape_of(expr)[axis]), split.args[0]
    if op_name(made) != "relax.strided_slice" or len(made.args[1].fields) != 1:
        return None
    strides = [int(v.value) for v in made.args[4].fields] if len(made.args) > 4 else [1]
    axis, begin = (int(arg.fields[0].value) for arg in made.args[1:3])
    axis %= len(shape_of(made))
    size = shape_of(made.args[0])[axis]
    if strides != [1] or not -size <= begin < size:
        return None
    return _narrow_step(axis, begin % size, shape_of(made)[axis]), made.args[0]


def _narrow_step(axis: int, start: int, length: int) -> str:
    """The narrow step of a view program."""
    return f"narrow {axis} {start} {length}"


def _step(call) -> str:
    """A reshape or permute_dims as one step of a view program."""
    if op_name(call) == "relax.reshape":
        return "reshape " + " ".join(map(str, shape_of(call)))
    rank = len(shape_of(call))
    axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None else list(range(rank))[::-1]
    return "permute " + " ".join(map(str, axes))


def _start(call, values: dict) -> Attention | None:
    """A matmul of two float32 activations of rank 3 or 4: the scores, if attention follows."""
    from tvm import relax
    from tvm.ir.expr import Constant

    if not (op_name(call) == "relax.matmul" and dtype_of(call) == "float32" and len(shape_of(call)) in (3, 4)):
        return None
    if any(isinstance(a, Constant) for a in call.args):
        return None
    (q, q_scale), (kt, k_scale) = (_scaled(_peel(a, values), values) for a in call.args)
    rank = len(shape_of(q))
    if rank not in (3, 4) or len(shape_of(kt)) != rank:
        return None
    site = Attention(q, kt, None, call, transposed=True, scale=q_scale * k_scale, chain=[call])
    source = values.get(kt) if isinstance(kt, relax.Var) else None
    if op_name(source) == "relax.permute_dims" and _swaps_last_two(source, rank):
        site.k, site.transposed = source.args[0], False
    return site


def _peel(expr, values: dict):
    """The tensor `expr` is a view of: through same-shape broadcasts, and reshapes that only
    merge or split the leading (batch) axes."""
    while op_name(values.get(expr)) in ("relax.reshape", "relax.broadcast_to"):
        source = values[expr].args[0]
        if shape_of(source)[-2:] != shape_of(expr)[-2:] or np.prod(shape_of(source)) != np.prod(shape_of(expr)):
            break
        expr = source
    return expr


def _scaled(expr, values: dict) -> tuple[object, float]:
    """(x, c) where `expr` is x times the scalar constant c (looked through as `_peel` does),
    else (expr, 1)."""
    call = values.get(expr)
    if op_name(call) == "relax.multiply" and (c := scalar_operand(call, call.args[0])) is not None:
        return _peel(call.args[0], values), c
    return expr, 1.0


def _follow(site: Attention, var, counts: dict, users: dict, values: dict) -> bool:
    """Extends the site along the chain; True where it ends in softmax then a matmul by V."""
    stage, rank, scores = "scores", len(shape_of(site.q)), None
    while (binding := _next(var, stage, counts, users)) is not None:
        call, name = binding.value, op_name(binding.value)
        if name in ("relax.reshape", "relax.broadcast_to") and np.prod(shape_of(call)) == np.prod(shape_of(var)):
            pass
        elif stage == "scores" and not site.masks and name in ("relax.multiply", "relax.divide") \
                and scalar_operand(call, var) is not None and (name == "relax.multiply" or call.args[0].same_as(var)):
            value = scalar_operand(call, var)
            site.scale *= value if name == "relax.multiply" else 1 / value
        elif stage == "scores" and name in ("relax.add", "relax.where") and len(shape_of(call)) == rank \
                and (mask := (_mask if name == "relax.add" else _causal)(call, var)) is not None:
            site.masks.append(mask)
        elif stage == "scores" and name == "relax.nn.softmax" and int(call.attrs.axis) in (-1, len(shape_of(call)) - 1):
            stage, scores = "probabilities", var
        elif stage == "probabilities" and name == "relax.where" and _safe_softmax_guard(call, var, scores, values):
            pass
        elif stage == "probabilities" and name == "relax.matmul" and call.args[0].same_as(var) \
                and dtype_of(call.args[1]) == "float32":
            site.v, site.last, site.last_var = _peel(call.args[1], values), call, binding.var
            site.chain.append(call)
            return shape_of(site.v)[:-2] == shape_of(site.q)[:-2]
        else:
            return False
        site.chain.append(call)
        var = binding.var
    return False


def _next(var, stage: str, counts: dict, users: dict):
    """The one binding that uses `var` next along the chain, not counting the safe-softmax guard's
    reads of it (scores == -inf, the zeros shaped like the probabilities); None where there is
    not exactly one."""
    bindings = users.get(var, [])
    guard = "relax.equal" if stage == "scores" else "relax.full_like"
    rest = [b for b in bindings if not (op_name(b.value) == guard and b.value.args[0].same_as(var))]
    if len(rest) != 1 or counts.get(var) != len(bindings):
        return None
    return rest[0]


def _safe_softmax_guard(call, p, scores, values: dict) -> bool:
    """`call` is where(all(scores == -inf, last axis), 0, p): torch's safe softmax, which zeroes
    the rows masked whole; torch's fused attention gives those rows 0 too. The condition is
    accepted as torch's decomposition writes it, not(max(not(scores == -inf))), or with `min`
    for `max` and no negation; int8 and bool casts between are looked through."""
    from tvm.ir.expr import Constant

    cond, zeros, probabilities = call.args
    zero = values.get(zeros)
    if not probabilities.same_as(p) or not (
            (op_name(zero) == "relax.full_like" and zero.args[0].same_as(p) and float(value_of(zero.args[1])) == 0.0)
            or (isinstance(zeros, Constant) and not value_of(zeros).any())):
        return False
    negations, reduced, expr = 0, None, cond
    while (step := values.get(expr)) is not None and op_name(step) != "relax.equal":
        name = op_name(step)
        if name == "relax.logical_not":
            negations += 1
        elif name in ("relax.max", "relax.min") and reduced is None and _last_axis(step):
            reduced, negations_after = name, negations
        elif name != "relax.astype":
            return False
        expr = step.args[0]
    if step is None or reduced is None or not step.args[0].same_as(scores) or scalar_operand(step, scores) != -np.inf:
        return False
    before = negations - negations_after  # between the comparison and the reduction
    return (reduced == "relax.max" and negations_after % 2 == 1 and before % 2 == 1) or \
        (reduced == "relax.min" and negations_after % 2 == 0 and before % 2 == 0)


def _last_axis(call) -> bool:
    axes = [int(a) for a in call.attrs.axis] if call.attrs.axis is not None else []
    rank = len(shape_of(call.args[0]))
    return call.attrs.keepdims and len(axes) == 1 and axes[0] in (-1, rank - 1)


def _mask(call, var):
    """The other operand of `scores + other`, where it broadcasts to the scores (float32)."""
    other = call.args[1] if call.args[0].same_as(var) else call.args[0]
    if other.same_as(var) or dtype_of(other) != "float32" or shape_of(call) != shape_of(var):
        return None
    return other


def _causal(call, var):
    """where(cond, fill, scores), or where(cond, scores, fill), with a constant condition and a
    scalar fill: the same as adding a constant mask (fill where the scores are not kept, 0
    elsewhere), as a Relax constant."""
    from tvm import relax
    from tvm.ir.expr import Constant

    cond, when_true, when_false = call.args
    fill_when_true = when_false.same_as(var)  # where(cond, fill, scores)
    fill = when_true if fill_when_true else when_false
    if not ((fill_when_true or when_true.same_as(var)) and isinstance(cond, Constant) and isinstance(fill, Constant)
            and value_of(fill).size == 1):
        return None
    filled = value_of(cond).astype(bool) == fill_when_true  # where the fill is taken
    value = max(float(value_of(fill)), float(np.finfo(np.float32).min))
    return relax.const(np.where(filled, value, 0.0).astype(np.float32))


def combined_masks(site: Attention) -> list:
    """The site's masks as few as they can be: the constants added up into one (where two fill
    the same place, -inf, which softmax takes as eager's float32 minimum twice), tensors as they are."""
    from tvm import relax
    from tvm.ir.expr import Constant

    constants = [value_of(m) for m in site.masks if isinstance(m, Constant)]
    tensors = [m for m in site.masks if not isinstance(m, Constant)]
    if not constants:
        return tensors
    with np.errstate(over="ignore"):
        return [relax.const(functools.reduce(np.add, constants).astype(np.float32)), *tensors]


def _swaps_last_two(call, rank: int) -> bool:
    axes = [int(a) for a in call.attrs.axes] if call.attrs.axes is not None else list(range(rank))[::-1]
    return axes == [*range(rank - 2), rank - 1, rank - 2]
