"""The tensor-core knob space for CUDA: matrix multiplies on float16 or bfloat16 operands,
C[..., i, j] += A[..., i, k] * B[..., k, j], on `wmma` fragments of m x n x k = 16x16x16,
32x8x16 or 8x32x16 (`fragment`).

A block of `warps_m x warps_n` warps computes a (m warps_m frags_m) x (n warps_n frags_n)
tile of C; each warp holds `frags_m x frags_n` accumulator fragments. The reduction advances
`k chunk` at a time: both operand tiles are staged in shared memory by all threads of the
block (`vector`-wide loads, rows padded by `pad` elements so that the fragment loads of
neighbouring rows fall in different banks), then loaded into fragments 16 deep and
multiplied. With `stages` > 1 the staging is software-pipelined that many steps ahead with
asynchronous copies (`cp.async`, sm_80 and later), each stage its own shared buffer. Batch
axes are fused into the block index.

Points are checked before anything is scheduled or compiled: the tile must divide the
operator (fragments are whole), each staged tile must divide among the threads' vector
loads, the pipeline must fit in the reduction, and shared memory, registers and threads
must fit the GPU's limits (named, with the amounts, when they do not). bfloat16 fragments
use intrinsics registered here: TVM registers wmma intrinsics for float16 and int8 only
(`bfloat16_rules` gives MetaSchedule's sketch space the same for bfloat16 convolutions).
"""
from __future__ import annotations

from tvm import s_tir

from ..errors import UserError
from ..points import InvalidPoint, Point
from ..target import GpuLimits
from .base import KnobSpace, first_line
from .cuda_template import limit_exceeded
from .knobs import Choice
from .template import analyse

FRAGMENTS = {"16x16x16": (16, 16, 16), "32x8x16": (32, 8, 16), "8x32x16": (8, 32, 16)}  # wmma's for 16-bit operands
OPERANDS = ("float16", "bfloat16")
WARP = 32
DEFAULT = {"fragment": "16x16x16", "warps_m": 2, "warps_n": 2, "frags_m": 2, "frags_n": 2, "chunk": 2, "stages": 2,
           "pad": 8, "vector": 8}


def unfit(workload) -> str | None:
    """Why the space cannot schedule the workload, or None if it can."""
    nest = analyse(workload.prim_func())
    ins = [dtype for _, dtype in workload.io_specs()[0]]
    if nest.stages or len(nest.reduce) != 1 or len(nest.operands) != 2 or len(ins) != 2:
        return "it is not one matrix multiply of two inputs"
    if any(dtype not in OPERANDS for dtype in ins):
        return f"its operands are {' and '.join(ins)}, not float16 or bfloat16"
    (a_shape, _), (b_shape, _) = workload.io_specs()[0]
    (c_shape, _) = workload.io_specs()[1]
    K = nest.reduce[0][1]
    if a_shape[:-2] != c_shape[:-2] or b_shape[:-2] != c_shape[:-2] or a_shape[-2:] != (c_shape[-2], K) \
            or b_shape[-2:] != (K, c_shape[-1]):
        return "its operands are not laid out as A[..., i, k] and B[..., k, j]"
    return None


