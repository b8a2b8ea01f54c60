"""PyTorch's own kernels inside a TVM build: the vendor floor of a model.

`dispatch_to_torch` rewrites a Relax module before lowering so that every operation PyTorch
implements with a vendor library here becomes a call of a packed function that runs torch's
operator on views of TVM's tensors (tvm_ffi converts them, DLPack in C) and hands torch's
output back to TVM, no copy either way. A convolution or linear layer with a constant weight
becomes one fused oneDNN call (model/onednn.py): its weight packed once, its bias and batch norm folded into the weight at
build, its activation or residual add a post-op (model/epilogue.py finds them; a residual no
later call reads is added into in place, `in_place_residuals`); convolutions are made NHWC
first, oneDNN's layout, and linear layers side by side (attention's Q, K and V projections)
merged into one (model/parallel_linear.py). Matmuls of two activations (attention's) call
torch's plain matmul, layer norms and NHWC max pools torch's own; what follows them fuses
into TVM kernels of its own, tuned like any other (`conv2d`, the plain convolution, stays
registered for models exported before the fused calls). The functions are registered in the
process by `register()`; a built model that calls them needs torch and that registration at
run time (`tensortune.load` does it when model.json says so).

Outputs come back contiguous: torch's CPU allocator aligns to 64 bytes, the alignment TVM's
kernels assume.
"""
from __future__ import annotations

import functools
import math
import secrets

from . import onednn
from .attention import Attention, combined_masks, find_attention
from .epilogue import find_sites
from .layout import ONEDNN_WEIGHTS, channels_last, each_function
from .parallel_linear import merge_parallel_linears

PREFIX = "tensortune.torch."
CONV2D = PREFIX + "conv2d"
CONV1D = PREFIX + "conv1d"
MATMUL = PREFIX + "matmul"
LAYER_NORM = PREFIX + "layer_norm"
GROUP_NORM = PREFIX + "group_norm"
MAX_POOL2D = PREFIX + "max_pool2d"
PLAIN = (CONV2D, CONV1D, MATMUL, LAYER_NORM, GROUP_NORM, MAX_POOL2D)  # torch's plain operators, called as they are
ATTENTION = PREFIX + "attention"
# A call into torch costs about 10 us of Python (the FFI, DLPack views, torch's dispatch, a view
# program's steps; the FFI's share fell from 7 us to 2.4 with tvm_ffi's conversion in C,
# call_overhead.txt); on a tensor with fewer elements TVM's own kernel costs less: with these
# calls on every size, 9 of the coverage corpus's 25 models (64x128 language models) kept TVM, with
# the threshold 13 (benchmarks/results/coverage-no-threshold.txt, coverage.txt).
SMALL = 32768
FUSED = {name: PREFIX + "onednn." + name for name in ("conv2d", "conv2d_add", "conv2d_sum", "linear", "linear_add")}


def register(again: bool = False) -> None:
    """Make the packed functions callable from TVM's runtime in this process, unless they are
    already (`again`: replace what is registered under their names)."""
    import torch
    import tvm
    import tvm_ffi

    for name, func in _torch_calls().items():
        if again or tvm.get_global_func(name, allow_missing=True) is None:
            # tvm_ffi hands each call torch tensors, converted in C (DLPack's exchange API), and
            # converts the torch tensor returned: torch.from_dlpack in Python cost more
            # (benchmarks/call_overhead.py)
            tvm.register_global_func(name, tvm_ffi.convert_func(func, tensor_cls=torch.Tensor), override=True)


def _torch_calls() -> dict:
    """Each packed function's name -> the Python function it runs: torch's plain operators,
    its attention and model/onednn.py's fused layers."""
    import torch

    # rest: o's shape, the masks if any, then how q, k, v and the output are viewed (model/attention.py;
    # models exported before the views have none)
    def attention(q, k, v, transposed, scale, rank, *rest):
        shape, views = [int(d) for d in rest[:rank]], [r for r in rest[rank:] if isinstance(r, str)] or [""] * 4
        masks = [m for m in rest[rank:] if not isinstance(m, str)]
        q, k, v = (_viewed(x, program) for x, program in zip((q, k, v), views))
        out = torch.nn.functional.scaled_dot_product_attention(
            q, k.transpose(-2, -1) if transposed else k, v,
            attn_mask=functools.reduce(torch.add, masks) if masks else None, scale=scale)
        return _viewed(out.reshape(shape), views[3]).contiguous()

    return {**_plain_calls(), ATTENTION: attention, **{FUSED[name]: getattr(onednn, name) for name in FUSED}}


