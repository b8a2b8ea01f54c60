"""Schedules written outside tensortune (by an agent): a MetaSchedule trace as JSON, or Python
code defining `schedule(sch)` that applies TensorIR schedule primitives to `sch`.

The text is untrusted input. It is applied in a worker process under a time limit (a
`WorkerPool`, like the builders), never in the calling process, and only the scheduled module
(TVM JSON) comes back; then it is built, verified and timed like any candidate. A point is
the text itself, `{"form": "trace" | "function", "text": ...}`, so a schedule is stored and
de-duplicated like a knob point; what fails to apply is an invalid point with the reason.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from ..points import InvalidPoint, Point
from ..space.base import KnobSpace

FORMS = ("trace", "function")
APPLY_TIMEOUT_S = 30.0  # an agent's function that loops forever costs this, then its worker


@dataclass(frozen=True)
class ApplyTask:
    """What the worker gets: the workload (rebuilt there) and the schedule's text."""

    workload: tuple
    form: str
    text: str


def apply_text(task: ApplyTask) -> str:
    """In a worker: the unscheduled function with the schedule applied, as TVM JSON. Raises
    (the pool sends the message back) when the text does not apply."""
    import tvm
    from tvm import s_tir, te, tirx
    from tvm.s_tir.schedule import Trace

    from ..workloads.ident import resolve

    sch = s_tir.Schedule(tvm.IRModule({"main": resolve(task.workload).prim_func()}))
    if task.form == "trace":
        Trace.apply_json_to_schedule(json.loads(task.text), sch)
    else:
        namespace = {"tvm": tvm, "te": te, "tirx": tirx, "tir": tirx, "s_tir": s_tir}  # tir: its older name
        exec(compile(task.text, "<agent schedule>", "exec"), namespace)  # noqa: S102: in a worker, by design
        if not callable(namespace.get("schedule")):
            raise ValueError("the code defines no function schedule(sch)")
        namespace["schedule"](sch)
    return tvm.ir.save_json(sch.mod)


def trace_json(sch, remove_postproc: bool = False) -> str:
    """A schedule's trace as the JSON text `form="trace"` takes, as MetaSchedule's record
    files hold it (TVM's as_json holds TVM integers and strings that json cannot write)."""
    return json.dumps(_plain(sch.trace.as_json(remove_postproc=remove_postproc)))


def _plain(value):
    kind = type(value).__name__
    if kind in ("IntImm", "FloatImm"):
        return value.value
    if isinstance(value, (list, tuple)) or kind in ("Array", "List"):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


class CodeSpace(KnobSpace):
    """Every schedule an agent can write for one workload; no knobs, nothing to sample."""

    name = "code"

    def __init__(self, workload, timeout_s: float = APPLY_TIMEOUT_S):
        super().__init__([])
        self.workload, self.timeout_s = workload, timeout_s
        self._pool = None  # started on the first schedule: a forkserver worker costs a TVM import

    def validate(self, point: Point) -> None:
        if set(point) != {"form", "text"} or point["form"] not in FORMS or not isinstance(point["text"], str):
            raise InvalidPoint(f"a schedule is {{'form': one of {list(FORMS)}, 'text': str}}, got {sorted(point)}")

    def schedule(self, point: Point):
        import tvm
        from tvm import s_tir

        from ..measure.pool import WorkerPool

        if self._pool is None:
            self._pool = WorkerPool(1, apply_text)
        [outcome] = self._pool.map([ApplyTask(self.workload.ident, point["form"], point["text"])], self.timeout_s)
        if not outcome.ok:
            raise InvalidPoint(f"the {point['form']} did not apply ({outcome.kind}): {outcome.reason}")
        return s_tir.Schedule(tvm.ir.load_json(outcome.value))

    def sample(self, rng, checked: bool = True) -> Point:
        raise InvalidPoint("the code space has nothing to sample: its points are schedules an agent writes")

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