class CudaTensorCoreSpace(KnobSpace):
    name = "cuda-tensorcore"
    target_kind = "cuda"

    def __init__(self, workload, limits: GpuLimits | None = None):
        reason = unfit(workload)
        if reason:
            raise UserError(f"the cuda-tensorcore space schedules C[..., i, j] += A[..., i, k] * B[..., k, j] on float16 "
                            f"or bfloat16 operands; {workload.key} does not fit ({reason}): use sketch or cuda-template", option="--space")
        self.workload, self.limits = workload, limits or GpuLimits()
        self.func = workload.prim_func()
        (a_shape, self.in_dtype), _ = workload.io_specs()[0]
        self.out_dtype = workload.io_specs()[1][1]
        self.M, self.K = a_shape[-2:]
        self.N = workload.io_specs()[1][0][-1]
        super().__init__([Choice("fragment", tuple(FRAGMENTS)), Choice("warps_m", (1, 2, 4)), Choice("warps_n", (1, 2, 4)), Choice("frags_m", (1, 2, 4)),
                          Choice("frags_n", (1, 2, 4)), Choice("chunk", (1, 2, 4)), Choice("stages", (1, 2, 3)),
                          Choice("pad", (0, 8)), Choice("vector", (2, 4, 8))])

    def named(self, name: str) -> Point:
        """default: 2x2 warps of 2x2 16x16 fragments (a 64x64 tile), 32 deep, two stages, padded."""
        if name == "default":
            return dict(DEFAULT)
        raise InvalidPoint(f"the cuda-tensorcore space has no named point '{name}' (known: default)")

    def apply(self, point: Point) -> s_tir.Schedule:
        """The schedule, after checking the point against the operator and the GPU (no compile)."""
        self.validate(point)
        reason = self._unfit(point)
        if reason:
            raise InvalidPoint(reason)
        return self.schedule(point)

    def tile(self, point: Point) -> tuple[int, int, int]:
        """The block's tile of C (rows, columns) and the reduction step."""
        m, n, k = FRAGMENTS[point["fragment"]]
        return m * point["warps_m"] * point["frags_m"], n * point["warps_n"] * point["frags_n"], k * point["chunk"]

    def _unfit(self, point: Point) -> str | None:
        rows, cols, depth = self.tile(point)
        for axis, extent, step in (("M", self.M, rows), ("N", self.N, cols), ("K", self.K, depth)):
            if extent % step:
                return f"{axis}={extent} is not a multiple of the tile's {step} (whole {point['fragment']} fragments only)"
        threads = WARP * point["warps_m"] * point["warps_n"]
        for operand, size in (("A", rows * depth), ("B", depth * cols)):
            if size % (threads * point["vector"]):
                return f"the {operand} tile's {size} elements do not divide among {threads} threads x {point['vector']}-wide loads"
        if point["stages"] > self.K // depth:
            return f"{point['stages']} pipeline stages exceed the reduction's {self.K // depth} steps"
        return limit_exceeded(self.limits, self.resources(point), threads)

    def resources(self, point: Point) -> dict:
        """Shared bytes per block (every pipeline stage's operand tiles, padded rows) and
        32-bit registers per thread holding fragments (a warp's fragment spread over its 32
        lanes)."""
        rows, cols, depth = self.tile(point)
        m, n, k = FRAGMENTS[point["fragment"]]
        half = 2  # bytes of a float16 or bfloat16
        shared = point["stages"] * (rows * (depth + point["pad"]) + depth * (cols + point["pad"])) * half
        accumulator = point["frags_m"] * point["frags_n"] * m * n * (4 if self.out_dtype == "float32" else 2)
        operands = (point["frags_m"] * m * k + point["frags_n"] * k * n) * half
        return {"shared_bytes": shared, "local_words": (accumulator + operands) // (WARP * 4)}

    def schedule(self, point: Point) -> s_tir.Schedule:
        sch = s_tir.Schedule(self.func)
        try:
            self._transform(sch, point)
        except Exception as err:  # TVM reports schedule errors as assorted exception types
            raise InvalidPoint(first_line(err)) from None
        return sch

    def _transform(self, sch: s_tir.Schedule, point: Point) -> None:
        shape = m, n, k = FRAGMENTS[point["fragment"]]
        block = sch.get_sblock(analyse(self.func).main)
        *batch, i, j, r = sch.get_loops(block)
        i0, i1, i2, i3 = sch.split(i, [None, point["warps_m"], point["frags_m"], m])
        j0, j1, j2, j3 = sch.split(j, [None, point["warps_n"], point["frags_n"], n])
        k0, k1, k2 = sch.split(r, [None, point["chunk"], k])
        sch.reorder(*batch, i0, j0, i1, j1, k0, k1, i2, j2, i3, j3, k2)
        sch.bind(sch.fuse(*batch, i0, j0), "blockIdx.x")
        warp = sch.fuse(i1, j1)
        sch.bind(warp, "threadIdx.y")
        accumulator = sch.cache_write(block, 0, "wmma.accumulator")
        sch.reverse_compute_at(accumulator, warp)
        for index, fragment in enumerate(("wmma.matrix_a", "wmma.matrix_b")):
            self._stage(sch, block, index, k0, point)
            loaded = sch.cache_read(block, index, fragment)
            sch.compute_at(loaded, k1)
            _tensorize_tile(sch, loaded, (k, n) if index else (m, k),
                            _intrinsic("load", shape, self.in_dtype, "shared.dyn", index == 1, False))
        init = sch.decompose_reduction(block, k0)
        sch.tensorize(sch.get_loops(init)[-2], _intrinsic("fill", shape, self.out_dtype))
        sch.tensorize(i3, _intrinsic("sync", shape, self.in_dtype, self.out_dtype, False))
        _tensorize_tile(sch, accumulator, (m, n), _intrinsic("store", shape, self.out_dtype, "global"))
        if point["stages"] > 1:  # the two staging copies run `stages - 1` steps ahead, asynchronously
            sch.annotate(k0, "software_pipeline_stage", [0, 0, point["stages"] - 1])
            sch.annotate(k0, "software_pipeline_order", [0, 1, 2])
            sch.annotate(k0, "software_pipeline_async_stages", [0])

    def _stage(self, sch, block, index: int, at, point: Point) -> None:
        """Operand `index` staged in shared memory at the reduction step, loaded by all the
        block's threads `vector` elements at a time, its rows padded by `pad` elements."""
        staged = sch.cache_read(block, index, "shared.dyn")
        sch.compute_at(staged, at)
        if point["pad"]:
            sch.storage_align(staged, 0, axis=-2, factor=32, offset=point["pad"])
        loops = sch.get_loops(staged)[-2:]
        _, warp, lane, vector = sch.split(sch.fuse(*loops), [None, point["warps_m"] * point["warps_n"], WARP,
                                                              point["vector"]])
        sch.bind(warp, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        sch.vectorize(vector)


def _tensorize_tile(sch, block, piece: tuple[int, int], intrinsic: str) -> None:
    """The block's last two loops cut into pieces of `piece` (rows, columns), each one call
    of the intrinsic."""
    rows, cols = sch.get_loops(block)[-2:]
    outer_rows, inner_rows = sch.split(rows, [None, piece[0]])
    outer_cols, inner_cols = sch.split(cols, [None, piece[1]])
    sch.reorder(outer_rows, outer_cols, inner_rows, inner_cols)
    sch.tensorize(inner_rows, intrinsic)


def _intrinsic(kind: str, shape: tuple[int, int, int], dtype: str, *args) -> str:
    """The name of TVM's wmma intrinsic of that kind, fragment shape and dtype, registered
    here from TVM's generators on first use (TVM itself registers none for bfloat16, and
    only 16x16x16 ones for float16)."""
    from tvm.s_tir import TensorIntrin

    from ..target import load_intrinsics

    load_intrinsics("cuda")  # TVM's CUDA intrinsics module alone, not every target's
    from tvm.s_tir.tensor_intrin import cuda

    name = "tensortune_wmma_" + "_".join(str(a) for a in (kind, "x".join(map(str, shape)), dtype, *args))
    if TensorIntrin.get(name, allow_missing=True) is None:
        make = {"load": cuda.get_wmma_load_intrin, "sync": cuda.get_wmma_sync_intrin, "fill": cuda.get_wmma_fill_intrin,
                "store": cuda.get_wmma_store_intrin}[kind]
        TensorIntrin.register(name, *make(*shape, dtype, *args))
    return name



def bfloat16_rules() -> list:
    """MetaSchedule's CUDA tensor-core schedule rules with the wmma rule's intrinsic groups
    for bfloat16 operands (float32 accumulation, B plain or transposed), which MetaSchedule
    lacks: with them the sketch space puts bfloat16 convolutions on tensor cores."""
    from tvm.s_tir import meta_schedule as ms

    shape = FRAGMENTS["16x16x16"]  # MetaSchedule's wmma rule tiles by 16x16x16

    def group(trans_b: bool) -> dict:
        return {"init": _intrinsic("fill", shape, "float32"),
                "load_a": _intrinsic("load", shape, "bfloat16", "shared.dyn", False, False),
                "load_b": _intrinsic("load", shape, "bfloat16", "shared.dyn", True, trans_b),
                "compute": _intrinsic("sync", shape, "bfloat16", "float32", trans_b),
                "store": _intrinsic("store", shape, "float32", "shared.dyn")}

    rules = list(ms.ScheduleRule.create("cuda-tensorcore"))
    wmma = next(i for i, rule in enumerate(rules) if isinstance(rule, ms.schedule_rule.MultiLevelTilingTensorCore))
    # the settings of MetaSchedule's own wmma rule (DefaultCUDATensorCore), other groups
    rules[wmma] = ms.schedule_rule.MultiLevelTilingTensorCore(
        intrin_groups=[group(False), group(True)], structure="SSSRRSRS",
        tile_binds=["blockIdx.y", "blockIdx.x", "threadIdx.y"], max_innermost_factor=4,
        vector_load_lens=[1, 2, 3, 4, 8, 16],
        reuse_read=ms.schedule_rule.ReuseType(req="must", levels=[4], scope="shared.dyn"),
        reuse_write=ms.schedule_rule.ReuseType(req="must", levels=[2], scope="shared.dyn"))
    return rules
