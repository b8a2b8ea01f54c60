"""A convolution or linear layer with a constant weight, and the epilogue oneDNN can fuse into it.

Found in a Relax module before lowering (convolutions in NHWC, constants folded, dead
bindings removed): from each `conv2d(x, W)` (NHWC/OHWI, symmetric padding) or `matmul(x, W)`
(x 2-D), W a constant, the chain of bindings that only it uses is followed:

- an affine part: additions, subtractions, multiplications and divisions by constants that
  vary only along the output channel (a bias, and batch norm as inference decomposes it); it
  is folded into the weight and the bias here, once, at build;
- then one activation oneDNN applies as a post-op (relu, gelu, silu, sigmoid, tanh, and clip
  as model/torch_ops.py writes it, maximum then minimum by scalars: hardtanh), or a residual
  add of another tensor of the output's shape (then relu, for a convolution).

A linear layer's chain may pass through reshapes (a 3-D activation flattened around the
matmul); the site records the shape its last binding has. What is found is data (`Site`);
model/torch_ops.py turns it into a call of the registered functions (model/onednn.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .dataflow import bindings_of, dtype_of, first_users, scalar_operand, shape_of, uses, value_of

# Relax operator -> oneDNN unary post-op (attr, algorithm)
UNARY = {"relax.nn.relu": ("relu", ""), "relax.nn.gelu": ("gelu", "none"), "relax.nn.gelu_tanh": ("gelu", "tanh"),
         "relax.nn.silu": ("swish", ""), "relax.sigmoid": ("sigmoid", ""), "relax.tanh": ("tanh", "")}
LARGEST = float(np.finfo(np.float32).max)
AFFINE = ("relax.add", "relax.subtract", "relax.multiply", "relax.divide")


@dataclass
class Site:
    """One fusable layer: `anchor` the conv2d/matmul call, `last` the call whose value the
    fused call replaces; the weight in the layout torch packs (conv OIHW, linear out x in)
    with the affine part folded in, and the bias."""

    kind: str  # "conv2d" or "linear"
    anchor: object
    last: object
    weight: np.ndarray
    bias: np.ndarray
    unary: tuple[str, list[float], str] = ("none", [], "")  # attr, scalars, algorithm
    residual: object = None  # the tensor added after the affine part
    shape: tuple[int, ...] = ()  # the last binding's shape
    chain: list = field(default_factory=list)  # every call replaced, anchor first


def find_sites(func) -> list[Site]:
    """Every fusable layer of a Relax function (see the module's docstring)."""
    counts, users = uses(func), first_users(func)
    sites, claimed = [], set()  # a residual add two layers could take goes to the first
    for binding in bindings_of(func):
        site = _anchor(binding.value)
        if site is not None:
            _follow(site, binding.var, counts, users, claimed)
            claimed.update(site.chain)
            sites.append(site)
    return sites


def _anchor(call) -> Site | None:
    """A conv2d or a linear matmul with a constant float32 weight, as a site with no epilogue."""
    from tvm import relax
    from tvm.ir.expr import Constant

    if not isinstance(call, relax.Call) or not hasattr(call.op, "name") or dtype_of(call) != "float32":
        return None
    weight = call.args[1] if len(call.args) > 1 else None
    if not isinstance(weight, Constant):
        return None
    w = value_of(weight)
    if call.op.name == "relax.nn.conv2d":
        a = call.attrs
        top, left, bottom, right = (int(p) for p in a.padding)
        if (top, left) != (bottom, right) or (a.data_layout, a.kernel_layout, a.out_layout) != ("NHWC", "OHWI", "NHWC"):
            return None
        w, out = np.ascontiguousarray(w.transpose(0, 3, 1, 2)), w.shape[0]  # OIHW, as torch packs it
    elif call.op.name == "relax.matmul" and len(call.args[0].ty.shape) == 2 and w.ndim == 2:
        w, out = np.ascontiguousarray(w.T), w.shape[1]
    else:
        return None
    kind = "conv2d" if call.op.name == "relax.nn.conv2d" else "linear"
    return Site(kind, call, call, w.astype(np.float32), np.zeros(out, np.float32), shape=shape_of(call), chain=[call])


def _follow(site: Site, var, counts: dict, users: dict, claimed: set) -> None:
    """Extends the site along the bindings only it uses and no earlier site took: the affine
    part, then one activation or a residual add (and relu after it, for a convolution)."""
    scale = np.ones(site.weight.shape[0], np.float32)
    stage = "affine"
    while counts.get(var) == 1 and var in users and users[var].value not in claimed:
        binding = users[var]
        call, name = binding.value, getattr(getattr(binding.value, "op", None), "name", "")
        if stage == "affine" and name in AFFINE and _affine(site, call, var, scale):
            pass
        elif stage == "affine" and name == "relax.reshape" and site.kind == "linear":
            pass
        elif stage in ("affine", "residual") and name in UNARY and (stage == "affine" or name == "relax.nn.relu"):
            site.unary = _unary(name)
            stage = "done"
        elif stage == "affine" and name == "relax.maximum" and scalar_operand(call, var) is not None:
            site.unary = ("hardtanh", [scalar_operand(call, var), LARGEST], "")
            stage = "clip"
        elif stage == "clip" and name == "relax.minimum" and scalar_operand(call, var) is not None:
            site.unary = ("hardtanh", [site.unary[1][0], scalar_operand(call, var)], "")
            stage = "done"
        elif stage == "affine" and name == "relax.add" and _residual(site, call, var):
            stage = "residual" if site.kind == "conv2d" else "done"
        else:
            break
        site.last, site.shape, var = call, shape_of(call), binding.var
        site.chain.append(call)
        if stage == "done":
            break
    site.weight = site.weight * scale.reshape(-1, *[1] * (site.weight.ndim - 1))


def _affine(site: Site, call, var, scale: np.ndarray) -> bool:
    """Folds `var op constant` (or `constant op var`) into scale and bias, if it is affine
    per output channel."""
    from tvm.ir.expr import Constant

    left, right = call.args
    ours_first = left.same_as(var)
    other = right if ours_first else left
    if not isinstance(other, Constant):
        return False
    c = _per_channel(value_of(other), site)
    if c is None:
        return False
    op = call.op.name
    if op == "relax.add":
        site.bias += c
    elif op == "relax.subtract":
        if ours_first:
            site.bias -= c
        else:
            scale *= -1
            site.bias[:] = c - site.bias
    elif op == "relax.multiply":
        scale *= c
        site.bias *= c
    elif op == "relax.divide" and ours_first:
        scale /= c
        site.bias /= c
    else:
        return False
    return True


def _per_channel(value: np.ndarray, site: Site) -> np.ndarray | None:
    """A constant that varies only along the output channel (the last axis: a convolution's
    output is NHWC, a linear layer's channels last), as one value per channel; None otherwise."""
    out = site.shape
    if value.ndim > len(out):
        return None
    full = value.reshape((1,) * (len(out) - value.ndim) + value.shape)
    axis = len(out) - 1
    if any(d != 1 for i, d in enumerate(full.shape) if i != axis):
        return None
    channels = site.weight.shape[0]
    if full.shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(full.reshape(-1), (channels,)).astype(np.float32)


def _residual(site: Site, call, var) -> bool:
    """`var + other` with other a tensor (not a constant) of the same shape and dtype."""
    from tvm.ir.expr import Constant

    left, right = call.args
    other = right if left.same_as(var) else left
    if isinstance(other, Constant) or other.same_as(var) or shape_of(other) != shape_of(call) \
            or dtype_of(other) != "float32":
        return False
    site.residual = other
    return True


def _unary(name: str) -> tuple[str, list[float], str]:
    attr, algorithm = UNARY[name]
    return attr, [], algorithm
