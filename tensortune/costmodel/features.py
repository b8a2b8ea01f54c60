"""Features of a scheduled kernel, comparable across tasks: MetaSchedule's per-store features.

TVM's extractor lowers the schedule and describes every buffer store of the result (164
numbers each: the arithmetic by kind, vectorisation, unrolling, parallelism and thread
binding of the loops around it, and for each buffer it touches the access pattern, reuse
distance and bytes per cache line, all on a log scale). They describe the kernel, not the
knobs that made it, so a model trained on some operators' kernels can rank another's, in any
space (template, sketch, a model's extracted kernels). A kernel's vector is the sum and the
maximum of its stores' features, and its number of stores; then the same numbers minus those
of the unscheduled kernel: what the schedule changed. Those move less with the problem's size
than the absolute ones (a larger matmul has larger loop extents and byte counts whatever its
schedule). A model learns from one of FEATURE_SETS; which set transfers best to models and
operators it has not seen is measured by benchmarks/transfer.py.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..points import InvalidPoint, Point

if TYPE_CHECKING:  # the space's type only: strategies and features load no TVM until they schedule
    from ..space import KnobSpace

STORE_FEATURES = 164  # TVM's PerStoreFeature with its default settings (5 buffers per store)
KERNEL = 2 * STORE_FEATURES + 1  # a kernel's sums, maxima and number of stores
LENGTH = 2 * KERNEL  # those, then their difference from the unscheduled kernel's
# the columns a model may learn from (benchmarks/transfer.py compares them held out by model and
# by family; the packaged model uses what did best there)
FEATURE_SETS = {"absolute": (0, KERNEL), "change": (KERNEL, LENGTH), "both": (0, LENGTH)}


def target_kind(space: KnobSpace) -> str:
    """'cuda' or 'llvm': the kind of target a space's schedules are for."""
    return getattr(space, "target_kind", "cuda" if space.name == "cuda-template" else "llvm")


class FeatureExtractor:
    """Feature vectors of a space's points; a point that does not schedule has none."""

    def __init__(self, space: KnobSpace):
        import tvm
        from tvm.s_tir import meta_schedule as ms

        from ..target import load_intrinsics

        load_intrinsics(target_kind(space))  # else the TuneContext below imports every target's (30 s)
        self.space = space
        func = space.workload.prim_func()
        self.extractor = ms.feature_extractor.PerStoreFeature()
        self.context = ms.TuneContext(mod=tvm.IRModule({"main": func}), target=tvm.target.Target({"kind": target_kind(space)}))
        self.args = ms.arg_info.ArgInfo.from_prim_func(func)
        self.unscheduled = self._vectors([tvm.s_tir.Schedule(func)])[0]

    def __call__(self, points: list[Point]) -> list[np.ndarray | None]:
        """One vector (LENGTH numbers) per point; None where the point is invalid."""
        schedules = []
        for point in points:
            try:
                schedules.append(self.space.apply(point))
            except InvalidPoint:
                schedules.append(None)
        vectors = iter(self._vectors([s for s in schedules if s is not None]))
        return [None if s is None else _with_change(next(vectors), self.unscheduled) for s in schedules]

    def _vectors(self, schedules: list) -> list[np.ndarray]:
        from tvm.s_tir import meta_schedule as ms

        stores = self.extractor.extract_from(self.context, [ms.MeasureCandidate(s, self.args) for s in schedules])
        return [kernel_vector(s.numpy()) for s in stores]


def _with_change(vector: np.ndarray, unscheduled: np.ndarray) -> np.ndarray:
    return np.concatenate([vector, vector - unscheduled])


def kernel_vector(stores: np.ndarray) -> np.ndarray:
    """One kernel's sums, maxima and number of stores (KERNEL numbers) from its per-store rows."""
    if len(stores) == 0:
        return np.zeros(KERNEL, dtype=np.float32)
    return np.concatenate([stores.sum(axis=0), stores.max(axis=0), [len(stores)]]).astype(np.float32)
