"""A user's operator without a NumPy reference: checked against the unscheduled kernel."""
from tvm import te


def batch_matmul(B, M, N, K):
    a = te.placeholder((B, M, K), "float32", name="a")
    b = te.placeholder((B, K, N), "float32", name="b")
    k = te.reduce_axis((0, K), name="k")
    return [a, b, te.compute((B, M, N), lambda n, i, j: te.sum(a[n, i, k] * b[n, k, j], axis=k), name="c")]