def _plain_calls() -> dict:
    """PLAIN's packed functions: each runs one of torch's operators as it is."""
    import torch

    # models exported before the fused calls call it
    def conv2d(x, w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups):
        out = torch.nn.functional.conv2d(x, w, None, (stride_h, stride_w),
                                         (pad_h, pad_w), (dilation_h, dilation_w), groups)
        return out.contiguous()

    def conv1d(x, w, stride, pad, dilation, groups):
        return torch.nn.functional.conv1d(x, w, None, stride, pad, dilation, groups).contiguous()

    def matmul(a, b):
        return torch.matmul(a, b).contiguous()

    def layer_norm(x, gamma, beta, axes, epsilon):
        return torch.nn.functional.layer_norm(x, x.shape[-axes:], gamma, beta, epsilon).contiguous()

    def group_norm(x, gamma, beta, groups, epsilon):
        return torch.nn.functional.group_norm(x, groups, gamma, beta, epsilon).contiguous()

    def max_pool2d(x, kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w):
        # NHWC in and out: torch's channels-last kernel, on NCHW views of the same memory
        out = torch.nn.functional.max_pool2d(x.permute(0, 3, 1, 2), (kernel_h, kernel_w),
                                             (stride_h, stride_w), (pad_h, pad_w), (dilation_h, dilation_w))
        return out.permute(0, 2, 3, 1).contiguous()

    return {CONV2D: conv2d, CONV1D: conv1d, MATMUL: matmul, LAYER_NORM: layer_norm, GROUP_NORM: group_norm,
            MAX_POOL2D: max_pool2d}


