"""The fused vendor calls a TVM build makes into torch: oneDNN's convolution and linear layer
with the weight packed once and the epilogue as post-ops (the calls inductor with freezing
makes for CPU inference).

Activations are NHWC on TVM's side (model/torch_ops.py converts the module's convolutions), so
each convolution sees a channels-last tensor, which oneDNN takes with no reorder, and its
channels-last output goes back to TVM as the contiguous NHWC tensor it is.

Each call site carries a number unique to its build (model/torch_ops.py draws it), so a
weight is packed on the site's first call and reused by every later one; a packed weight is
oneDNN's opaque tensor, which no TVM tensor can hold, so it lives here, in the process. The
weight and bias come in already folded (batch norm, bias: model/epilogue.py). Registered by
model/torch_ops.register with torch's plain operators.
"""
from __future__ import annotations

from collections import OrderedDict

PACKED_SITES = 4096  # packed weights kept (a build's sites; earlier builds' are packed again if called)
_packed: OrderedDict = OrderedDict()


def packed(site: int, pack):
    """The weight packed for `site`: `pack()` on its first call, kept after."""
    if site in _packed:
        _packed.move_to_end(site)
        return _packed[site]
    _packed[site] = weight = pack()
    if len(_packed) > PACKED_SITES:
        _packed.popitem(last=False)
    return weight


def conv2d(x, w, b, site, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, attr, algorithm,
           *scalars):
    """conv2d(x, w) + b on NHWC x, then the unary post-op `attr` ("none" for none)."""
    import torch

    with torch.no_grad():
        x, geometry = _nchw(x), _geometry(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups)
        weight = packed(site, lambda: _pack_conv(w, x, geometry))
        out = torch.ops.mkldnn._convolution_pointwise(x, weight, torch.from_dlpack(b), *geometry, attr, list(scalars),
                                                      algorithm or None)
        return _nhwc(out)


def conv2d_add(x, other, w, b, site, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups, attr):
    """conv2d(x, w) + b + other on NHWC tensors, then relu if `attr` says so (oneDNN's binary
    add post-op)."""
    import torch

    with torch.no_grad():
        x, geometry = _nchw(x), _geometry(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups)
        weight = packed(site, lambda: _pack_conv(w, x, geometry))
        out = torch.ops.mkldnn._convolution_pointwise.binary(
            x, _nchw(other), weight, torch.from_dlpack(b), *geometry, "add", 1.0,
            None if attr == "none" else attr, [], None)
        return _nhwc(out)


def linear(x, w, b, site, attr, algorithm, *rest):
    """x @ w.T + b, then the unary post-op `attr`; `rest`: its scalars, then the output's shape
    (its rank first, from the end)."""
    import torch

    with torch.no_grad():
        x = torch.from_dlpack(x)
        rank = int(rest[-1])
        shape, scalars = [int(d) for d in rest[-1 - rank:-1]], list(rest[:-1 - rank])
        weight = packed(site, lambda: _pack_linear(w, x))
        out = torch.ops.mkldnn._linear_pointwise(x, weight, torch.from_dlpack(b), attr, scalars, algorithm or None)
        return out.reshape(shape).contiguous()


def linear_add(x, other, w, b, site, *shape):
    """x @ w.T + b + other (other reshaped as the product), in the output's shape."""
    import torch

    with torch.no_grad():
        x = torch.from_dlpack(x)
        weight = packed(site, lambda: _pack_linear(w, x))
        other = torch.from_dlpack(other).reshape(x.shape[0], -1)
        out = torch.ops.mkldnn._linear_pointwise.binary(x, other, weight, torch.from_dlpack(b), "add")
        return out.reshape([int(d) for d in shape]).contiguous()


def _nchw(x):
    """An NHWC tensor of TVM's as the channels-last NCHW tensor torch's convolutions take."""
    import torch

    return torch.from_dlpack(x).permute(0, 3, 1, 2)


def _nhwc(out):
    """A convolution's output as a contiguous NHWC tensor (no copy where it is channels-last)."""
    return out.permute(0, 2, 3, 1).contiguous()


def _geometry(stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups) -> tuple:
    """padding, stride, dilation, groups, as oneDNN's calls take them."""
    return [int(pad_h), int(pad_w)], [int(stride_h), int(stride_w)], [int(dilation_h), int(dilation_w)], int(groups)


def _pack_conv(w, x, geometry):
    import torch

    padding, stride, dilation, groups = geometry
    return torch.ops.mkldnn._reorder_convolution_weight(torch.from_dlpack(w), padding, stride, dilation, groups,
                                                        list(x.shape))


def _pack_linear(w, x):
    import torch

    return torch.ops.mkldnn._reorder_linear_weight(torch.from_dlpack(w), x.shape[0])
