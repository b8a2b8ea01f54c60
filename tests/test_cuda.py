"""The CUDA knob space: static checks against the GPU's limits, and real builds (TVM + nvcc,
no GPU needed) for every seed workload."""
import random
import shutil

import pytest
import tvm
from hypothesis import given, settings, strategies as st

from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.target import GpuLimits, Target
from tensortune.points import InvalidPoint
from tensortune.space import make_space
from tensortune.space.cuda_template import resources
from tensortune.target import make_target
from tensortune.workloads import get_workload

SEED = ("gemm-1024", "conv1d-1024", "dwconv2d-seed", "dwsep-seed")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def gpu(**limits) -> Target:
    """A CUDA target with these limits (sm_90's by default)."""
    return Target("cuda", GpuLimits(**limits).target(), 1)


def cuda_space(name, **limits):
    return make_space("cuda-template", get_workload(name), gpu(**limits))


def cuda_source(space, point) -> str:
    target = tvm.target.Target(space.limits.target(), host={"kind": "llvm"})
    return tvm.compile(space.apply(point).mod, target=target).mod.imports[0].inspect_source()


@pytest.mark.parametrize("name", SEED)
def test_naive_and_hand_are_valid_for_every_seed_workload(name):
    space = cuda_space(name)
    assert space.check(space.named("naive")) is None
    assert space.check(space.named("hand")) is None


def test_the_hand_gemm_is_the_seed_recipe():
    space = cuda_space("gemm-1024")
    hand = space.named("hand")
    assert hand["tile.i"] == (16, 16, 4) and hand["tile.j"] == (16, 16, 4) and hand["tile.k"] == (64, 16)
    # per thread: a 4x4 accumulator, A's 4x16 and B's 16x4 slices of each reduction step
    assert resources(space.schedule(hand)) == {"shared_bytes": 0, "local_words": 16 + 64 + 64}
    source = cuda_source(space, hand)
    assert "__launch_bounds__(256)" in source and "A_local" in source and "float4" in source
    assert "__shared__" not in source


def test_shared_caching_loads_cooperatively_and_counts_its_bytes():
    space = cuda_space("gemm-1024")
    point = space.named("hand") | {"cache.A": "shared", "cache.B": "shared"}
    # the block's 64x16 slices of A and of B, float32
    assert resources(space.schedule(point))["shared_bytes"] == 2 * 64 * 16 * 4
    source = cuda_source(space, point)
    assert "__shared__" in source and "__syncthreads()" in source and "float4" in source


@pytest.mark.parametrize("limits,change,reason", [
    ({}, {"tile.i": (4, 64, 4), "tile.j": (4, 64, 4)}, "4096 threads per block exceed the limit of 1024"),
    ({"max_shared_memory_per_block": 4096}, {"cache.A": "shared", "cache.B": "shared"},
     "8192 bytes of shared memory exceed the limit of 4096"),
    ({}, {"tile.k": (4, 256)}, "registers per thread exceed the limit of 255"),
    ({"max_threads_per_block": 128}, {}, "256 threads per block exceed the limit of 128"),
])
def test_static_checks_reject_with_the_reason(limits, change, reason):
    space = cuda_space("gemm-1024", **limits)
    point = space.named("naive") | space.workload.family.hand["cuda-template"](**space.workload.kwargs) | change
    assert reason in space.check(point)
    with pytest.raises(InvalidPoint, match=reason.split(" exceed")[0]):
        space.apply(point)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6))
def test_sampled_points_respect_the_limits(seed):
    space = cuda_space("dwconv2d-seed")
    point = space.sample(random.Random(seed))
    usage = resources(space.schedule(point))
    assert space.threads(point) <= 1024 and usage["shared_bytes"] <= 49152 and usage["local_words"] + 16 <= 255


def test_tiles_of_awkward_extents_are_guarded():
    """conv1d-1024's output has 2047 = 23 x 89 elements: tiles cover 2048 and the overhang
    is predicated away."""
    space = cuda_space("conv1d-1024")
    assert space.named("hand")["tile.i"] == (8, 64, 4)
    assert "< 2047" in cuda_source(space, space.named("hand"))


def test_a_cpu_space_is_refused_for_a_cuda_target():
    from tensortune.errors import UserError

    with pytest.raises(UserError, match="does not fit a cuda target"):
        make_space("cpu-template", get_workload("gemm-1024"), gpu())


@needs_nvcc
def test_every_seed_workload_builds_to_a_binary_for_the_gpu(tmp_path):
    target = make_target("cuda", 1)
    for name in SEED:
        space = make_space("cuda-template", get_workload(name), target)
        points = [space.named("naive"), space.named("hand"), space.sample(random.Random(1))]
        paths = [str(tmp_path / f"{name}-{i}.so") for i in range(len(points))]
        with Measurer(target, MeasureConfig(build_workers=2)) as measurer:
            outcomes = measurer.build(space, points, paths)
        assert all(o.ok for o in outcomes), [o.reason for o in outcomes]
        for path in paths:
            binary = open(path.replace(".so", ".fatbin"), "rb").read()
            assert binary[:4] == bytes.fromhex("50ed55ba")  # the CUDA fat binary magic


@needs_nvcc
def test_the_best_imported_gpu_kernel_exports_with_its_binary(tmp_path):
    """Records of a GPU measured elsewhere (as `batch import` stores them) export here."""
    from tensortune.db import Database, Task
    from tensortune.deploy.exporter import export_best
    from tensortune.result import Result

    wl = get_workload("gemm", "M=64,N=64,K=64")
    space = make_space("cuda-template", wl, gpu())
    db = Database(str(tmp_path / "t.db"))
    task = Task(wl.key, "cuda", "sm_90-nvidia-h200", "cuda-template")
    db.add(task, "search", [space.named("naive"), space.named("hand")], [Result("ok", runs=(2e-5,)), Result("ok", runs=(1e-5,))])
    paths = export_best(wl, make_target("cuda", 1), db, tmp_path / "out")
    assert [p.name for p in paths] == ["kernel.so", "kernel.py", "record.json", "kernel.fatbin", "kernel.sha256"]
    assert all(p.is_file() for p in paths)
    record = __import__("json").loads(paths[2].read_text())
    assert record["hardware"] == "sm_90-nvidia-h200" and record["point"]["tile.k"] == list(space.named("hand")["tile.k"])
