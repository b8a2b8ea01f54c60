"""TVM's own schedule of a kernel: the baseline every kernel of a model is measured against,
and what a kernel never tuned keeps in the built model.

On a CPU that is the unscheduled function (LLVM vectorises what it can, nothing runs in
parallel); on a GPU, where an unscheduled function cannot even build, it is DLight's default
rules, as TVM's own CUDA pipeline applies them. The space has one point, `{}`.
"""
from __future__ import annotations

from ..points import InvalidPoint, Point
from ..target import Target
from .base import KnobSpace, first_line


class DefaultSpace(KnobSpace):
    """A kernel's default schedule on a target, as a space of one point (`{}`), so that it is
    measured and stored like any candidate."""

    name = "default"

    def __init__(self, workload, target: Target):
        self.workload, self.target = workload, target
        super().__init__([])

    def named(self, name: str) -> Point:
        if name != "default":
            raise InvalidPoint(f"the default space has one point, 'default', not '{name}'")
        return {}

    def schedule(self, point: Point):
        import tvm
        from tvm import s_tir

        mod = tvm.IRModule({"main": self.workload.prim_func()})
        if self.target.kind == "cuda":
            from tvm.s_tir import dlight as dl

            rules = dl.ApplyDefaultSchedule(dl.gpu.Matmul(), dl.gpu.GEMV(), dl.gpu.Reduction(),
                                            dl.gpu.GeneralReduction(), dl.gpu.Fallback())
            try:
                with tvm.target.Target(self.target.spec):
                    mod = rules(mod)
            except Exception as err:  # TVM reports schedule errors as assorted exception types
                raise InvalidPoint(f"DLight cannot schedule {self.workload.key}: {first_line(err)}") from None
        return s_tir.Schedule(mod)
