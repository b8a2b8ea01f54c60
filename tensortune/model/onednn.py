"""The fused vendor calls a TVM build makes into torch: oneDNN's convolution and linear layer
with the weight packed once and the epilogue as post-ops (the calls inductor with freezing
makes for CPU inference).

Activations are NHWC on TVM's side (model/torch_ops.py converts the module's convolutions), so
each convolution sees a channels-last tensor, which oneDNN takes with no reorder, and its
channels-last output goes back to TVM as the contiguous NHWC tensor it is.

Each call site carries a number unique to its build (model/torch_ops.py draws it), so a
weight is packed on the site's first call and reused by every later one; a packed weight is
oneDNN's opaque tensor, which no TVM tensor can hold, so it lives here, in the process. The
weight and bias come in already folded (batch norm, bias: model/epilogue.py). Each layer is
timed on its first call against eager's composition (torch's `conv2d` or `addmm` on the plain
weight, then its activation or residual add in place), a linear layer against MKL's packed
product too, and the fastest kept for the site: oneDNN's packed call loses on small layers,
MKL's wins on Intel CPUs. Registered by model/torch_ops.register with torch's plain operators,
which hands them torch tensors (views of TVM's, converted by tvm_ffi) and takes torch tensors
back.
"""
from __future__ import annotations

from collections import OrderedDict

PACKED_SITES = 4096  # sites kept (a build's; earlier builds' are prepared again if called)
_packed: OrderedDict = OrderedDict()


def packed(site: int, prepare):
    """What `site` calls with on every call, prepared once (`prepare()` on its first call): its
    packed weight, its bias as a torch tensor, its geometry and output shape parsed. A call
    then costs the layer and the views of its activations only (the arguments parsed
    and converted on every call had cost 7 us a linear layer, a fifth of a small one)."""
    if site in _packed:
        _packed.move_to_end(site)
        return _packed[site]
    _packed[site] = prepared = prepare()
    if len(_packed) > PACKED_SITES:
        _packed.popitem(last=False)
    return prepared


# No torch.no_grad() around the calls below: tensors from DLPack and packed weights never
# require gradients, so autograd records nothing either way (and the context costs a call).

def conv2d(x, w, b, site, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, attr, algorithm,
           *scalars):
    """conv2d(x, w) + b on NHWC x, then the unary post-op `attr` ("none" for none)."""
    x = _nchw(x)
    geometry = (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups)
    layer = packed(site, lambda: _fastest(conv_candidates(w, b, x, geometry, attr, list(scalars), algorithm), x))
    return _nhwc(layer(x))


def conv2d_add(x, other, w, b, site, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, attr):
    """conv2d(x, w) + b + other on NHWC tensors, then relu if `attr` says so (oneDNN's binary
    add post-op)."""
    return _with_residual(False, x, other, w, b, site, (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                                        groups), attr)


def conv2d_sum(x, other, w, b, site, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, attr):
    """conv2d_add computed into `other`, in place where oneDNN's call is the site's fastest
    (its sum post-op, as inductor with freezing runs a residual): for a residual that is a
    fused call's own output and that no later call reads (model/torch_ops.py:
    in_place_residuals)."""
    return _with_residual(True, x, other, w, b, site, (stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
                                                       groups), attr)


def _with_residual(in_place: bool, x, other, w, b, site, geometry: tuple, attr: str):
    """conv2d(x, w) + b + other, then `attr`, into a new tensor or into `other`. The
    candidates are timed on a copy of `other`: an in-place one adds into what it is given."""
    x, other = _nchw(x), _nchw(other)
    layer = packed(site, lambda: _fastest(conv_candidates(w, b, x, geometry, attr, [], "", other, in_place),
                                          x, other.clone()))
    return _nhwc(layer(x, other))


def conv_candidates(w, b, x, geometry: tuple, attr: str, scalars: list, algorithm: str, other=None,
                    in_place: bool = False) -> list:
    """Each way to compute the convolution on channels-last `x` (and `other`): oneDNN's call
    with the packed weight and the post-ops fused, and eager's composition (torch's conv2d on
    the plain weight, then the residual add and the activation in place). oneDNN's packed call
    has a fixed cost per call that loses on small layers (RegNet's 1x1 convolutions on 1x1 to
    4x4 maps: coverage-epyc-conv-choice.txt) and wins on the larger ones."""
    import torch

    padding, stride, dilation, groups = shape = _geometry(*geometry)
    weight = torch.ops.mkldnn._reorder_convolution_weight(w, padding, stride, dilation, groups, list(x.shape))
    plain = w.contiguous(memory_format=torch.channels_last)
    activation = _IN_PLACE.get(attr)

    def eager(x):
        return torch.nn.functional.conv2d(x, plain, b, stride, padding, dilation, groups)

    if other is None:
        def onednn(x):
            return torch.ops.mkldnn._convolution_pointwise(x, weight, b, *shape, attr, scalars, algorithm or None)

        def composed(x):
            return activation(eager(x), algorithm, scalars)
    else:
        pointwise = torch.ops.mkldnn._convolution_pointwise_ if in_place else torch.ops.mkldnn._convolution_pointwise
        unary = None if attr == "none" else attr

        def onednn(x, other):
            return pointwise.binary(*((other, x) if in_place else (x, other)), weight, b, *shape, "add", 1.0, unary, [],
                                    None)

        def composed(x, other):
            return activation(eager(x).add_(other), algorithm, scalars)
    return [onednn] if activation is None else [onednn, composed]  # None: a post-op eager's composition lacks


def linear(x, w, b, site, attr, algorithm, *rest):
    """x @ w.T + b, then the unary post-op `attr`; `rest`: its scalars, then the output's shape
    (its rank first, from the end)."""
    return packed(site, lambda: _linear_layer(w, b, x, attr, algorithm, rest))(x)


