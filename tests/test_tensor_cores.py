"""Tensor cores, built here for the H200 (sm_90; no GPU needed): matrix multiplies on float16
or bfloat16 operands in our tensor-core template, and half-precision operators in the sketch
space (MetaSchedule's tensor-core rules), build to kernels whose PTX holds the mma
instructions (an fp32 GEMM's does not); a point over the GPU's limits or misaligned with
the fragments is refused, the limit named, before anything compiles."""
import random
import re
import shutil

import pytest
import tvm

from tensortune.errors import UserError
from tensortune.measure.config import MeasureConfig
from tensortune.measure.measurer import Measurer
from tensortune.points import InvalidPoint
from tensortune.space import make_space
from tensortune.target import compile_for, make_target
from tensortune.workloads import get_workload

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
TARGET = make_target("cuda", 1)


def tensorized(space) -> set[int]:
    """The sketches MetaSchedule's tensor-core rule made (their traces tensorize)."""
    return {s for s, trace in enumerate(space.traces) if "meta_schedule.auto_tensorize" in str(trace)}


@pytest.fixture(scope="module")
def builder():
    """One set of build workers for the module (each worker imports TVM: seconds apiece)."""
    with Measurer(TARGET, MeasureConfig(build_workers=2)) as measurer:
        yield measurer


def built_ptx(builder, space, points, tmp_path) -> list[str]:
    """Build the points as a tuning run does (binaries for sm_90), then the PTX of each
    kernel's CUDA source, compiled the same way."""
    from tvm.support import nvcc

    paths = [str(tmp_path / f"{space.workload.name}-{i}.so") for i in range(len(points))]
    outcomes = builder.build(space, points, paths)
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes]
    ptx = []
    for point in points:
        source = compile_for(space.apply(point).mod, TARGET.spec).mod.imports[0].inspect_source()
        with tvm.target.Target(TARGET.spec):
            ptx.append(nvcc.compile_cuda(source, target_format="ptx", arch="sm_90", compiler="nvcc").decode())
    return ptx


@needs_nvcc
@pytest.mark.parametrize("name,shape,types", [("gemm_fp16", "M=256,N=256,K=256", "f32.f32"),
                                              ("conv2d_bf16", "N=2,H=14,W=14,CI=64,CO=64,K=3,S=1", "f32.bf16.bf16.f32"),
                                              ("gemm_fp16acc16", "M=128,N=128,K=128", "f16.f16")])
def test_tensor_core_points_build_for_sm90_and_their_ptx_holds_mma(name, shape, types, builder, tmp_path):
    """In the sketch space: float16 through MetaSchedule's own tensor-core rule, bfloat16 through
    the wmma intrinsic groups we give it (the convolution also covers the float16 one's path)."""
    space = make_space("sketch", get_workload(name, shape), TARGET)
    assert tensorized(space), "MetaSchedule's tensor-core rule made no sketch"
    rng = random.Random(0)
    points = []
    while len(points) < 2:  # float32-accumulating ones included: TVM's shared-memory reuse broke most of them
        point = space.sample(rng)
        if point["sketch"] in tensorized(space):
            points.append(point)
    for ptx in built_ptx(builder, space, points, tmp_path):
        assert re.search(rf"\bwmma\.mma\.sync\.aligned\.\w+\.\w+\.m16n16k16\.{re.escape(types)}\s", ptx)


@needs_nvcc
@pytest.mark.parametrize("name,shape,operand,fragment", [("gemm_fp16", "M=256,N=128,K=256", "f16", "16x16x16"),
                                                         ("gemm_bf16", "M=128,N=128,K=128", "bf16", "32x8x16"),
                                                         ("batch_matmul_fp16", "B=2,M=64,N=128,K=128", "f16", "8x32x16")])
def test_the_tensor_core_template_builds_for_sm90_with_mma_and_async_copies(name, shape, operand, fragment, builder,
                                                                           tmp_path):
    """At a fragment shape, a pipelined point (two stages) and an unpipelined one: both
    multiply on tensor cores with the operand's type and the fragment's shape; only the
    pipelined one copies asynchronously."""
    space = make_space("cuda-tensorcore", get_workload(name, shape), TARGET)
    points = [dict(space.named("default"), fragment=fragment), dict(space.named("default"), fragment=fragment, stages=1, pad=0)]
    pipelined, plain = built_ptx(builder, space, points, tmp_path)
    m, n, k = fragment.split("x")
    for ptx in (pipelined, plain):
        assert re.search(rf"\bwmma\.mma\.sync\.aligned\.row\.row\.m{m}n{n}k{k}\.f32\.", ptx)  # float32 accumulators
        assert re.search(rf"\bwmma\.load\.a\.sync\.aligned\.row\.m{m}n{n}k{k}(\.shared)?\.{operand}\b", ptx)
    assert "cp.async" in pipelined and "cp.async" not in plain


