"""What the template knob spaces (CPU and CUDA) share: the analysis of the operator's loop
nest, and the named points `naive` and `hand`.

Both templates schedule any operator around its main (last) block; producer blocks (padding,
the depthwise result of a separable conv) are stages that can be inlined or placed.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tvm import s_tir
from tvm.tirx import IterVar

from ..points import InvalidPoint, Point
from .base import KnobSpace, first_line
from .knobs import Split


@dataclass(frozen=True)
class Nest:
    """What the template needs to know about the unscheduled function."""

    main: str
    spatial: tuple[tuple[str, int], ...]
    reduce: tuple[tuple[str, int], ...]
    operands: tuple[str, ...]  # function inputs the main block reads directly: packable
    stages: tuple[tuple[str, bool], ...]  # producer blocks (name, can be inlined), consumers first


def analyse(func) -> Nest:
    sch = s_tir.Schedule(func)
    blocks = [sch.get(b) for b in sch.get_child_blocks(sch.get_sblock("root"))]
    main = blocks[-1]
    axes = [(iv.var.name.removeprefix("v_"), int(iv.dom.extent), int(iv.iter_type)) for iv in main.iter_vars]
    params = {p.name for p in func.params}
    operands = tuple(dict.fromkeys(r.source.name for r in main.reads if r.source.name in params))
    stages = tuple((b.name_hint, all(int(iv.iter_type) == IterVar.DataPar for iv in b.iter_vars))
                   for b in reversed(blocks[:-1]))
    return Nest(main.name_hint,
                tuple((n, e) for n, e, t in axes if t == IterVar.DataPar),
                tuple((n, e) for n, e, t in axes if t == IterVar.CommReduce),
                operands, stages)


class TemplateSpace(KnobSpace):
    """A knob space around a workload's main block; subclasses give the knobs."""

    def __init__(self, workload, knobs: list):
        self.workload = workload
        self.func = workload.prim_func()
        super().__init__(knobs)

    def schedule(self, point: Point) -> s_tir.Schedule:
        sch = s_tir.Schedule(self.func)
        try:
            if point == self._naive_point:
                self._naive(sch)
            else:
                self._transform(sch, point)
        except InvalidPoint:
            raise
        except Exception as err:  # TVM reports schedule errors as assorted exception types
            raise InvalidPoint(first_line(err)) from None
        return sch

    def _naive(self, sch: s_tir.Schedule) -> None:
        """The unscheduled loop nest, plus whatever the target needs to run it at all."""

    def _transform(self, sch: s_tir.Schedule, point: Point) -> None:
        raise NotImplementedError

    @cached_property
    def _naive_point(self) -> Point:
        """Every split trivial, every choice its first option, every stage at the root: made
        once, since every schedule compares against it."""
        point = {k.name: k.trivial() if isinstance(k, Split) else k.options[0] for k in self.knobs}
        return point | {f"stage.{s}": "root" for s, _ in self.nest.stages}

    def named(self, name: str) -> Point:
        """naive (see `_naive_point`); hand: the expert's knob values over naive."""
        if name == "naive":
            return dict(self._naive_point)
        if name == "hand":
            recipe = self.workload.family.hand.get(self.name)
            if recipe is None:
                raise InvalidPoint(f"workload {self.workload.name} has no hand schedule for {self.name}")
            point = self.named("naive") | recipe(**self.workload.kwargs)
            reason = self.check(point)
            if reason:
                raise InvalidPoint(f"hand schedule of {self.workload.key} is invalid in {self.name}: {reason}")
            return point
        raise InvalidPoint(f"unknown named point '{name}' (known: naive, hand)")
