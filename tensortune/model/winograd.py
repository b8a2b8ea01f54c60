"""Winograd convolution for TVM's own kernels on a CPU: each 3x3, stride-1 convolution with a
constant weight computed as F(m x m, 3 x 3) (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016), which does (m + 2)^2 multiplications per m x m output
tile and input channel where the direct convolution does 9 m^2: 2.25x fewer for m = 4.

Each such convolution (NHWC activations, HWIO weight: after model/layout.channels_last)
becomes three operations of the Relax module, each its own kernel after fusion, each one a
search space of the usual kind:

    V = input_transform(x)      (alpha^2, tiles, CI)   B^T d B for each tile d of x
    M = matmul(V, U)            (alpha^2, tiles, CO)   a batch of alpha^2 matrix products
    y = output_transform(M)     (N, H, W, CO)          A^T M A, cropped; the epilogue fuses here

with U = G w G^T computed once, here, from the constant weight (in float64). The transforms
are written term by term from the matrices' nonzero entries (no product with a constant
matrix, which a schedule would have to unroll away).

The result differs from the direct convolution by rounding, amplified by the transforms:
`amplification(m)` says by how much at worst, and `expected_error` what that makes of a
convolution over C input channels. Each convolution takes the largest tile whose expected
error stays within ERROR_BUDGET, the tolerance a model is checked to against torch
(model/build.tolerance): F(4, 3) up to 1,000 input channels, F(2, 3) beyond.
"""
from __future__ import annotations

import numpy as np

TILES = (4, 2)  # m, outputs per tile side, the largest first (fewest multiplications)
# just within the model's end-to-end tolerance for float32 (3.5e-3): the bound is pessimistic
# (the worst case's amplification), ResNet-18 all in F(4, 3) differs from torch by 6e-7
ERROR_BUDGET = 3e-3
# the block annotation saying how many terms each element sums, written out rather than as a
# reduction: the kernel check's tolerance grows with it (measure/tasks.reduction_length)
TERMS = "tensortune.summed_terms"
OPAQUE = 8  # TVM's OpPatternKind kOpaque: FuseOps fuses nothing into the function
MIN_CHANNELS = 16  # fewer input or output channels: the transforms cost more than they save

# F(m, 3) as (B^T, G, A^T), interpolation points 0, +-1, (+-2, +-1/2 for m = 4), infinity
MATRICES = {
    2: (np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
        np.array([[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]]),
        np.array([[1, 1, 1, 0], [0, 1, -1, -1]])),
    4: (np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                  [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]]),
        np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                  [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]]),
        np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]])),
}


def amplification(m: int) -> float:
    """How much larger than the direct convolution's the Winograd result's rounding error can
    be, for one input channel in two dimensions: the largest sum, over an output, of the
    absolute values of every product the transforms form (|A^T| (|G| |g| |G^T| . |B^T| |d| |B|)
    |A| with |g| = |d| = 1), against the direct convolution's 9."""
    bt, g, at = (np.abs(x) for x in MATRICES[m])
    one_d = at @ ((g @ np.ones(3))[:, None] * (bt @ np.ones(m + 2))[:, None])  # per output, 1-D
    return float(one_d.max() ** 2 / 9)


def expected_error(m: int, channels: int) -> float:
    """The relative rounding error to expect of F(m x m, 3 x 3) in float32 over `channels`
    input channels: the direct convolution's, which grows as the square root of its 9 x channels
    terms (rounding errors of either sign: Higham, "Accuracy and Stability of Numerical
    Algorithms", 2002, section 2.8), times the transforms' amplification."""
    return float(np.sqrt(9 * channels)) * float(np.finfo(np.float32).eps) * amplification(m)


def tile_for(channels: int) -> int | None:
    """The largest tile whose expected error stays within ERROR_BUDGET, or None."""
    return next((m for m in TILES if expected_error(m, channels) <= ERROR_BUDGET), None)


def weight_transform(weight: np.ndarray, m: int) -> np.ndarray:
    """U = G w G^T for an HWIO weight, as (alpha^2, CI, CO), alpha^2 = (m + 2)^2."""
    _, g, _ = MATRICES[m]
    u = np.einsum("ak,bl,klio->abio", g, g, weight.astype(np.float64))
    return u.reshape(-1, *weight.shape[2:]).astype(weight.dtype)


def tile_of(call) -> int | None:
    """The tile for a float32 NHWC convolution with a constant 3x3 HWIO weight, stride 1, no
    dilation, no groups, enough channels; None for any other call."""
    from tvm.ir.expr import Constant

    attrs = call.attrs
    if not (isinstance(call.args[1], Constant) and attrs.data_layout == "NHWC" and attrs.kernel_layout == "HWIO"
            and attrs.out_layout == "NHWC"):
        return None
    kh, kw, ci, co = (int(d) for d in call.args[1].ty.shape)
    direct = not ((kh, kw) == (3, 3) and [int(s) for s in attrs.strides] == [1, 1]
                  and [int(d) for d in attrs.dilation] == [1, 1] and int(attrs.groups) == 1 and min(ci, co) >= MIN_CHANNELS
                  and call.args[0].ty.dtype == "float32" and str(attrs.out_dtype) in ("", "float32"))
    return None if direct else tile_for(ci)