def test_the_tensor_core_template_refuses_before_compiling_what_does_not_fit():
    space = make_space("cuda-tensorcore", get_workload("gemm_fp16", "M=256,N=96,K=256"), TARGET)
    # a 256 x 32 tile, 64 deep, three stages: 3 x (256 x (64 + 8) + 64 x (32 + 8)) x 2 bytes
    big = {"fragment": "16x16x16", "warps_m": 4, "warps_n": 2, "frags_m": 4, "frags_n": 1, "chunk": 4, "stages": 3, "pad": 8, "vector": 8}
    assert space.check(big) == "125952 bytes of shared memory exceed the limit of 49152"
    assert space.check(dict(big, stages=1)) is None  # 41984 bytes
    assert space.check(space.named("default")) == "N=96 is not a multiple of the tile's 64 (whole 16x16x16 fragments only)"
    assert space.check(dict(big, frags_m=1, frags_n=1, chunk=1)) == \
        "the A tile's 1024 elements do not divide among 256 threads x 8-wide loads"
    shallow = make_space("cuda-tensorcore", get_workload("gemm_fp16", "M=64,N=64,K=32"), TARGET)
    assert shallow.check(shallow.named("default")) == "2 pipeline stages exceed the reduction's 1 steps"
    with pytest.raises(UserError, match=r"does not fit \(it is not one matrix multiply"):
        make_space("cuda-tensorcore", get_workload("conv2d_fp16", "N=1,H=8,W=8,CI=16,CO=16,K=3,S=1"), TARGET)


@needs_nvcc
def test_an_fp32_gemm_gets_no_tensor_core_instructions(builder, tmp_path):
    space = make_space("sketch", get_workload("gemm", "M=256,N=256,K=256"), TARGET)
    assert not tensorized(space)
    (ptx,) = built_ptx(builder, space, [space.sample(random.Random(0))], tmp_path)
    assert not re.search(r"\bw?mma\.", ptx) and re.search(r"\bfma\.rn(\.ftz)?\.f32\b", ptx)


def test_a_tensor_core_point_over_the_shared_memory_limit_is_refused_with_the_limit_named():
    """Random decisions of the tensor-core sketch often stage more than 48 KiB: refused by
    applying the point (no compile), the limit and the amount named."""
    space = make_space("sketch", get_workload("gemm_fp16", "M=256,N=256,K=256"), TARGET)
    rng, reasons = random.Random(0), []
    while len(reasons) < 40:
        point = space.sample(rng, checked=False)
        if point["sketch"] in tensorized(space):
            reasons.append(space.check(point))
    over = [r for r in reasons if r and "shared memory" in r]
    assert over and all(re.fullmatch(r"\d+ bytes of shared memory exceed the limit of 49152 .*", r) for r in over)
    assert int(over[0].split()[0]) > 49152 and None in reasons  # and some points are within it


def test_half_precision_operators_default_to_a_tensor_core_space_on_cuda():
    from tensortune.space import default_space

    half, single = get_workload("gemm_fp16", "M=64,N=64,K=64"), get_workload("gemm", "M=64,N=64,K=64")
    assert default_space(half, TARGET) == "cuda-tensorcore"
    assert default_space(get_workload("batch_matmul_bf16", "B=2,M=64,N=64,K=64"), TARGET) == "cuda-tensorcore"
    assert default_space(get_workload("conv2d_fp16", "N=1,H=8,W=8,CI=16,CO=16,K=3,S=1"), TARGET) == "sketch"
    assert default_space(get_workload("conv2d_bf16", "N=1,H=8,W=8,CI=16,CO=16,K=3,S=1"), TARGET) == "sketch"
    assert default_space(single, TARGET) == "cuda-template"
    assert default_space(half, make_target("cpu", 1)) == "cpu-template"


@pytest.mark.slow
@needs_nvcc
def test_the_fp16_gemm_4096_goes_into_a_batch_as_tensor_core_kernels_and_a_recipe(tmp_path):
    """What `benchmarks/gpu_seed.py prepare` packs for the device: the GEMM's candidates from
    the tensor-core template, built for sm_90, and its checks as a recipe (its arrays would
    be over a gigabyte)."""
    import json

    from tensortune.tuning.batch import export_batch

    export_batch([get_workload("gemm-4096-fp16")], TARGET, tmp_path / "b", count=2)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    (case,) = manifest["cases"].values()
    assert case["recipe"]["specs"] == [[[4096, 4096], "float16"], [[4096, 4096], "float16"]]
    assert case["recipe"]["out_dtype"] == "float32" and case["family"] == "gemm_fp16"
    entries = manifest["candidates"] + manifest["failed"]
    assert len(manifest["candidates"]) == 2 and {e["space"] for e in entries} == {"cuda-tensorcore"}
    assert sum(f.stat().st_size for f in (tmp_path / "b").rglob("*") if f.is_file()) < 4 << 20
