"""Full 1D convolution, numpy.convolve semantics."""
import numpy as np

from . import vendor
from .fit import fit, spatial
from .registry import preset, workload


def _hand(M: int, N: int) -> dict:
    """Split the output for contiguous, vectorised inner loops with the taps outside them,
    accumulate the tile locally, and compute the padded input inside the consumer."""
    return {"tile.i": spatial(M + N - 1, 4, 16), "tile.k": fit(N, 64),
            "order": "S0 S1 R0 R1 S2", "accumulate": "local", "stage.A_pad": 0,
            "parallel": 1, "vectorize": True, "unroll": 16}


def _gpu_hand(M: int, N: int) -> dict:
    """The GEMM recipe's analogue: 256 outputs per block (64 threads x 4), taps split by 16
    with both operands cached at that level in registers, padding inlined."""
    return {"tile.i": spatial(M + N - 1, 64, 4), "tile.k": fit(N, 16), "stage.A_pad": "inline",
            "cache.A_pad": "local", "cache.B": "local", "cache_at": "R0", "accumulate": "local", "vector": 4}


def _reference(a, b, **_):
    return np.convolve(a, b).astype(a.dtype)


@workload("conv1d", params=("M", "N"), flops=lambda M, N: 2 * M * N, reference=_reference, hand={"cpu-template": _hand, "cuda-template": _gpu_hand},
          torch=vendor.conv1d)
def conv1d(M: int, N: int) -> list:
    """Full convolution of A[M] with B[N]: C[M+N-1], as numpy.convolve(A, B).

    A padded-input stage plus a reduction over N (tunes far better than a conditional
    inside the reduction)."""
    from tvm import te, tirx

    A = te.placeholder((M,), "float32", name="A")
    B = te.placeholder((N,), "float32", name="B")
    pad = N - 1
    A_pad = te.compute((M + 2 * pad,), lambda t: tirx.if_then_else(
        tirx.all(t >= pad, t < M + pad), A[t - pad], tirx.const(0.0, "float32")), name="A_pad")
    k = te.reduce_axis((0, N), name="k")
    C = te.compute((M + N - 1,), lambda i: te.sum(A_pad[i + k] * B[N - 1 - k], axis=k), name="C")
    return [A, B, C]


preset("conv1d-1024", "conv1d", (1024, 1024), "seed 1D convolution, M=N=1024")
preset("conv1d-audio", "conv1d", (16000, 401), "one second of 16 kHz audio through a 401-tap FIR filter")
