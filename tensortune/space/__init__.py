"""Search spaces behind one interface (see base.KnobSpace)."""
from ..errors import UserError
from .base import InvalidPoint, KnobSpace, Point, point_from_json, point_key
from .cpu_template import CpuTemplateSpace

SPACES = {CpuTemplateSpace.name: CpuTemplateSpace}


def make_space(name: str, workload) -> KnobSpace:
    if name not in SPACES:
        raise UserError(f"unknown space '{name}'; known: {', '.join(SPACES)}")
    return SPACES[name](workload)


__all__ = ["SPACES", "CpuTemplateSpace", "InvalidPoint", "KnobSpace", "Point", "make_space",
           "point_from_json", "point_key"]
