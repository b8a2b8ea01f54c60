"""C = A @ B in float32."""

from . import vendor
from .fit import fit, spatial
from .registry import preset, workload


def _hand(M: int, N: int, K: int) -> dict:
    """Blocking + packing + vectorise + parallel: an 8x32 register tile (8 rows unrolled,
    32 columns = two AVX-512 vectors), K blocked by 256 outside the tile, both operands
    packed per K block, row blocks parallel."""
    return {"tile.i": spatial(M, 16, 8), "tile.j": spatial(N, 1, 32), "tile.k": fit(K, 256),
            "order": "S0 R0 S1 R1 S2", "pack.A": 1, "pack.B": 1,
            "parallel": 1, "vectorize": True, "unroll": 64}


def _gpu_hand(M: int, N: int, K: int) -> dict:
    """The seed's GPU recipe: a 64x64 output tile per block, 4x4 per thread (16x16 threads),
    the reduction split by 16 with both operands cached at that level in registers, the
    tile accumulated in registers and written back 4 wide."""
    return {"tile.i": spatial(M, 16, 4), "tile.j": spatial(N, 16, 4), "tile.k": fit(K, 16),
            "cache.A": "local", "cache.B": "local", "cache_at": "R0", "accumulate": "local", "vector": 4}


def _reference(a, b, **_):
    return a @ b


@workload("gemm", params=("M", "N", "K"), flops=lambda M, N, K: 2 * M * N * K,
          reference=_reference, hand={"cpu-template": _hand, "cuda-template": _gpu_hand}, torch=vendor.gemm)
def gemm(M: int, N: int, K: int) -> list:
    """Matrix multiply C[M,N] = A[M,K] @ B[K,N], float32."""
    from tvm import te

    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


preset("gemm-1024", "gemm", (1024, 1024, 1024), "seed GEMM, 1024^3")
preset("gemm-bert", "gemm", (512, 3072, 768), "BERT-base FFN GEMM: 512 tokens x 768 -> 3072")
