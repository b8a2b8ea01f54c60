"""A model TVM takes only in part, tuned and built as `tune-model` takes a whole one.

Where TVM's torch frontend does not convert every operator of a model, or a kernel does not
compile (model/partition.py's two reasons), the model is partitioned as the torch.compile
backend partitions a graph: its regions are imported as models of their own (the same kernel
keys as anywhere else), their kernels are tuned with one budget as one model's are (the
scheduler sees them as one model: `as_one`), and the built regions are called from the
partitioned graph (deploy/torch_region.py), the rest running in PyTorch. What it costs to
leave operators in PyTorch is measured, not guessed: the share of eager time outside the
regions.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from ..errors import UserError
from ..target import Target
from ..model.end_to_end import EndToEnd
from ..model.vm import torch_seconds
from ..model.importer import ImportedModel, import_model
from ..model.partition import Partitioned, capture, partition

if TYPE_CHECKING:
    from ..model.build import BuiltModel


@dataclass
class SplitModel:
    """The model, its partitioned graph, and each TVM region imported as a model."""

    name: str
    module: object  # the user's nn.Module
    inputs: tuple  # its example inputs (torch tensors)
    parts: Partitioned
    regions: list[ImportedModel]  # in the order of parts.regions

    def as_one(self) -> ImportedModel:
        """The regions' kernels as one model, for the scheduler: each distinct kernel once (its
        calls summed over the regions), named `region.function`. It has no module of its own
        to build: `build_split` builds the regions."""
        kernels: dict[str, object] = {}
        for region in self.regions:
            for kernel in region.kernels:
                key = kernel.workload.key
                calls = kernel.calls + (kernels[key].calls if key in kernels else 0)
                kernels[key] = replace(kernels.get(key, kernel), calls=calls,
                                       name=kernels[key].name if key in kernels else f"{_short(region)}.{kernel.name}")
        return ImportedModel(self.name, self.module, self.inputs, None, list(kernels.values()), fixed_inputs=True)

    def left_in_torch(self) -> str:
        """The operators left in PyTorch, most frequent first, as one line."""
        counts = sorted(self.parts.in_torch.items(), key=lambda item: -item[1])
        return ", ".join(f"{op.removeprefix('aten.')} x{n}" for op, n in counts) or "none"


def import_split(name: str, module, inputs: tuple, target: Target, why: str) -> SplitModel:
    """The model partitioned (what TVM cannot take left to PyTorch) and each region imported.
    `why`: why the whole model could not be taken, said again if no region is left for TVM."""
    parts = partition(capture(module, inputs), inputs, target)
    if not parts.regions:
        raise UserError(f"{why}; no part of {name} is left for TVM either")
    regions = [import_model(f"{name}.{r.name}", r.module, r.inputs, target, fixed_inputs=True)
               for r in parts.regions]
    return SplitModel(name, module, inputs, parts, regions)


def build_split(split: SplitModel, target, db, tuned: bool = True):
    """The partitioned graph calling each region built by TVM (with the records' best
    schedules, or all at TVM's defaults if not `tuned`), and the regions' builds. The regions
    are set on split.parts.graph itself: a later call replaces them. A tuned region whose build
    was slower than eager when timed is left to PyTorch (`slower_than_eager`; in_torch_line
    names it)."""
    from ..model.build import build_checked, build_model
    from .torch_region import TVMRegion

    builds = [build_model(model, target, db) if tuned else build_checked(model, target, {}, {}, seed=1)
              for model in split.regions]
    for region, built in zip(split.parts.regions, builds):  # one slower than eager stays eager's graph
        setattr(split.parts.graph, region.name,
                region.module if built.slower_than_eager else TVMRegion(built, region.module, target.kind))
    return split.parts.graph, builds


def end_to_end(split: SplitModel, target, db) -> tuple[EndToEnd, float]:
    """torch eager, the split model at TVM's defaults and tuned, timed now on the same inputs;
    and the share of the captured graph's eager time spent outside the regions (what stays in
    PyTorch; the module's own Python, which capture removes, is not counted). Both parts are
    timed on their own (the regions in eager, then the graph with the regions' outputs
    replayed), so noise cannot push the share out of (0, 1) as a difference of two timings
    could. The graph is left calling the tuned regions."""
    graph = split.parts.graph
    regions = sum(torch_seconds(lambda r=r: r.module(*r.inputs), target.threads) for r in split.parts.regions)
    with torch.no_grad():  # the graph with the regions' outputs replayed: only PyTorch's part runs
        for region in split.parts.regions:
            setattr(graph, region.name, _Replayed(region.module(*region.inputs)))
    in_torch = torch_seconds(lambda: graph(*split.inputs), target.threads)
    eager = torch_seconds(lambda: split.module(*split.inputs), target.threads)
    build_split(split, target, db, tuned=False)
    default = torch_seconds(lambda: graph(*split.inputs), target.threads)
    build_split(split, target, db)
    tuned = torch_seconds(lambda: graph(*split.inputs), target.threads)
    return EndToEnd(eager, default, tuned, target.threads, time.time()), in_torch / (in_torch + regions)


def in_torch_line(split: SplitModel, share: float | None, builds: list | None = None) -> str:
    """What runs in PyTorch and what it costs, for the report; `builds` (build_split's) adds
    the regions left there because eager was faster."""
    parts = split.parts
    cost = f"; {share:.0%} of the graph's eager time is spent there" if share is not None else ""
    eager = [f"{r.name} ({b.against_eager()})" for r, b in zip(parts.regions, builds or []) if b.slower_than_eager]
    faster = f"; faster in PyTorch, so run there: {', '.join(eager)}" if eager else ""
    return (f"TVM runs {len(parts.regions) - len(eager)} regions ({parts.share_in_tvm:.0%} of the operators "
            f"converted); left in PyTorch: {split.left_in_torch()}{cost}{faster}")


class _Replayed(torch.nn.Module):
    """Stands in for a region in the partitioned graph: returns the region's outputs, computed
    once, so that timing the graph times only what runs in PyTorch."""

    def __init__(self, outputs):
        super().__init__()
        self.outputs = outputs

    def forward(self, *inputs):
        return self.outputs


def _short(region: ImportedModel) -> str:
    """A region's name without the model's: 'tvm_region_0'."""
    return region.name.rsplit(".", 1)[-1]


def combined(split: SplitModel, builds: list) -> "BuiltModel":
    """The regions' builds as one BuiltModel of `as_one()`'s kernels, for the report: which
    kernels were tuned or fell back, and the largest error of a region against eager. Its
    executable is None: the regions' executables run inside the partitioned graph."""
    from ..model.build import BuiltModel

    one = split.as_one()
    names = {k.workload.key: k.name for k in one.kernels}
    tuned: dict[str, float] = {}
    fell_back: dict[str, str] = {}
    for model, built in zip(split.regions, builds):
        for kernel in model.kernels:
            if kernel.name in built.tuned:
                tuned[names[kernel.workload.key]] = built.tuned[kernel.name]
            if kernel.name in built.fell_back:
                fell_back[names[kernel.workload.key]] = built.fell_back[kernel.name]
    return BuiltModel(one, None, tuned, fell_back, max(b.error for b in builds))
