"""MetaSchedule's design space, for any operator and target, behind our space interface.

TVM's default schedule rules turn any TensorIR function into a few "sketches" (schedule
traces with sampling instructions). A point is the sketch choice plus a value for every
sampling instruction: perfect-tile splits, categorical choices (unroll depth and the like),
compute locations, sampled as MetaSchedule samples them (knobs.PerfectTile; uniform choices). Applying a point replays the sketch's trace with those decisions on the
original module, then runs MetaSchedule's postprocessors; a point they reject is invalid,
with the postprocessor named as the reason. Only the chosen sketch's knobs matter, so the
others are held at their defaults (`canonical`), which keeps equal schedules equal points.

Setting up costs a few seconds once per process (MetaSchedule's tensor intrinsics for the
target, see target.load_intrinsics), so this space lives in the tuner process; build workers
receive modules.
"""
from __future__ import annotations

import math
import os
import sys
import tempfile
from contextlib import contextmanager

from ..points import InvalidPoint, Point
from ..target import Target
from .base import KnobSpace, first_line
from .knobs import Choice, PerfectTile

DECISIONS = ("SamplePerfectTile", "SampleCategorical", "SampleComputeLocation")
# Design spaces drawn to learn how many compute locations each stage can take. Which ones are
# valid depends on the tile sizes (MetaSchedule samples among those valid for the point's own),
# so a location knob offers every index from -2 (inline) to the largest seen, and a point whose
# index is not valid for its tiles is invalid. (Offering only the indices seen, as before,
# left out up to two thirds of MetaSchedule's, inlining among them.)
LOCATION_SAMPLES = 16
# How often a mutation picks each kind of decision, after MetaSchedule's CPU mutators (tile size
# 0.9, compute location 0.05, unroll 0.03): tiles matter most, and a mutation never switches
# the sketch (a new sketch comes from sampling or crossover, as in MetaSchedule's population).
MUTATION_WEIGHTS = {"PerfectTile": 0.9, "ComputeLocation": 0.05, "Categorical": 0.05}
# the tensor-core rule says so for every bfloat16 block of every design space drawn (16 to
# 32 lines per space): said once in docs/using.md instead
BFLOAT16_ALIGN_WARNING = "StorageAlign is not applied for data type bfloat16"


def _context(workload, target: Target, seed: int):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from ..target import load_intrinsics

    load_intrinsics(target.kind)
    func = _without_schedule_rules(workload.prim_func())
    generator = ms.space_generator.PostOrderApply()
    if target.kind == "cuda" and any(dtype == "bfloat16" for _, dtype in workload.io_specs()[0]):
        from .cuda_tensor_core import bfloat16_rules

        generator = ms.space_generator.PostOrderApply(sch_rules=bfloat16_rules(), postprocs="cuda-tensorcore",
                                                      mutator_probs="cuda-tensorcore")
    return ms.TuneContext(mod=tvm.IRModule({"main": func}), target=tvm.target.Target(target.spec),
                          space_generator=generator, task_name=workload.key, rand_state=seed)


