"""Vendor implementations of the built-in operators, on torch tensors (CPU or GPU).

This module imports nothing from tensortune or TVM: a batch carried to a GPU host copies it
beside the runner, which times these baselines there in the same run as our kernels.
"""
from __future__ import annotations


# the half-precision variants of workloads/half.py: (input dtype, accumulator and output dtype)
PRECISIONS = {"fp16": ("float16", "float32"), "bf16": ("bfloat16", "float32"), "fp16acc16": ("float16", "float16")}


def gemm(a, b, **_):
    return a @ b


def conv2d_nhwc(x, w, K, S, **_):
    """NHWC input, HWIO weights, same padding, stride S (cuDNN's tensor-core layout)."""
    import torch

    out = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1), stride=S, padding=K // 2)
    return out.permute(0, 2, 3, 1)


def conv1d(a, b, N, **_):
    import torch

    # torch convolves by cross-correlation: flip the taps and pad fully
    return torch.nn.functional.conv1d(a[None, None], b.flip(0)[None, None], padding=N - 1)[0, 0]


def dwconv2d(a, w, C, K, **_):
    import torch

    return torch.nn.functional.conv2d(a, w, padding=(K - 1) // 2, groups=C)


def dwsep_conv2d(a, w, pw, C, K, **_):
    import torch

    return torch.nn.functional.conv2d(dwconv2d(a, w, C, K), pw)


TORCH = {"gemm": gemm, "conv1d": conv1d, "dwconv2d": dwconv2d, "dwsep_conv2d": dwsep_conv2d}
TORCH |= {f"{op}_{precision}": fn for precision in PRECISIONS
          for op, fn in (("gemm", gemm), ("batch_matmul", gemm), ("conv2d", conv2d_nhwc))}
