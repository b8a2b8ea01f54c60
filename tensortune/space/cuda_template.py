"""The CUDA knob space: one template for any operator with a main (last) block, as on CPU.

Each spatial axis of the main block is split in three: blocks (all axes fused and bound to
blockIdx.x), threads (fused, threadIdx.x) and a per-thread tile (serial, innermost); each
reduction axis in two: an outer loop, at which operands can be staged, and an inner one.
Every buffer the main block reads can be cached in shared memory (loaded by all threads of
the block together, `vector` elements at a time) or in each thread's registers ("local"),
computed at the outer (R0) or inner (R1) reduction loop; the output tile can be accumulated
in registers and written back `vector` wide. Shared memory pays only when threads really
share values: which scope wins is exactly what the search decides.

Points are checked statically before any compile: threads per block, shared memory per
block and registers per thread (local buffers) against the GPU's limits.
"""
from __future__ import annotations

import math

from tvm import s_tir

from ..points import InvalidPoint, Point
from ..target import GpuLimits
from .knobs import Choice, Split
from ..workloads.fit import padded
from .template import TemplateSpace, analyse

CACHE_SCOPES = ("none", "shared", "local")
UNROLL_STEPS = (0, 16, 64, 512)
VECTOR_WIDTHS = (1, 2, 4)
MAX_THREAD_TILE = 16  # outputs per thread along one axis: more spills registers
NAIVE_THREADS = 256


class CudaTemplateSpace(TemplateSpace):
    name = "cuda-template"

    def __init__(self, workload, limits: GpuLimits | None = None):
        self.limits = limits or GpuLimits()
        func = workload.prim_func()
        self.nest = analyse(func)
        sch = s_tir.Schedule(func)
        self.reads = tuple(r.source.name for r in sch.get(sch.get_sblock(self.nest.main)).reads)
        super().__init__(workload, self._knobs())

    def _knobs(self) -> list:
        nest = self.nest
        knobs = [Split(f"tile.{a}", padded(e), 3, MAX_THREAD_TILE) for a, e in nest.spatial]
        knobs += [Split(f"tile.{a}", e, 2) for a, e in nest.reduce]
        knobs += [Choice(f"cache.{b}", CACHE_SCOPES) for b in self.reads]
        knobs += [Choice("cache_at", ("R0", "R1")),
                  Choice("accumulate", ("global", "local")),
                  Choice("unroll", UNROLL_STEPS),
                  Choice("vector", VECTOR_WIDTHS)]
        knobs += [Choice(f"stage.{s}", ("inline", "root") if inlinable else ("root",)) for s, inlinable in nest.stages]
        return knobs

    def canonical(self, point: Point) -> Point:
        """Where nothing is cached, the cache level plays no part."""
        if all(point[f"cache.{b}"] == "none" for b in self.reads):
            return point | {"cache_at": "R0"}
        return point

    def threads(self, point: Point) -> int:
        """Threads per block: the product of the thread tiles."""
        return math.prod(point[f"tile.{a}"][1] for a, _ in self.nest.spatial)

    def apply(self, point: Point) -> s_tir.Schedule:
        """The schedule, after checking the point against the GPU's limits (no compile)."""
        self.validate(point)
        threads = self.threads(point)
        if threads > self.limits.max_threads_per_block:  # refused without scheduling it
            raise InvalidPoint(limit_exceeded(self.limits, {"shared_bytes": 0, "local_words": 0}, threads))
        sch = self.schedule(point)
        reason = limit_exceeded(self.limits, resources(sch), threads)
        if reason:
            raise InvalidPoint(reason)
        return sch

    def _naive(self, sch: s_tir.Schedule) -> None:
        for block in sch.get_child_blocks(sch.get_sblock("root")):
            _bind_flat(sch, block)

    def _transform(self, sch: s_tir.Schedule, point: Point) -> None:
        nest = self.nest
        for stage, _ in nest.stages:
            if point[f"stage.{stage}"] == "inline":
                sch.compute_inline(sch.get_sblock(stage))
        main = sch.get_sblock(nest.main)
        reads = [r.source.name for r in sch.get(main).reads]
        levels = self._tile(sch, main, point)
        tx = levels["T"][0]
        threads = self.threads(point)
        if point["accumulate"] == "local":
            write_back = sch.cache_write(main, 0, "local")
            sch.reverse_compute_at(write_back, tx, preserve_unit_loops=True)
            _vectorize_tail(sch, write_back, point["vector"])
        at = (levels[point["cache_at"]] or levels["R0"] or [tx])[-1]
        for index, name in enumerate(self.reads):
            scope = point[f"cache.{name}"]
            if scope != "none":
                self._cache(sch, main, reads, index, scope, at, threads, point["vector"])
        if point["unroll"]:
            sch.annotate(tx, "pragma_auto_unroll_max_step", point["unroll"])
            sch.annotate(tx, "pragma_unroll_explicit", 1)
        if nest.reduce:
            sch.decompose_reduction(main, levels["R0"][0])
        for stage, _ in nest.stages:
            if point[f"stage.{stage}"] == "root":
                _bind_flat(sch, sch.get_sblock(stage))

    def _tile(self, sch, main, point: Point) -> dict[str, list]:
        """Split, order B T R0 R1 I, fuse and bind: the loops of each level (B and T fused)."""
        nest = self.nest
        axes = [a for a, _ in nest.spatial] + [a for a, _ in nest.reduce]
        levels: dict[str, list] = {"B": [], "T": [], "I": [], "R0": [], "R1": []}
        for loop, axis in zip(sch.get_loops(main)[-len(axes):], axes):
            factors = point[f"tile.{axis}"]
            if axis in dict(nest.spatial):  # the block count follows: tiles may overhang
                parts = zip("BTI", sch.split(loop, [None, *factors[1:]]))
            else:
                parts = zip(("R0", "R1"), sch.split(loop, list(factors)))
            for level, part in parts:
                levels[level].append(part)
        sch.reorder(*levels["B"], *levels["T"], *levels["R0"], *levels["R1"], *levels["I"])
        levels["B"], levels["T"] = [sch.fuse(*levels["B"])], [sch.fuse(*levels["T"])]
        sch.bind(levels["B"][0], "blockIdx.x")
        sch.bind(levels["T"][0], "threadIdx.x")
        return levels

    def _cache(self, sch, main, reads, index, scope, at, threads, vector) -> None:
        """The main block's `index`-th read staged in `scope`, computed at loop `at`."""
        if len(reads) != len(self.reads):
            raise InvalidPoint("caching needs the main block's reads unchanged by inlining")
        block = sch.cache_read(main, index, scope)
        sch.compute_at(block, at, preserve_unit_loops=True)
        if scope == "local":
            _vectorize_tail(sch, block, vector)
        else:  # shared: a cooperative load by all threads of the block, vector-wide
            outer = [sch.get(l) for l in sch.get_loops(main)]
            depth = next(i for i, l in enumerate(outer) if l.same_as(sch.get(at))) + 1
            inner = sch.get_loops(block)[depth:]
            if not inner:
                return
            fused = sch.fuse(*inner)
            _, t, v = sch.split(fused, [None, threads, vector])
            sch.bind(t, "threadIdx.x")
            if vector > 1:
                sch.vectorize(v)


