"""Search spaces behind one interface (base.KnobSpace), by name.

This module is light: a space's own module (and TVM) loads when a space of it is made, so the
command line can list and check space names without loading a compiler.
"""
from __future__ import annotations

from importlib import import_module

from ..errors import UserError
from ..result import BASELINES, Label
from ..target import GpuLimits, Target
from .base import KnobSpace

# the spaces a user picks by name (module:class), and the target kind a template space fits
SPACES = {"cpu-template": "cpu_template:CpuTemplateSpace", "cuda-template": "cuda_template:CudaTemplateSpace",
          "cuda-tensorcore": "cuda_tensor_core:CudaTensorCoreSpace", "sketch": "sketch:SketchSpace"}
KIND = {"cpu-template": "llvm", "cuda-template": "cuda"}  # template spaces fit one kind
TEMPLATES = {kind: name for name, kind in KIND.items()}  # the expert-knob space of each target kind
FITS = KIND | {"cuda-tensorcore": "cuda"}  # the spaces that fit one target kind only
# spaces made by the tool itself: TVM's default schedule (a model kernel's baseline) and
# MetaSchedule's recorded traces (--strategy metaschedule)
INTERNAL = {"default": "default:DefaultSpace", "metaschedule-trace": "sketch:TraceSpace"}


def default_space(workload, target: Target) -> str:
    """The target's template space; on CUDA, for a matrix multiply of float16 or bfloat16
    operands the tensor-core template, and for another operator with such inputs the sketch
    space (MetaSchedule's tensor-core rules, with ours for bfloat16)."""
    if target.kind == "cuda":
        from .cuda_tensor_core import unfit

        if unfit(workload) is None:
            return "cuda-tensorcore"
        if any(dtype in ("float16", "bfloat16") for _, dtype in workload.io_specs()[0]):
            return "sketch"
    return TEMPLATES[target.kind]


def check_fits(name: str, target: Target | None) -> None:
    """A known space that can schedule for the target's kind, or a UserError saying which can."""
    if name not in SPACES:
        raise UserError(f"unknown space '{name}'; known: {', '.join(SPACES)}", option="--space")
    kind = target.kind if target else None
    if kind and FITS.get(name, kind) != kind:
        raise UserError(f"space '{name}' does not fit a {kind} target; for it use {TEMPLATES[kind]} or sketch",
                        option="--space")


def space_class(name: str) -> type[KnobSpace]:
    module, _, cls = (SPACES | INTERNAL)[name].partition(":")
    return getattr(import_module(f".{module}", __name__), cls)


def make_space(name: str, workload, target: Target | None = None) -> KnobSpace:
    """`target` is needed by target-derived spaces ('sketch', 'default', and the CUDA
    templates for the GPU's limits)."""
    if name == "default":
        return space_class(name)(workload, target)
    if name == "metaschedule-trace":
        return space_class(name)(space_class("sketch")(workload, target))
    check_fits(name, target)
    if name == "sketch":
        return space_class(name)(workload, target)
    if name in ("cuda-template", "cuda-tensorcore"):  # the GPU's limits
        return space_class(name)(workload, GpuLimits.from_target(target.spec) if target else GpuLimits())
    return space_class(name)(workload)


def stored_space(space: str, label: Label, target: Target) -> str:
    """The space of a stored record's point, for a task in `space`: naive and hand records
    hold points of the target's template space, whatever the task's (see tuning/tuner.finish)."""
    return TEMPLATES[target.kind] if label in BASELINES else space


__all__ = ["INTERNAL", "KIND", "SPACES", "TEMPLATES", "KnobSpace", "check_fits", "make_space", "space_class",
           "stored_space"]
