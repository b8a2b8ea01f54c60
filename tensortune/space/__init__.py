"""Search spaces behind one interface (see base.KnobSpace)."""
from ..errors import UserError
from .base import InvalidPoint, KnobSpace, Point, point_from_json, point_key
from .cpu_template import CpuTemplateSpace
from .sketch import SketchSpace

SPACES = {CpuTemplateSpace.name: CpuTemplateSpace, SketchSpace.name: SketchSpace}


def make_space(name: str, workload, target_spec: dict | None = None) -> KnobSpace:
    """`target_spec` (TVM's dict form) is needed by target-derived spaces such as 'sketch'."""
    if name not in SPACES:
        raise UserError(f"unknown space '{name}'; known: {', '.join(SPACES)}")
    if name == SketchSpace.name:
        return SketchSpace(workload, target_spec)
    return SPACES[name](workload)


__all__ = ["SPACES", "CpuTemplateSpace", "SketchSpace", "InvalidPoint", "KnobSpace", "Point", "make_space",
           "point_from_json", "point_key"]
