import numpy as np
import pytest
import torch

from tensortune.errors import UserError
from tensortune.workloads import FAMILIES, PRESETS, get_workload

from conftest import SMALL


@pytest.mark.parametrize("family", sorted(SMALL))
def test_references_agree_with_vendor_libraries(family):
    """NumPy references against torch's implementation (dwconv2d: conv2d with groups=C)."""
    for shape in SMALL[family]:
        wl = get_workload(family, ",".join(map(str, shape)))
        rng = np.random.default_rng(1)
        inputs = [rng.uniform(-1, 1, s).astype(d) for s, d in wl.io_specs()[0]]
        ours = wl.reference(*inputs)
        theirs = wl.family.torch(*[torch.from_numpy(a) for a in inputs], **wl.kwargs).numpy()
        assert ours.shape == wl.io_specs()[1][0]
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4)


def test_conv1d_matches_numpy_convolve():
    wl = get_workload("conv1d", "M=10,N=4")
    a, b = np.arange(10, dtype="float32"), np.array([1, -2, 0.5, 3], dtype="float32")
    np.testing.assert_array_equal(wl.reference(a, b), np.convolve(a, b))
    assert wl.io_specs()[1][0] == (13,)


def test_counts():
    wl = get_workload("gemm-1024")
    assert wl.flops == 2 * 1024**3
    assert wl.bytes == 3 * 1024 * 1024 * 4
    assert get_workload("dwconv2d-seed").flops == 2 * 5 * 128 * 128 * 9


def test_presets_cover_the_seed_shapes():
    assert {"gemm-1024", "conv1d-1024", "dwconv2d-seed"} <= set(PRESETS)
    for name, (family, shape, _) in PRESETS.items():
        assert len(shape) == len(FAMILIES[family].params), name


@pytest.mark.parametrize("name,shape,message", [
    ("matmul", None, "unknown workload 'matmul'"),
    ("gemm", None, "needs a shape"),
    ("gemm", "M=4,N=4", "expected M, N, K"),
    ("gemm", "4,4,0", "positive integers"),
    ("gemm", "4,4,x", "positive integers"),
    ("dwconv2d", "1,2,8,8,4", "must be odd"),
])
def test_bad_workloads_say_what_to_do(name, shape, message):
    with pytest.raises(UserError, match=message):
        get_workload(name, shape)


def test_shape_accepts_names_and_positions():
    assert get_workload("gemm", "K=3,M=1,N=2").shape == (1, 2, 3)
    assert get_workload("gemm", "1x2x3").shape == (1, 2, 3)


def test_a_users_operator_is_keyed_by_its_structure_not_its_file_name(tmp_path):
    """Two files defining op.py:f, or one edited, never share records."""
    from tensortune.workloads.registry import FAMILIES as families

    source = '''from tvm import te
def f(N):
    a = te.placeholder((N,), name="a")
    return [a, te.compute((N,), lambda i: a[i] {op} 2.0, name="out")]
'''
    keys = []
    for folder, op in (("one", "*"), ("two", "*"), ("three", "+")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "op.py").write_text(source.format(op=op))
        keys.append(get_workload(f"{tmp_path / folder / 'op.py'}:f", "N=8").key)
        families.pop("op.f")
    assert keys[0].startswith("op.f(N=8)#") and keys[0] == keys[1] and keys[2] != keys[0]


def test_a_built_in_operators_key_changes_with_its_computation_and_with_tvm(monkeypatch):
    import tvm

    gemm, other_shape = get_workload("gemm", "M=8,N=8,K=8"), get_workload("gemm", "M=8,N=8,K=4")
    assert gemm.key.startswith("gemm(M=8,N=8,K=8)#") and gemm.key == get_workload("gemm", "M=8,N=8,K=8").key
    assert gemm.digest != other_shape.digest  # the TensorIR differs
    monkeypatch.setattr(tvm, "__version__", tvm.__version__ + ".next")
    assert get_workload("gemm", "M=8,N=8,K=8").key != gemm.key  # a new TVM lowers it anew: new records