def input_transform(x, padding: tuple[int, int], out_hw: tuple[int, int], m: int):
    """TE: V[e, p, c] = (B^T d B)[e // alpha, e % alpha] for tile p of x (zero past its edges)."""
    from tvm import te

    bt = MATRICES[m][0]
    alpha = m + 2
    n, h, w, _ = (int(d) for d in x.shape)
    tiles_h, tiles_w = (-(-s // m) for s in out_hw)

    def read(p, c, row, col):
        y, z = (p % (tiles_h * tiles_w)) // tiles_w * m + row - padding[0], p % tiles_w * m + col - padding[1]
        inside = te.all(y >= 0, y < h, z >= 0, z < w)
        return te.if_then_else(inside, x[p // (tiles_h * tiles_w), te.max(te.min(y, h - 1), 0),
                                          te.max(te.min(z, w - 1), 0), c], 0.0)

    def value(e, p, c):
        return _by_index(e, alpha * alpha, lambda k: _terms(
            [(bt[k // alpha, a] * bt[k % alpha, b], (a, b)) for a in range(alpha) for b in range(alpha)],
            lambda ab: read(p, c, *ab)))

    terms = int(max(np.count_nonzero(np.outer(row, col)) for row in bt for col in bt))
    return te.compute((alpha * alpha, n * tiles_h * tiles_w, int(x.shape[3])), value, name="winograd_input",
                      attrs={TERMS: terms})


def output_transform(mm, batch: int, out_hw: tuple[int, int], m: int):
    """TE: y[b, i, j, o] = (A^T M A)[i % m, j % m] of the tile holding (i, j)."""
    from tvm import te

    at = MATRICES[m][2]
    alpha = m + 2
    tiles_h, tiles_w = (-(-s // m) for s in out_hw)

    def value(b, i, j, o):
        p = b * tiles_h * tiles_w + i // m * tiles_w + j // m
        return _by_index((i % m) * m + j % m, m * m, lambda k: _terms(
            [(at[k // m, a] * at[k % m, c], a * alpha + c) for a in range(alpha) for c in range(alpha)],
            lambda e: mm[e, p, o]))

    terms = int(max(np.count_nonzero(np.outer(row, col)) for row in at for col in at))
    return te.compute((batch, *out_hw, int(mm.shape[2])), value, name="winograd_output", attrs={TERMS: terms})


def _terms(coefficients, read):
    """sum of c * read(at) over the nonzero coefficients, each read once."""
    from tvm import tirx

    total = None
    for c, at in coefficients:
        if c:
            term = read(at) if c == 1 else read(at) * tirx.const(float(c), "float32")
            total = term if total is None else total + term
    return total


def _by_index(index, count: int, value_of):
    """value_of(k) where index == k, for k in range(count): a chain of selects on the index."""
    from tvm import te

    out = value_of(count - 1)
    for k in reversed(range(count - 1)):
        out = te.if_then_else(index == k, value_of(k), out)
    return out


def winograd(mod):
    """The Relax module (NHWC, HWIO, before lowering) with each convolution `tile_of` finds a
    tile for computed as F(m x m, 3 x 3)."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from .dataflow import value_of

    @mutator
    class Winograd(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            m = tile_of(call) if getattr(call.op, "name", "") == "relax.nn.conv2d" else None
            if m is None:
                return call
            x, weight = call.args
            batch, *out_hw, _ = (int(d) for d in call.ty.shape)
            padding = tuple(int(p) for p in call.attrs.padding[:2])
            v = self.builder_.emit(self.builder_.call_te(input_transform, x, padding, tuple(out_hw), m,
                                                         primfunc_name_hint="winograd_input"))
            u = relax.const(weight_transform(value_of(weight), m))
            mm = self.builder_.emit(relax.op.matmul(v, u))
            return self.builder_.call_te(output_transform, mm, batch, tuple(out_hw), m,
                                         primfunc_name_hint="winograd_output")

    rewriter = Winograd(mod)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gv, rewriter.visit_expr(func))
    out = rewriter.builder_.get()
    for gv, func in list(out.functions.items()):
        if gv.name_hint.startswith("winograd_input"):
            # opaque to fusion: fused after the producer's kernel, a schedule inlining the
            # producer would compute each of its values once per tile reading it (up to 9 times)
            out[gv] = func.with_attr("op_pattern", OPAQUE)
    return out
