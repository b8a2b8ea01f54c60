"""The CPU knob space: one template that fits any operator with a main (last) block.

The main block's spatial axes are tiled in three levels (S0 outer, S1 middle, S2 register
tile; tiles may also cover the extent padded to a multiple of 8, the overhang guarded)
and its reduction axes in two (R0 blocks, R1 inner), then ordered by the `order` knob.
Around that nest an expert's moves are knobs: operands packed into contiguous tiles
(cache_read computed at a chosen loop), producer stages such as padding inlined or computed
at a chosen loop, a local accumulator (cache_write + reverse_compute_at), the innermost axis
vectorised, loops unrolled, and the outer spatial loops fused and parallelised.
"""
from __future__ import annotations

from tvm import s_tir

from ..points import InvalidPoint, Point
from .knobs import Choice, Split
from ..workloads.fit import padded
from .template import TemplateSpace, analyse

# Loop orders: groups of loops from outermost to innermost. Both keep S2 innermost so the
# last spatial axis can be vectorised; the second blocks the reduction outside the S1 tile
# (the classic K-blocking of GEMM).
ORDERS = {"S0 S1 R0 R1 S2": ("S0", "S1", "R0", "R1", "S2"),
          "S0 R0 S1 R1 S2": ("S0", "R0", "S1", "R1", "S2")}
UNROLL_STEPS = (0, 16, 64, 256)
MAX_VECTOR_TILE = 64  # a larger innermost tile spills the register file


class CpuTemplateSpace(TemplateSpace):
    name = "cpu-template"

    def __init__(self, workload):
        self.nest = analyse(workload.prim_func())
        super().__init__(workload, self._knobs())

    def _knobs(self) -> list:
        nest, levels = self.nest, ("root", 0, 1, 2, 3)
        knobs = [Split(f"tile.{a}", e, 3, MAX_VECTOR_TILE, cover=padded(e)) for a, e in nest.spatial]
        knobs += [Split(f"tile.{a}", e, 2) for a, e in nest.reduce]
        knobs += [Choice("order", tuple(ORDERS)),
                  Choice("parallel", tuple(range(len(nest.spatial) + 1))),
                  Choice("vectorize", (False, True)),
                  Choice("unroll", UNROLL_STEPS),
                  Choice("accumulate", ("inplace", "local"))]
        knobs += [Choice(f"pack.{b}", levels) for b in nest.operands]
        knobs += [Choice(f"stage.{s}", (("inline",) if inlinable else ()) + levels) for s, inlinable in nest.stages]
        return knobs

    def _transform(self, sch: s_tir.Schedule, point: Point) -> None:
        nest = self.nest
        main = sch.get_sblock(nest.main)
        for stage, _ in nest.stages:
            if point[f"stage.{stage}"] == "inline":
                sch.compute_inline(sch.get_sblock(stage))
        groups = self._tile(sch, main, point)
        loops = [loop for g in ORDERS[point["order"]] for loop in groups[g]]
        ends = _group_ends(point["order"], groups)
        for operand in nest.operands:
            self._pack(sch, main, operand, point[f"pack.{operand}"], loops, ends, point)
        for stage, _ in nest.stages:
            where = point[f"stage.{stage}"]
            if where not in ("inline", "root"):
                sch.compute_at(sch.get_sblock(stage), loops[ends[where]], preserve_unit_loops=True)
        if point["accumulate"] == "local":
            self._accumulate_locally(sch, main, point, loops, groups)
        self._parallelise(sch, groups["S0"][: point["parallel"]])
        if point["vectorize"] and point[f"tile.{nest.spatial[-1][0]}"][-1] > 1:
            sch.vectorize(groups["S2"][-1])
        if point["unroll"]:
            outermost = sch.get_loops(main)[0]  # loops[0] may have been fused away
            sch.annotate(outermost, "pragma_auto_unroll_max_step", point["unroll"])
            sch.annotate(outermost, "pragma_unroll_explicit", 1)
        if nest.reduce:  # the init moves out of the hot loop; must follow vectorize
            sch.decompose_reduction(main, groups["R0"][0])

    def _tile(self, sch, main, point) -> dict[str, list]:
        loops = sch.get_loops(main)
        groups: dict[str, list] = {"S0": [], "S1": [], "S2": [], "R0": [], "R1": []}
        axes = [(a, "S") for a, _ in self.nest.spatial] + [(a, "R") for a, _ in self.nest.reduce]
        # te.create_prim_func lays out loops in block-iterator order, spatial first
        for loop, (axis, kind) in zip(loops[-len(axes):], axes):
            for level, part in enumerate(sch.split(loop, list(point[f"tile.{axis}"]))):
                groups[f"{kind}{level}"].append(part)
        sch.reorder(*[loop for g in ORDERS[point["order"]] for loop in groups[g]])
        return groups

    def _pack(self, sch, main, operand, where, loops, ends, point) -> None:
        if where == "root":
            return
        reads = [r.source.name for r in sch.get(main).reads]
        if operand not in reads:
            raise InvalidPoint(f"pack.{operand}: the main block no longer reads {operand} directly")
        block = sch.cache_read(main, reads.index(operand), "global")
        sch.compute_at(block, loops[ends[where]], preserve_unit_loops=True)
        if point["vectorize"]:
            _vectorize_innermost(sch, block)

    def _accumulate_locally(self, sch, main, point, loops, groups) -> None:
        """Accumulate the tile in a small buffer and write it back once it is complete."""
        order = ORDERS[point["order"]]
        outside = [l for g in order[: order.index("R0")] for l in groups[g]]
        block = sch.cache_write(main, 0, "global")
        sch.reverse_compute_at(block, outside[-1], preserve_unit_loops=True)
        if point["vectorize"]:
            _vectorize_innermost(sch, block)

    def _parallelise(self, sch, loops) -> None:
        if loops:
            sch.parallel(sch.fuse(*loops) if len(loops) > 1 else loops[0])


def _group_ends(order: str, groups: dict[str, list]) -> dict[int, int]:
    """Position g (0..3) -> index in the loop list of the last loop of the g-th group."""
    ends, count = {}, 0
    for g, name in enumerate(ORDERS[order]):
        count += len(groups[name])
        ends[g] = count - 1
    return ends


def _vectorize_innermost(sch, block) -> None:
    loops = sch.get_loops(block)
    if loops and sch.get(loops[-1]).extent.value > 1:
        sch.vectorize(loops[-1])
