"""Search spaces behind one interface (see base.KnobSpace)."""
from ..errors import UserError
from .base import InvalidPoint, KnobSpace, Point, point_from_json, point_key
from .cpu_template import CpuTemplateSpace
from .cuda_template import CudaTemplateSpace, GpuLimits
from .default import DefaultSpace
from .sketch import SketchSpace, TraceSpace

SPACES = {CpuTemplateSpace.name: CpuTemplateSpace, CudaTemplateSpace.name: CudaTemplateSpace,
          SketchSpace.name: SketchSpace}
KIND = {CpuTemplateSpace.name: "llvm", CudaTemplateSpace.name: "cuda"}  # template spaces fit one kind
TEMPLATES = {kind: name for name, kind in KIND.items()}  # the expert-knob space of each target kind


def check_fits(name: str, target_spec: dict | None) -> None:
    """A known space that can schedule for the target's kind, or a UserError saying which can."""
    if name not in SPACES:
        raise UserError(f"unknown space '{name}'; known: {', '.join(SPACES)}")
    kind = (target_spec or {}).get("kind")
    if kind and KIND.get(name, kind) != kind:
        raise UserError(f"space '{name}' does not fit a {kind} target; for it use {TEMPLATES[kind]} or sketch")


def make_space(name: str, workload, target_spec: dict | None = None) -> KnobSpace:
    """`target_spec` (TVM's dict form) is needed by target-derived spaces ('sketch', and
    'cuda-template' for the GPU's limits)."""
    if name == DefaultSpace.name:  # TVM's own schedule: a model kernel's baseline
        return DefaultSpace(workload, target_spec)
    if name == TraceSpace.name:  # MetaSchedule's own records (--strategy metaschedule)
        return TraceSpace(SketchSpace(workload, target_spec))
    check_fits(name, target_spec)
    if name == SketchSpace.name:
        return SketchSpace(workload, target_spec)
    if name == CudaTemplateSpace.name:
        return CudaTemplateSpace(workload, GpuLimits.from_target(target_spec) if target_spec else GpuLimits())
    return SPACES[name](workload)


def stored_space(space: str, label: str, target_spec: dict) -> str:
    """The space of a stored record's point, for a task in `space`: naive and hand records
    hold points of the target's template space, whatever the task's (see tuner._retime)."""
    return TEMPLATES[target_spec["kind"]] if label in ("naive", "hand") else space


__all__ = ["SPACES", "TEMPLATES", "check_fits", "CpuTemplateSpace", "CudaTemplateSpace", "DefaultSpace", "GpuLimits", "SketchSpace", "InvalidPoint", "KnobSpace", "Point", "make_space", "stored_space", "TraceSpace",
           "point_from_json", "point_key"]