def dispatch_to_torch(mod, keep: frozenset[int] = frozenset()) -> tuple[object, list[tuple[int, int]]]:
    """The module with each operation torch implements as a call into torch, but those whose
    number is in `keep` (operations are numbered in the order the rewrite meets them, the same
    every time), and the (number, FLOPs) of each operation that torch could take. A layer
    fused with its epilogue is one operation."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    met: list[tuple[int, int]] = []
    mod = merge_parallel_linears(channels_last(mod, ONEDNN_WEIGHTS))  # oneDNN's layout: no reorders
    sites = {}  # call -> the fused layer or attention it is part of
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            layers = find_sites(func)
            fused = frozenset(call for layer in layers for call in layer.chain)
            for site in [*find_attention(func, fused, views_from=SMALL), *layers]:
                sites.update({call: site for call in site.chain if call not in sites})

    @mutator
    class ToTorch(PyExprMutator):
        def visit_call_(self, call):
            site = sites.get(call)
            if site is not None and not site.last.same_as(call):  # inside a fused call: dead once it is
                return super().visit_call_(call)
            replaced = _site_call(site, self.visit_expr) if site is not None else None
            call = super().visit_call_(call)
            replaced = _torch_call(call) if replaced is None else replaced
            if replaced is None:
                return call
            met.append((len(met), sum(map(_flops, site.chain if isinstance(site, Attention) else
                                          [site.anchor if site is not None else call]))))
            return call if met[-1][0] in keep else replaced

    return relax.transform.DeadCodeElimination()(each_function(mod, ToTorch(mod))), met


def in_place_residuals(mod):
    """The module with each fused convolution + residual add whose residual is a fused call's
    own output (torch's tensor, never in TVM's planned memory) that no later binding reads, nor
    the function's output, computed into that residual in place (`conv2d_sum`, oneDNN's sum
    post-op). ResNet-50's residual convolutions took 8.7 ms out of place against 6.1 ms in
    place in inductor with freezing, the other convolutions alike."""
    from tvm import relax
    from tvm.relax.expr_functor import PyExprMutator, mutator

    into = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            into.update(_last_reads_of_own_outputs(func))

    @mutator
    class InPlace(PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not any(call.same_as(c) for c in into):
                return call
            return relax.Call(call.op, [relax.ExternFunc(FUSED["conv2d_sum"]), *call.args[1:]], call.attrs,
                              call.ty_args)

    return each_function(mod, InPlace(mod)) if into else mod


def _last_reads_of_own_outputs(func) -> list:
    """The calls of `conv2d_add` in `func` whose residual a fused call made and no binding after
    them, nor the output, reads."""
    from .dataflow import all_users, bindings_of, free_vars

    made_by_fused = {b.var for b in bindings_of(func) if _calls(b.value, *FUSED.values())}
    users, returned = all_users(func), set(free_vars(func.body.body))
    return [b.value for b in bindings_of(func) if _calls(b.value, FUSED["conv2d_add"])
            and b.value.args[2] in made_by_fused and b.value.args[2] not in returned
            and users[b.value.args[2]][-1].same_as(b)]


def _calls(expr, *names: str) -> bool:
    """Whether `expr` calls one of the packed functions `names`."""
    from tvm import relax

    return (isinstance(expr, relax.Call) and bool(expr.args) and isinstance(expr.args[0], relax.ExternFunc)
            and expr.args[0].global_symbol in names)


def _viewed(tensor, program: str):
    """`tensor` through a view program of model/attention.py: reshape, permute and narrow steps
    (a reshape copies only where no view has that shape)."""
    for name, numbers in _steps(program):
        tensor = tensor.narrow(*numbers) if name == "narrow" else getattr(tensor, name)(numbers)
    return tensor


@functools.lru_cache(maxsize=1024)
def _steps(program: str) -> tuple:
    """A view program parsed, once per program in the process: (step name, its numbers)."""
    return tuple((name, [int(n) for n in numbers]) for name, *numbers in map(str.split, filter(None, program.split(";"))))


def vendor_calls(mod) -> dict[str, int]:
    """What a lowered build's main function runs where: calls of fused oneDNN layers
    ("onednn"), of torch's fused attention ("attention"), of torch's plain operators ("torch"),
    and of TVM kernels ("tvm")."""
    import re

    text = mod["main"].script()
    fused = sum(text.count(f'"{name}"') for name in FUSED.values())
    plain = sum(text.count(f'"{name}"') for name in PLAIN)
    return {"onednn": fused, "attention": text.count(f'"{ATTENTION}"'), "torch": plain, "tvm": len(re.findall(r"R\.call_tir\(", text))}


def _site_call(site, visit):
    """The call of torch's attention, or of model/onednn.py's fused layer, that computes the
    site's last binding."""
    from tvm import relax
    from tvm.ir import StringImm

    if isinstance(site, Attention):
        shape, masks = [relax.prim_value(d) for d in site.shape], combined_masks(site)
        return relax.call_pure_packed(ATTENTION, visit(site.q), visit(site.k), visit(site.v),
                                      relax.prim_value(int(site.transposed)), relax.prim_value(float(site.scale)),
                                      relax.prim_value(len(shape)), *shape, *map(visit, masks),
                                      *map(StringImm, site.views), ty_args=site.last.ty)

    ints = relax.prim_value
    weight, bias = relax.const(site.weight), relax.const(site.bias)
    number = ints(secrets.randbits(62))  # the site, in this build: its packed weight is kept under it
    x, ty = visit(site.anchor.args[0]), site.last.ty
    attr, scalars, algorithm = site.unary
    if site.kind == "conv2d":
        a = site.anchor.attrs
        geometry = [ints(int(v)) for v in (*a.strides, *a.padding[:2], *a.dilation, a.groups)]
        if site.residual is not None:
            return relax.call_pure_packed(FUSED["conv2d_add"], x, visit(site.residual), weight, bias, number, *geometry,
                                          StringImm(attr), ty_args=ty)
        return relax.call_pure_packed(FUSED["conv2d"], x, weight, bias, number, *geometry, StringImm(attr),
                                      StringImm(algorithm), *map(relax.prim_value, scalars), ty_args=ty)
    shape = [ints(d) for d in site.shape]
    if site.residual is not None:
        return relax.call_pure_packed(FUSED["linear_add"], x, visit(site.residual), weight, bias, number, *shape,
                                      ty_args=ty)
    return relax.call_pure_packed(FUSED["linear"], x, weight, bias, number, StringImm(attr),
                                  StringImm(algorithm), *map(relax.prim_value, scalars), *shape,
                                  ints(len(site.shape)), ty_args=ty)


