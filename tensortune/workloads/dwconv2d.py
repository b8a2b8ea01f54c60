"""Depthwise 2D convolution (NCHW, stride 1, same padding) and depthwise-separable blocks."""
import numpy as np

from . import vendor
from .fit import fit, spatial
from .registry import preset, workload


def _check(H: int, W: int, K: int) -> None:
    if K % 2 == 0:
        raise ValueError(f"kernel size K={K} must be odd (same padding)")
    if K > min(H, W) * 2 + 1:
        raise ValueError(f"kernel size K={K} is too large for a {H}x{W} image")


def _depthwise(A, Wt, B, C, H, W, K, name):
    from tvm import te, tirx

    p = (K - 1) // 2
    A_pad = te.compute((B, C, H + 2 * p, W + 2 * p), lambda b, c, h, w: tirx.if_then_else(
        tirx.all(h >= p, h < H + p, w >= p, w < W + p), A[b, c, h - p, w - p],
        tirx.const(0.0, "float32")), name="A_pad")
    kh = te.reduce_axis((0, K), name="kh")
    kw = te.reduce_axis((0, K), name="kw")
    return te.compute((B, C, H, W), lambda b, c, h, w: te.sum(
        A_pad[b, c, h + kh, w + kw] * Wt[c, 0, kh, kw], axis=[kh, kw]), name=name)


def _depthwise_reference(a, w):
    K = w.shape[-1]
    p = (K - 1) // 2
    padded = np.pad(a, ((0, 0), (0, 0), (p, p), (p, p)))
    H, W = a.shape[2:]
    out = np.zeros_like(a)
    for kh in range(K):
        for kw in range(K):
            out += padded[:, :, kh:kh + H, kw:kw + W] * w[None, :, 0, kh, kw, None, None]
    return out


def _dw_hand(B: int, C: int, H: int, W: int, K: int) -> dict:
    """Channels in parallel, each channel's padded image computed inside the channel loop
    (cache-resident, no bounds checks in the hot loop), a 4-row x 16-column register tile
    (one AVX-512 vector per row), the taps unrolled around it."""
    return {"tile.b": spatial(B, 1, 1), "tile.c": spatial(C, 1, 1), "tile.h": spatial(H, 1, 4),
            "tile.w": spatial(W, 1, 16),
            "tile.kh": (1, K), "tile.kw": (1, K), "order": "S0 S1 R0 R1 S2",
            "stage.A_pad": 0, "parallel": 2, "vectorize": True, "unroll": 64}


def _dw_gpu_hand(B: int, C: int, H: int, W: int, K: int) -> dict:
    """The GEMM recipe's analogue: an 8x32 output tile per block and channel (8x8 threads,
    1x4 per thread), the taps cached per thread, padding inlined, written back 4 wide."""
    return {"tile.b": spatial(B, 1, 1), "tile.c": spatial(C, 1, 1), "tile.h": spatial(H, 8, 1),
            "tile.w": spatial(W, 8, 4), "tile.kh": (1, K), "tile.kw": (1, K), "stage.A_pad": "inline",
            "cache.A_pad": "local", "cache.W": "local", "cache_at": "R0", "accumulate": "local", "vector": 4}


@workload("dwconv2d", params=("B", "C", "H", "W", "K"), flops=lambda B, C, H, W, K: 2 * B * C * H * W * K * K,
          reference=lambda a, w, **_: _depthwise_reference(a, w), hand={"cpu-template": _dw_hand, "cuda-template": _dw_gpu_hand},
          torch=vendor.dwconv2d)
def dwconv2d(B: int, C: int, H: int, W: int, K: int) -> list:
    """Depthwise conv: input (B,C,H,W), weights (C,1,K,K), stride 1, zero padding (K-1)//2."""
    from tvm import te, tirx

    _check(H, W, K)
    A = te.placeholder((B, C, H, W), "float32", name="A")
    Wt = te.placeholder((C, 1, K, K), "float32", name="W")
    return [A, Wt, _depthwise(A, Wt, B, C, H, W, K, "D")]


def _sep_gpu_hand(B: int, C: int, H: int, W: int, K: int, C_out: int) -> dict:
    """The pointwise stage tiled like the depthwise one, all output channels of a pixel in
    one thread's registers; the depthwise stage its own kernel."""
    return {"tile.b": spatial(B, 1, 1), "tile.o": spatial(C_out, 1, C_out), "tile.h": spatial(H, 8, 1),
            "tile.w": spatial(W, 32, 1), "tile.c": (1, C), "stage.D": "root", "stage.A_pad": "inline",
            "cache.D": "local", "cache.PW": "local", "cache_at": "R0", "accumulate": "local", "vector": 1}


def _sep_reference(a, w, pw, **_):
    return np.einsum("bchw,oc->bohw", _depthwise_reference(a, w), pw[:, :, 0, 0]).astype(a.dtype)


def _sep_hand(B: int, C: int, H: int, W: int, K: int, C_out: int) -> dict:
    """Output channels blocked, the depthwise result computed per row strip inside the
    pointwise loop nest, vectorised columns."""
    return {"tile.b": spatial(B, 1, 1), "tile.o": spatial(C_out, 1, 1), "tile.h": spatial(H, 4, 1),
            "tile.w": spatial(W, 1, 32), "tile.c": (1, C), "order": "S0 S1 R0 R1 S2",
            "stage.D": 0, "stage.A_pad": "inline", "parallel": 3, "vectorize": True, "unroll": 16}


@workload("dwsep_conv2d", params=("B", "C", "H", "W", "K", "C_out"),
          flops=lambda B, C, H, W, K, C_out: 2 * B * C * H * W * (K * K + C_out),
          reference=_sep_reference, hand={"cpu-template": _sep_hand, "cuda-template": _sep_gpu_hand},
          torch=vendor.dwsep_conv2d)
def dwsep_conv2d(B: int, C: int, H: int, W: int, K: int, C_out: int) -> list:
    """Depthwise KxK conv then a 1x1 pointwise conv to C_out channels (weights (C_out,C,1,1))."""
    from tvm import te, tirx

    _check(H, W, K)
    A = te.placeholder((B, C, H, W), "float32", name="A")
    Wt = te.placeholder((C, 1, K, K), "float32", name="W")
    PW = te.placeholder((C_out, C, 1, 1), "float32", name="PW")
    D = _depthwise(A, Wt, B, C, H, W, K, "D")
    c = te.reduce_axis((0, C), name="c")
    out = te.compute((B, C_out, H, W), lambda b, o, h, w: te.sum(D[b, c, h, w] * PW[o, c, 0, 0], axis=c), name="P")
    return [A, Wt, PW, out]


preset("dwconv2d-seed", "dwconv2d", (1, 5, 128, 128, 3), "seed depthwise conv, 1x5x128x128, 3x3")
preset("dwconv2d-mobilenet", "dwconv2d", (1, 32, 112, 112, 3), "MobileNetV1 first depthwise layer")
preset("dwsep-seed", "dwsep_conv2d", (1, 5, 128, 128, 3, 8), "seed depthwise conv followed by 1x1 to 8 channels")
preset("dwsep-mobilenet", "dwsep_conv2d", (1, 32, 112, 112, 3, 64), "MobileNetV1 first separable block")
