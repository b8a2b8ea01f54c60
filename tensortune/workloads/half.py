"""Matrix multiplies and convolutions on half-precision inputs, the tensor cores' operators.

Each operator comes in the precisions of `vendor.PRECISIONS`: float16 or bfloat16 inputs with
float32 accumulation and output (`_fp16`, `_bf16`), or float16 accumulated in float16
(`_fp16acc16`: twice the tensor-core rate on most GPUs, at float16's rounding). The products
of two half-precision values are exact in float32, so a float32-accumulating kernel differs
from the reference only by the order of its sums. Convolutions are NHWC with HWIO weights and
same padding: the layout in which a convolution is a GEMM of (N*OH*OW) x CO x (K*K*CI)
(implicit GEMM), as tensor cores want it.
"""
import numpy as np

from .registry import preset, workload
from .vendor import PRECISIONS, TORCH


def _product(a, b, accumulate: str):
    """a x b summed in the accumulator's dtype (half-precision values are cast up first)."""
    return a * b if a.dtype == accumulate else a.astype(accumulate) * b.astype(accumulate)


def _gemm(dtype: str, accumulate: str):
    def compute(M: int, N: int, K: int) -> list:
        from tvm import te

        A = te.placeholder((M, K), dtype, name="A")
        B = te.placeholder((K, N), dtype, name="B")
        k = te.reduce_axis((0, K), name="k")
        C = te.compute((M, N), lambda i, j: te.sum(_product(A[i, k], B[k, j], accumulate), axis=k), name="C")
        return [A, B, C]

    compute.__doc__ = f"C[M,N] = A[M,K] @ B[K,N], {dtype} inputs accumulated in {accumulate}."
    return compute


def _batch_matmul(dtype: str, accumulate: str):
    def compute(B: int, M: int, N: int, K: int) -> list:
        from tvm import te

        X = te.placeholder((B, M, K), dtype, name="X")
        Y = te.placeholder((B, K, N), dtype, name="Y")
        k = te.reduce_axis((0, K), name="k")
        Z = te.compute((B, M, N), lambda b, i, j: te.sum(_product(X[b, i, k], Y[b, k, j], accumulate), axis=k),
                       name="Z")
        return [X, Y, Z]

    compute.__doc__ = f"Z[B,M,N] = X[B,M,K] @ Y[B,K,N] per batch, {dtype} inputs accumulated in {accumulate}."
    return compute


def _conv2d(dtype: str, accumulate: str):
    def compute(N: int, H: int, W: int, CI: int, CO: int, K: int, S: int) -> list:
        from tvm import te, tirx

        if K % 2 == 0:
            raise ValueError(f"kernel size K={K} must be odd (same padding)")
        p = K // 2
        X = te.placeholder((N, H, W, CI), dtype, name="X")
        Wt = te.placeholder((K, K, CI, CO), dtype, name="W")
        X_pad = te.compute((N, H + 2 * p, W + 2 * p, CI), lambda n, h, w, c: tirx.if_then_else(
            tirx.all(h >= p, h < H + p, w >= p, w < W + p), X[n, h - p, w - p, c], tirx.const(0, dtype)),
            name="X_pad")
        kh, kw, ci = te.reduce_axis((0, K), name="kh"), te.reduce_axis((0, K), name="kw"), te.reduce_axis((0, CI), name="ci")
        OH, OW = (H - 1) // S + 1, (W - 1) // S + 1
        Y = te.compute((N, OH, OW, CO), lambda n, h, w, co: te.sum(
            _product(X_pad[n, h * S + kh, w * S + kw, ci], Wt[kh, kw, ci, co], accumulate), axis=[kh, kw, ci]),
            name="Y")
        return [X, Wt, Y]

    compute.__doc__ = (f"Y = conv2d(X, W), NHWC input, HWIO weights, same padding, stride S, "
                       f"{dtype} inputs accumulated in {accumulate}.")
    return compute


def _matmul_reference(a, b, **_):
    return a @ b


def _conv2d_reference(x, w, K, S, **_):
    """A sum over the K x K taps of shifted, strided input slices times the tap's CI x CO
    matrix: each a BLAS product, fast enough for ResNet-50's layers."""
    p = K // 2
    padded = np.pad(x, ((0, 0), (p, p), (p, p), (0, 0)))
    H, W = x.shape[1:3]
    OH, OW = (H - 1) // S + 1, (W - 1) // S + 1
    out = 0
    for kh in range(K):
        for kw in range(K):
            out = out + padded[:, kh:kh + S * (OH - 1) + 1:S, kw:kw + S * (OW - 1) + 1:S, :] @ w[kh, kw]
    return out


def _register() -> None:
    for precision, (dtype, accumulate) in PRECISIONS.items():
        workload(f"gemm_{precision}", ("M", "N", "K"), lambda M, N, K: 2 * M * N * K, _matmul_reference,
                 torch=TORCH[f"gemm_{precision}"])(_gemm(dtype, accumulate))
        workload(f"batch_matmul_{precision}", ("B", "M", "N", "K"), lambda B, M, N, K: 2 * B * M * N * K,
                 _matmul_reference, torch=TORCH[f"batch_matmul_{precision}"])(_batch_matmul(dtype, accumulate))
        workload(f"conv2d_{precision}", ("N", "H", "W", "CI", "CO", "K", "S"),
                 lambda N, H, W, CI, CO, K, S: 2 * N * ((H - 1) // S + 1) * ((W - 1) // S + 1) * CO * K * K * CI,
                 _conv2d_reference, torch=TORCH[f"conv2d_{precision}"])(_conv2d(dtype, accumulate))


_register()
preset("gemm-4096-fp16", "gemm_fp16", (4096, 4096, 4096), "fp16 GEMM 4096^3 for tensor cores, fp32 accumulation")
preset("gemm-4096-bf16", "gemm_bf16", (4096, 4096, 4096), "bf16 GEMM 4096^3 for tensor cores, fp32 accumulation")
# ResNet-50's 3x3 convolutions at stride 1 (one per stage) and two of its 1x1 ones, batch 8, fp16
RESNET50_FP16 = {"resnet50-fp16-3x3-56": (8, 56, 56, 64, 64, 3, 1), "resnet50-fp16-3x3-28": (8, 28, 28, 128, 128, 3, 1),
                 "resnet50-fp16-3x3-14": (8, 14, 14, 256, 256, 3, 1), "resnet50-fp16-3x3-7": (8, 7, 7, 512, 512, 3, 1),
                 "resnet50-fp16-1x1-56": (8, 56, 56, 256, 64, 1, 1), "resnet50-fp16-1x1-14": (8, 14, 14, 1024, 256, 1, 1)}
for _name, _shape in RESNET50_FP16.items():
    preset(_name, "conv2d_fp16", _shape, "ResNet-50 layer (NHWC, batch 8), fp16 inputs, fp32 accumulation")