def linear_add(x, other, w, b, site, *shape):
    """x @ w.T + b + other (other reshaped as the product), in the output's shape."""
    return packed(site, lambda: _linear_add_layer(w, b, x, other, [int(d) for d in shape]))(x, other)


def _linear_layer(w, b, x, attr: str, algorithm: str, rest: tuple):
    """The site's layer as a function of its input, in the output's shape: the fastest of its
    candidates (`linear_candidates`) on this input, timed here, once."""
    shape, scalars = _shape_and_scalars(rest)
    layer = _fastest(linear_candidates(w, b, x, attr, algorithm, scalars), x)
    if shape == [x.shape[0], w.shape[0]]:  # a view costs 1-2 us, a tenth of a small layer
        return layer
    return lambda x: layer(x).view(shape)


def _linear_add_layer(w, b, x, other, shape: list):
    """linear_add's layer as a function of its input and residual (in any shape with the
    product's elements), in the output's shape: the fastest of its candidates, timed here, once."""
    rows = x.shape[0]
    other = other.view(rows, -1)
    layer = _fastest(linear_candidates(w, b, x, "none", "", [], other), x, other)
    return lambda x, other: layer(x, other.view(rows, -1)).view(shape)


def linear_candidates(w, b, x, attr: str, algorithm: str, scalars: list, other=None) -> list:
    """Each way to compute the layer: oneDNN's call with the packed weight and the post-op
    fused, and each product without post-op (what eager runs, torch's `addmm` on the plain
    weight; MKL's sgemm on its own packed weight where torch has MKL) followed by the activation
    or the residual add in place. None wins everywhere: oneDNN's packed call loses on small
    layers (64 rows by 128: 26 us against 18 on a Zen 4), MKL's packed one wins on Intel CPUs
    and loses on AMD's (benchmarks/linear_vendors.py)."""
    import torch

    weight, bias = _linear_site(w, b, x)
    products = _products(w, bias, x)
    if other is not None:
        def onednn_add(x, other):
            return torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, bias, "add")

        return [onednn_add, *(lambda x, other, product=product: product(x).add_(other) for product in products)]

    def onednn(x):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, scalars, algorithm or None)

    activation = _IN_PLACE.get(attr)
    if activation is None:  # a post-op eager's composition does not offer
        return [onednn]
    return [onednn, *(lambda x, product=product: activation(product(x), algorithm, scalars) for product in products)]


def _products(plain, bias, x) -> list:
    """x @ plain.T + bias without post-op, as each vendor torch links computes it: eager's
    `addmm`, and MKL's packed sgemm where torch has MKL."""
    import torch

    rows, transposed = x.shape[0], plain.t()
    products = [lambda x: torch.addmm(bias, x, transposed)]
    if torch.backends.mkl.is_available():
        packed = torch.ops.mkl._mkl_reorder_linear_weight(plain, rows)
        products.append(lambda x: torch.ops.mkl._mkl_linear(x, packed, plain, bias, rows))
    return products


def _fastest(layers: list, *inputs, rounds: int = 3):
    """The layer of `layers` whose warm call on `inputs` is fastest: each timed in turn, `rounds`
    times, its best kept, so that a drift of the shared machine's speed hits all alike (timed
    one after the other once, a 64x128 layer's choice between oneDNN and addmm flipped between
    processes)."""
    best = [float("inf")] * len(layers)
    for _ in range(rounds):
        best = [min(seconds, _seconds(layer, *inputs)) for seconds, layer in zip(best, layers)]
    return layers[best.index(min(best))]


def _gelu_(out, algorithm: str, _scalars: list):
    import torch

    return torch.nn.functional.gelu(out, approximate=algorithm or "none")


def _silu_(out, _algorithm: str, _scalars: list):
    import torch

    return torch.nn.functional.silu(out, inplace=True)


# oneDNN's post-ops (model/epilogue.py: UNARY) as eager runs them on a product's output, in place
_IN_PLACE = {"none": lambda out, *_: out, "relu": lambda out, *_: out.relu_(), "gelu": _gelu_, "swish": _silu_,
             "sigmoid": lambda out, *_: out.sigmoid_(), "tanh": lambda out, *_: out.tanh_(),
             "hardtanh": lambda out, _, scalars: out.clamp_(*scalars)}


def _seconds(layer, *inputs, repeats: int = 5) -> float:
    """The fastest of a few warm calls of `layer(*inputs)`."""
    import time

    layer(*inputs)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        layer(*inputs)
        best = min(best, time.perf_counter() - start)
    return best


def _shape_and_scalars(rest) -> tuple[list[int], list]:
    """A linear call's trailing arguments: the post-op's scalars, then the output's shape, then
    its rank."""
    rank = int(rest[-1])
    return [int(d) for d in rest[-1 - rank:-1]], list(rest[:-1 - rank])


def _nchw(x):
    """An NHWC tensor of TVM's as the channels-last NCHW tensor torch's convolutions take."""
    return x.permute(0, 3, 1, 2)


def _nhwc(out):
    """A convolution's output as a contiguous NHWC tensor (no copy where it is channels-last)."""
    return out.permute(0, 2, 3, 1).contiguous()


def _geometry(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups) -> tuple:
    """padding, stride, dilation, groups, as oneDNN's calls take them."""
    return [int(pad_h), int(pad_w)], [int(stride_h), int(stride_w)], [int(dilation_h), int(dilation_w)], int(groups)


def _linear_site(w, b, x) -> tuple:
    """A linear site's packed weight and bias."""
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(w, x.shape[0]), b
