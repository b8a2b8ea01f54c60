"""Vendor implementations of the built-in operators, on torch tensors (CPU or GPU).

This module imports nothing from tensortune or TVM: a batch carried to a GPU host copies it
beside the runner, which times these baselines there in the same run as our kernels.
"""
from __future__ import annotations


def gemm(a, b, **_):
    return a @ b


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
