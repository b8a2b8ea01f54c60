"""Layouts for a CPU: convolutions channels-last, and weights in the layout each tuned kernel
reads them in, rewritten once at build instead of on every call.

- `channels_last`: every convolution NHWC (`relax.transform.ConvertLayout`), the weight in the
  layout asked for (HWIO for TVM's own kernels: the output channel innermost, where they
  vectorise; OHWI for oneDNN's). Constant weights are transposed at build (FoldConstant).
- `mark_layout_free`: each kernel's constant inputs (weights, folded batch-norm terms) marked
  as layout-free (`AttachAttrLayoutFreeBuffers`), so that MetaSchedule's `RewriteLayout`
  postprocessor, which the sketch space runs on every point, gives the kernel a block that
  copies the weight into the order its loops read it. A kernel measured alone keeps that block
  (so it is checked against the same reference as any other, and its timing counts the copy:
  a small bias against rewriting, never for it).
- `prepack`: at build, each such block split off into a function of its own
  (`SplitLayoutRewritePreproc`) and run once on the constant weight (FoldConstant): the built
  model reads packed weights and copies nothing per call, as MetaSchedule's
  `static_shape_tuning_pipeline(cpu_weight_prepack=True)` does.
"""
from __future__ import annotations

import numpy as np

TVM_WEIGHTS = "HWIO"
ONEDNN_WEIGHTS = "OHWI"


def channels_last(mod, weight_layout: str):
    """The Relax module (before lowering) with its convolutions NHWC and their weights in
    `weight_layout`; constants transposed once, here."""
    from tvm import relax

    nhwc = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", weight_layout]})
    folded = relax.transform.FoldConstant()(_fold_in_numpy(nhwc(_clip_as_max_min(mod))))
    return relax.transform.DeadCodeElimination()(folded)


def mark_layout_free(mod):
    """The lowered and fused module with each kernel's constant inputs marked layout-free."""
    from tvm import relax

    return relax.transform.AttachAttrLayoutFreeBuffers()(mod)


def prepack(mod, tuned) -> object:
    """The module whose tuned kernels (the functions named in `tuned`) may hold
    weight-rewriting blocks, with each block run once on its constant weight at build and the
    kernels reading the result. The kernels at their default schedule hold none and are set
    aside while TVM splits the blocks off: its pass fails on a kernel with no compute block
    (a cumulative sum's scan)."""
    import tvm
    from tvm import relax

    aside = {gv: func for gv, func in mod.functions.items()
             if isinstance(func, tvm.tirx.PrimFunc) and gv.name_hint not in tuned}
    split = relax.transform.SplitLayoutRewritePreproc()(
        tvm.IRModule({gv: f for gv, f in mod.functions.items() if gv not in aside}, attrs=mod.attrs))
    for gv, func in aside.items():
        split[gv] = func
    return relax.transform.DeadCodeElimination()(relax.transform.FoldConstant()(split))


def each_function(mod, rewriter):
    """The module with every Relax function rewritten by `rewriter` (a PyExprMutator)."""
    import tvm
    from tvm import relax

    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function):
            out[gv] = rewriter.visit_expr(func)
    return out


def _clip_as_max_min(mod):
    """clip(x, lo, hi) as minimum(maximum(x, lo), hi): ConvertLayout has no layout rule for clip
    (ReLU6 would go back to NCHW and forth around it), and has one for these."""
    import tvm
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    @mutator
    class ClipAsMaxMin(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.clip"):
                return call
            dtype = call.ty.dtype
            low, high = (relax.const(float(bound.value), dtype) for bound in call.args[1:])
            return relax.op.minimum(relax.op.maximum(call.args[0], low), high)

    return each_function(mod, ClipAsMaxMin(mod))


# what the weights of a model go through before TVM's kernels or oneDNN read them: transposes,
# axes added, batch norm's arithmetic. Each is exact in numpy as in TVM's kernels (one IEEE
# operation per element), so the folded constants are the same.
_NUMPY = {
    "relax.permute_dims": lambda call, x: np.transpose(x, None if call.attrs.axes is None
                                                       else [int(a) for a in call.attrs.axes]),
    "relax.expand_dims": lambda call, x: np.expand_dims(x, tuple(int(a) for a in call.attrs.axis)),
    "relax.add": lambda call, x, y: x + y,
    "relax.subtract": lambda call, x, y: x - y,
    "relax.multiply": lambda call, x, y: x * y,
    "relax.divide": lambda call, x, y: x / y,
    "relax.sqrt": lambda call, x: np.sqrt(x),
}


def _fold_in_numpy(mod):
    """The module with each call of `_NUMPY`'s operators on constants replaced by its value,
    computed in numpy. TVM's FoldConstant, which folds the rest, compiles a kernel for every
    call it folds: MobileNetV2 has 364 weight transposes and batch norms, folded twice per
    import (TVM's weight layout and oneDNN's), each fold a kernel compiled and run."""
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.relax.expr_functor import PyExprMutator, mutator

    from .dataflow import op_name, value_of

    @mutator
    class FoldInNumpy(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            fold = _NUMPY.get(op_name(call))
            values = [self._value(arg) for arg in call.args] if fold else [None]
            if any(value is None for value in values):
                return call
            return relax.const(np.asarray(fold(call, *values)).astype(str(call.ty.dtype)))

        def _value(self, expr):
            bound = self.lookup_binding(expr) if isinstance(expr, relax.Var) else expr
            return value_of(bound) if isinstance(bound, Constant) else None

    return each_function(mod, FoldInNumpy(mod))