def _flops(call) -> int:
    """2 x output elements x reduction length of a convolution or matmul (0 for any other call)."""
    if call.op.name not in ("relax.nn.conv2d", "relax.nn.conv1d", "relax.matmul"):
        return 0
    out = math.prod(int(d) for d in call.ty.shape)
    weight = [int(d) for d in call.args[1].ty.shape]
    reduction = weight[-2] if call.op.name == "relax.matmul" else math.prod(weight[1:])
    return 2 * out * reduction


def _torch_call(call):
    """The torch call that computes `call`, or None where torch's operator is not the same: a
    float32 matmul (attention's, whose operands are both activations), a convolution over one
    axis (wav2vec2's feature encoder: TVM's untuned conv1d kernels 10x slower), and on an input of at
    least SMALL elements a layer norm over the trailing axes (BERT layer's two: 0.177 ms in
    torch, 0.485 in TVM, in models.py's profiles), a group norm over channels first (wav2vec2's
    feature encoder's, whose untuned TVM kernel is serial) or a max pool in NHWC (torch's channels-last
    kernel; in NCHW torch's is far slower and TVM keeps it)."""
    import tvm
    from tvm import relax

    if not isinstance(call.op, tvm.ir.Op) or not _float32(call) or not all(_float32(a) for a in call.args):
        return None
    name, attrs, ints = call.op.name, call.attrs, relax.prim_value
    if name == "relax.matmul":
        return relax.call_pure_packed(MATMUL, call.args[0], call.args[1], ty_args=call.ty)
    if name == "relax.nn.conv1d" and _torch_conv1d(attrs):
        geometry = [attrs.strides[0], attrs.padding[0], attrs.dilation[0], attrs.groups]
        return relax.call_pure_packed(CONV1D, call.args[0], call.args[1], *(ints(int(v)) for v in geometry),
                                      ty_args=call.ty)
    if math.prod(int(d) for d in call.args[0].ty.shape) < SMALL:
        return None
    if name == "relax.nn.layer_norm" and attrs.center and attrs.scale and _trailing(attrs.axes, len(call.ty.shape)):
        return relax.call_pure_packed(LAYER_NORM, *call.args, ints(len(attrs.axes)), relax.prim_value(float(attrs.epsilon)),
                                      ty_args=call.ty)
    if name == "relax.nn.group_norm" and attrs.center and attrs.scale and _channels_first(attrs, len(call.ty.shape)):
        return relax.call_pure_packed(GROUP_NORM, *call.args, ints(int(attrs.num_groups)),
                                      relax.prim_value(float(attrs.epsilon)), ty_args=call.ty)
    if name == "relax.nn.max_pool2d" and _torch_pool(attrs):
        geometry = [*attrs.pool_size, *attrs.strides, *attrs.padding[:2], *attrs.dilation]
        return relax.call_pure_packed(MAX_POOL2D, call.args[0], *(ints(int(v)) for v in geometry), ty_args=call.ty)
    return None


def _trailing(axes, rank: int) -> bool:
    """Whether `axes` are the last len(axes) axes of a tensor of rank `rank`."""
    return sorted(int(a) % rank for a in axes) == list(range(rank - len(axes), rank))


def _channels_first(attrs, rank: int) -> bool:
    """Whether torch's group_norm computes this one: channels on axis 1, normalized with every
    axis after it."""
    return int(attrs.channel_axis) == 1 and sorted(int(a) % rank for a in attrs.axes) == list(range(2, rank))


def _torch_conv1d(attrs) -> bool:
    """Whether torch's conv1d computes this one: NCW in and out, an OIW weight, the same padding
    on both sides."""
    return (attrs.data_layout == attrs.out_layout == "NCW" and attrs.kernel_layout == "OIW"
            and int(attrs.padding[0]) == int(attrs.padding[1]))


def _torch_pool(attrs) -> bool:
    """Whether torch's max_pool2d computes this one: NHWC in and out, no ceil mode, padding the
    same on both sides and at most half the window (torch's limits)."""
    top, left, bottom, right = (int(p) for p in attrs.padding)
    return (attrs.layout == attrs.out_layout == "NHWC" and not attrs.ceil_mode and (top, left) == (bottom, right)
            and 2 * top <= int(attrs.pool_size[0]) and 2 * left <= int(attrs.pool_size[1]))


def _float32(expr) -> bool:
    return getattr(expr.ty, "dtype", None) == "float32"
