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

TVM_WEIGHTS = "HWIO"
ONEDNN_WEIGHTS = "OHWI"


def channels_last(mod, weight_layout: str):
    """The Relax module (before lowering) with its convolutions NHWC and their weights in
    `weight_layout`; constants transposed once, here."""
    from tvm import relax

    nhwc = relax.transform.ConvertLayout({"relax.nn.conv2d": ["NHWC", weight_layout]})
    return relax.transform.DeadCodeElimination()(relax.transform.FoldConstant()(nhwc(_clip_as_max_min(mod))))


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