@contextmanager
def _dropping(warning: str):
    """Standard error (TVM's C++ log included) without the lines holding `warning`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile("w+") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            sys.stderr.write("".join(line for line in caught if warning not in line))


def _without_schedule_rules(func):
    """The function without its blocks' "schedule_rule" annotations. TVM's pooling kernels
    carry "meta_schedule.pool_max", a rule MetaSchedule has for no CPU: it warns on every
    design space drawn and applies its default rules, as it does without the annotation."""
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    blocks = list(sch.get_child_blocks(sch.get_sblock("root")))
    while blocks:
        block = blocks.pop()
        if "schedule_rule" in sch.get(block).annotations:
            sch.unannotate(block, "schedule_rule")
        blocks += sch.get_child_blocks(block)
    return sch.mod["main"]


def _decisions(trace) -> list:
    return [inst for inst in trace.insts if inst.kind.name in DECISIONS]


class SketchSpace(KnobSpace):
    name = "sketch"

    def __init__(self, workload, target: Target):
        self.workload, self.target_kind, self.target = workload, target.kind, target
        ctx = _context(workload, target, seed=1)
        self.mod, self.postprocs = ctx.mod, list(ctx.space_generator.postprocs)
        with _dropping(BFLOAT16_ALIGN_WARNING):
            self.traces = [s.trace for s in ctx.generate_design_space()]
            variants = [[s.trace for s in _context(workload, target, seed).generate_design_space()]
                        for seed in range(2, LOCATION_SAMPLES + 1)]
        if not self.traces:
            raise InvalidPoint(f"MetaSchedule generated no design space for {workload.key}")
        knobs: list = [Choice("sketch", tuple(range(len(self.traces))))]
        self.slots: list[tuple[int, object, str]] = []  # (sketch, instruction, knob name)
        self.defaults: dict = {}
        for s, trace in enumerate(self.traces):
            for d, inst in enumerate(_decisions(trace)):
                name = f"s{s}.{d}.{inst.kind.name.removeprefix('Sample')}"
                observed = [trace.get_decision(inst)] + [v.get_decision(i) for v, i in _matching(variants, s, d)]
                knobs.append(_knob(name, inst, observed))
                self.defaults[name] = _plain(trace.get_decision(inst))
                self.slots.append((s, inst, name))
        super().__init__(knobs)

    def canonical(self, point: Point) -> Point:
        return {k: (v if k == "sketch" or k.startswith(f"s{point['sketch']}.") else self.defaults[k])
                for k, v in point.items()}

    def mutable(self, point: Point, rng, steps: int) -> list:
        """`steps` decisions of the point's own sketch (the others play no part), tiles
        mostly (MUTATION_WEIGHTS)."""
        active = [k for k in self.knobs if k.name.startswith(f"s{point['sketch']}.")]
        if not active:
            return []
        kinds = [k.name.rsplit(".", 1)[1] for k in active]
        weights = [MUTATION_WEIGHTS[kind] / kinds.count(kind) for kind in kinds]  # a kind's share, split among its decisions
        return rng.choices(active, weights, k=steps)

    def named(self, name: str) -> Point:
        if name == "default":  # the design space's own first sample
            return {"sketch": 0} | self.defaults
        raise InvalidPoint(f"the sketch space has no named point '{name}' (known: default)")

    def schedule(self, point: Point):
        from tvm import s_tir
        from tvm.s_tir.schedule import Trace

        sketch = point["sketch"]
        trace = self.traces[sketch]
        decisions = {inst: list(point[name]) if isinstance(point[name], tuple) else point[name]
                     for s, inst, name in self.slots if s == sketch}
        sch = s_tir.Schedule(self.mod, seed=1)
        try:
            Trace(trace.insts, decisions).apply_to_schedule(sch, remove_postproc=True)
        except Exception as err:  # TVM reports schedule errors as assorted exception types
            raise InvalidPoint(first_line(err)) from None
        return self.finish(sch)

    def finish(self, sch):
        """MetaSchedule's postprocessors (parallel/vectorise/unroll annotations made real,
        reduction init split off, ...); a False from one means the schedule is invalid."""
        sch.enter_postproc()
        for postproc in self.postprocs:
            try:
                ok = postproc.apply(sch)
            except Exception as err:
                raise InvalidPoint(first_line(err)) from None
            if not ok:
                why = self._limit_exceeded(sch) if type(postproc).__name__ == "VerifyGPUCode" else None
                raise InvalidPoint(why or f"MetaSchedule postprocessor {type(postproc).__name__} rejected the point")
        return sch

    def _limit_exceeded(self, sch) -> str | None:
        """Which of the GPU's limits a schedule that VerifyGPUCode rejected exceeds (it says
        only no), from its shared buffers and thread extents."""
        from ..target import GpuLimits
        from .cuda_template import limit_exceeded, resources, threads_per_block

        why = limit_exceeded(GpuLimits.from_target(self.target.spec), resources(sch), threads_per_block(sch.mod["main"].body))
        return why and f"{why} (MetaSchedule's VerifyGPUCode)"


def _matching(variants, sketch: int, index: int):
    """(trace, instruction) pairs for the same decision in other samples of the design space."""
    for v in variants:
        if len(v) > sketch:
            insts = _decisions(v[sketch])
            if len(insts) > index:
                yield v[sketch], insts[index]


def _knob(name: str, inst, observed: list):
    kind = inst.kind.name
    if kind == "SamplePerfectTile":
        parts, max_inner = int(inst.attrs[0]), int(inst.attrs[1])
        return PerfectTile(name, math.prod(int(x) for x in observed[0]), parts, max_inner if max_inner > 0 else 1 << 30)
    if kind == "SampleCategorical":
        return Choice(name, tuple(range(len(inst.attrs[0]))))
    return Choice(name, tuple(range(-2, max(int(x) for x in observed) + 1)))  # -2: inlined, -1: at the root


def _plain(decision):
    return tuple(int(x) for x in decision) if not isinstance(decision, int) else decision


class TraceSpace(KnobSpace):
    """Points that are whole MetaSchedule traces ({"trace": JSON text}), for re-measuring
    the records of MetaSchedule's own tuner; nothing to sample."""

    name = "metaschedule-trace"

    def __init__(self, sketches: SketchSpace):
        self.workload, self.sketches = sketches.workload, sketches
        super().__init__([])

    def sample(self, rng, checked: bool = True) -> Point:
        raise InvalidPoint("the trace space has nothing to sample: its points are MetaSchedule's records")

    def validate(self, point: Point) -> None:
        if set(point) != {"trace"} or not isinstance(point["trace"], str):
            raise InvalidPoint('a trace point is {"trace": "<trace JSON>"}')

    def schedule(self, point: Point):
        import json

        from tvm import s_tir
        from tvm.s_tir.schedule import Trace

        sch = s_tir.Schedule(self.sketches.mod, seed=1)
        try:
            Trace.apply_json_to_schedule(json.loads(point["trace"]), sch)
        except Exception as err:
            raise InvalidPoint(first_line(err)) from None
        return self.sketches.finish(sch)
