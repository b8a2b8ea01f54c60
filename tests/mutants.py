"""A TEST DOUBLE of a search space, for contract tests of the evaluators: named points of one
GEMM, the correct naive kernel, an invalid point, a kernel that hangs (its reduction runs
2^30 times too long), and a kernel that clamps its outputs at 10. The clamp passes the timed draw (uniform inputs in [-1, 1] keep every output far below 10)
and is caught only by the large and exact draws: the kind of kernel one check would pass."""
import tvm
from tvm import s_tir, te

from tensortune.points import InvalidPoint
from tensortune.space import make_space
from tensortune.workloads import get_workload

SHAPE = dict(M=16, N=24, K=12)


def clamped_gemm(M, N, K):
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    S = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="S")
    C = te.compute((M, N), lambda i, j: te.min(S[i, j], tvm.tirx.const(10.0, "float32")), name="C")
    return te.create_prim_func([A, B, C])


def hanging_gemm(M, N, K):
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K << 30), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k % K] * B[k % K, j], axis=k), name="C")
    return te.create_prim_func([A, B, C])


class MutantSpace:
    """Points {"kernel": "naive" | "clamped" | "hangs" | "invalid"} of a GEMM (a test double, see above)."""

    name = "mutants"

    def __init__(self, target):
        self.workload = get_workload("gemm", ",".join(f"{k}={v}" for k, v in SHAPE.items()))
        self.template = make_space("cpu-template", self.workload, target)

    def apply(self, point):
        if point["kernel"] == "naive":
            return self.template.apply(self.template.named("naive"))
        if point["kernel"] == "clamped":
            return s_tir.Schedule(clamped_gemm(**SHAPE))
        if point["kernel"] == "hangs":
            return s_tir.Schedule(hanging_gemm(**SHAPE))
        raise InvalidPoint("this point is invalid on purpose")