def limit_exceeded(lim: GpuLimits, usage: dict, threads: int) -> str | None:
    """The GPU limit a kernel with these `resources` and threads per block exceeds, named
    with the amounts; None if it fits."""
    if threads > lim.max_threads_per_block:
        return f"{threads} threads per block exceed the limit of {lim.max_threads_per_block}"
    if usage["shared_bytes"] > lim.max_shared_memory_per_block:
        return f"{usage['shared_bytes']} bytes of shared memory exceed the limit of {lim.max_shared_memory_per_block}"
    registers = usage["local_words"] + 16  # addresses, indices and loop counters
    if registers > lim.max_registers_per_thread:
        return f"about {registers} registers per thread exceed the limit of {lim.max_registers_per_thread}"
    if registers * threads > lim.registers_per_block:
        return f"about {registers} registers x {threads} threads exceed the block's {lim.registers_per_block}"
    return None


def _bind_flat(sch, block) -> None:
    """One output element per thread: the block's spatial loops fused, NAIVE_THREADS a block."""
    spatial = [l for l, iv in zip(sch.get_loops(block), sch.get(block).iter_vars) if int(iv.iter_type) == 0]
    fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    bx, tx = sch.split(fused, [None, NAIVE_THREADS])
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")


def _vectorize_tail(sch, block, vector: int) -> None:
    """The block's innermost loop split `vector` wide and vectorised, where its extent allows."""
    loop = sch.get_loops(block)[-1]
    extent = sch.get(loop).extent
    if vector > 1 and hasattr(extent, "value") and extent.value % vector == 0:
        sch.vectorize(sch.split(loop, [None, vector])[1])


def resources(sch) -> dict:
    """Per block: shared bytes; per thread: 32-bit words of local buffers. Read from the
    buffers after compaction (what the kernel will allocate), without compiling."""
    from tvm.s_tir import transform as T
    import tvm

    mod = tvm.transform.Sequential([T.LowerInitBlock(), T.PlanAndUpdateBufferAllocationLocation(),
                                    T.ConvertBlocksToOpaque(), T.CompactBufferAllocation()])(sch.mod)
    usage = {"shared_bytes": 0, "local_words": 0}
    for buf in _allocations(mod["main"].body):
        size = math.prod(int(d) for d in buf.shape) * max(1, buf.dtype.bits // 8)
        if buf.scope().startswith("shared"):
            usage["shared_bytes"] += size
        elif buf.scope() == "local":
            usage["local_words"] += -(-size // 4)
    return usage


def threads_per_block(stmt) -> int:
    """The product of the threadIdx extents of a statement tree (the widest of each axis)."""
    extents: dict[str, int] = {}
    for node in _nodes(stmt):
        binding = getattr(node, "thread_binding", None)
        if binding is not None and binding.thread_tag.startswith("threadIdx") and hasattr(node.extent, "value"):
            extents[binding.thread_tag] = max(extents.get(binding.thread_tag, 1), int(node.extent))
    return math.prod(extents.values())


def _allocations(stmt):
    """Buffers allocated anywhere in a statement tree."""
    for node in _nodes(stmt):
        yield from getattr(node, "alloc_buffers", ())


def _nodes(stmt):
    """Every block and statement of a tree (TVM 0.27 has no Python TIR visitor)."""
    if stmt is None:
        return
    yield stmt
    for field in ("block", "body", "then_case", "else_case", "init"):
        yield from _nodes(getattr(stmt, field, None))
    for child in getattr(stmt, "seq", ()):
        yield from _nodes(child)
