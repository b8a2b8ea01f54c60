"""Tuning driven from outside: an agent (or a person at a prompt) opens tasks, reads what they
are, and measures schedules it chose, within budgets the workbench enforces.

Every measurement takes the path `tune` takes: the same build workers, every verification
layer, the same timing, the roofline re-check, and the same records (label "search", so a
later `tensortune tune` of the task resumes from them). A schedule is a knob point of the
task's space (cpu-template, cuda-template or sketch), a MetaSchedule trace, or Python code
defining `schedule(sch)`; the last two are untrusted text, applied only in a worker process
(agents/code_space.py). The MCP server (mcp_server.py) is a thin face over this class.
"""
from __future__ import annotations

import json
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass

from ..db import Database, Task
from ..errors import UserError
from ..measure.config import MeasureConfig
from ..measure import make_evaluator
from ..measure.evaluator import Evaluator
from ..result import Result
from ..result import Label, Status
from ..measure.roofline import floor_s, position
from ..points import InvalidPoint, point_from_json, point_key
from ..search.given import Given
from ..space import TEMPLATES, make_space
from ..target import Target
from ..tuning.round import TaskTuner, record, run_round
from .code_space import CodeSpace
from ..workloads import FAMILIES, PRESETS, get_workload
from ..workloads.kernel import KernelWorkload

FORMS = ("point", "named", "trace", "function")  # how a schedule may be given


@dataclass(frozen=True)
class Budget:
    """What one workbench may spend, all tasks together."""

    trials: int = 256
    seconds: float = 3600.0


class Workbench:
    """Tasks opened, described and measured for an agent, within a `Budget` (see the module's
    docstring); every measurement takes `tune`'s path and lands in the records."""

    def __init__(self, db: Database, target: Target, config: MeasureConfig, budget: Budget = Budget()):
        self.db, self.target, self.config, self.budget = db, target, config, budget
        self.started, self.trials = time.monotonic(), 0
        self._spaces: dict[tuple[str, str], object] = {}
        self._workloads: dict[str, object] = {}
        self._models: dict[str, object] = {}
        self._measurer: Evaluator | None = None
        self._tuners: dict[tuple[str, str], TaskTuner] = {}  # (workload key, space): the task's rounds
        self._claims = ExitStack()  # the tasks this workbench measures, held until it closes

    # ---- reading -------------------------------------------------------------------------
    def tasks(self, model: str | None = None) -> dict:
        """The operators (families, presets) and zoo models; with `model`, that model's
        kernels as tasks (importing it takes seconds to a minute)."""
        from ..model.zoo import ZOO

        if model is None:
            return {"families": {n: {"shape": list(f.params), "what": f.doc.splitlines()[0] if f.doc else ""}
                                 for n, f in FAMILIES.items()},
                    "presets": {n: {"family": fam, "shape": list(shape), "why": why} for n, (fam, shape, why) in PRESETS.items()},
                    "models": sorted(ZOO), "task_names": "PRESET, FAMILY:P=V,..., or MODEL:KERNEL (from tasks(model))"}
        return {"model": model, "kernels": [
            {"task": f"{model}:{k.name}", "calls": k.calls, "tunable": k.tunable, "flops": k.workload.flops}
            for k in self._imported(model).kernels]}

    def describe(self, task: str) -> dict:
        """What an agent needs to write schedules for a task: its TensorIR, work, spaces with
        knobs and constraints, example points and the baselines measured so far."""
        workload = self.workload(task)
        spaces = {name: self._describe_space(workload, name) for name in self._space_names(workload)}
        return {"task": task, "key": workload.key, "tvmscript": workload.prim_func().script(),
                "flops": workload.flops, "bytes": workload.bytes,
                "arithmetic_intensity": round(workload.flops / workload.bytes, 3) if workload.bytes else None,
                "roofline_floor_s": floor_s(workload, self.target), "spaces": spaces,
                "forms": {"point": "knob values of a space, as JSON", "named": "naive, hand or default",
                          "trace": "MetaSchedule trace JSON (agents/code_space.trace_json)",
                          "function": "Python code defining schedule(sch) with TensorIR schedule primitives"},
                "baselines": self._baselines(workload), "budget": self.budget_left()}

    def history(self, task: str, space: str | None = None) -> dict:
        """Every stored measurement of the task on this hardware (oldest first) and the best."""
        workload = self.workload(task)
        names = [space] if space else [*self._space_names(workload), CodeSpace.name]
        records = [(name, r) for name in names for r in self.db.records(self._task(workload, name))]
        best = min((x for x in records if x[1].result.ok), key=lambda x: x[1].result.latency, default=None)
        return {"task": task, "key": workload.key, "records": [_record(name, r) for name, r in records],
                "best": _record(*best) | {"roofline": position(workload, self.target, best[1].result.latency)} if best else None,
                "budget": self.budget_left()}

    def budget_left(self) -> dict:
        return {"trials": self.budget.trials - self.trials,
                "seconds": round(self.budget.seconds - (time.monotonic() - self.started), 1)}

    # ---- measuring -----------------------------------------------------------------------
    def measure(self, task: str, form: str, schedule, space: str | None = None) -> dict:
        """Build, verify, time and record one schedule; returns its result with diagnostics.
        `schedule`: a knob point (dict or JSON text) for form "point", a name for "named",
        the text for "trace" and "function"."""
        self._spend()
        workload = self.workload(task)
        kind = CodeSpace.name if form in ("trace", "function") else space or self._space_names(workload)[0]
        target_space = self.space(workload, kind)
        point = self._point(target_space, form, schedule)
        result, repeat = self._measure(workload, target_space, point)
        self.trials += not repeat
        return {"task": task, "space": kind, "point": point if kind != CodeSpace.name else {"form": form},
                **_result(result), **({"repeat": "measured before: its stored result, no trial spent"} if repeat else {}),
                **self._diagnose(workload, target_space, point, result), "budget": self.budget_left()}

    def _measure(self, workload, space, point) -> tuple[Result, bool]:
        """The point's result through the tuning round (the task claimed for this process on
        first use), and whether it was measured before: then the stored result, unmeasured."""
        tuner = self._tuner(workload, space)
        stored = {point_key(p): r for p, r in tuner.strategy.history}
        if point_key(point) in stored:
            return stored[point_key(point)], True
        tuner.strategy.give([point])
        [(_, result)] = run_round(tuner, self._ensure_measurer(), 1)
        return result, False

    def _tuner(self, workload, space) -> TaskTuner:
        key = (workload.key, space.name)
        if key not in self._tuners:
            task = self._task(workload, space.name)
            self._claims.enter_context(self.db.claim([task]))
            self._tuners[key] = TaskTuner(task, space, Given(space), self.db, floor=floor_s(workload, self.target))
        return self._tuners[key]

    def _spend(self) -> None:
        left = self.budget_left()
        if left["trials"] <= 0:
            raise UserError(f"the trial budget ({self.budget.trials}) is spent: start a new session for more")
        if left["seconds"] <= 0:
            raise UserError(f"the time budget ({self.budget.seconds:g} s) is spent: start a new session for more")

    def _point(self, space, form: str, schedule) -> dict:
        if form not in FORMS:
            raise UserError(f"unknown form '{form}'; known: {', '.join(FORMS)}")
        if form == "trace" and isinstance(schedule, list):  # the JSON itself, not its text
            schedule = json.dumps(schedule)
        if form in ("trace", "function"):
            if not isinstance(schedule, str):
                raise UserError(f"a {form} is text; got {type(schedule).__name__}")
            return {"form": form, "text": schedule}
        if form == "named":
            try:
                return space.named(str(schedule))
            except InvalidPoint as err:
                raise UserError(str(err)) from None
        if isinstance(schedule, str):
            try:
                return point_from_json(schedule)
            except json.JSONDecodeError as err:
                raise UserError(f"the point is not JSON: {err}") from None
        if not isinstance(schedule, dict):
            raise UserError(f"a point is a JSON object of knob values; got {type(schedule).__name__}")
        return point_from_json(json.dumps(schedule))

    def _diagnose(self, workload, space, point, result: Result) -> dict:
        """The scheduled TVMScript, vector width and parallel extent (or why the point is
        invalid), and the roofline position of a correct kernel."""
        if result.status is Status.INVALID:
            return {"invalid_because": result.reason}
        try:
            script = space.apply(point).mod.script()
        except InvalidPoint as err:  # applied once already; only a flaky agent function gets here
            return {"invalid_because": str(err)}
        found = {"tvmscript": script, **loop_features(script)}
        if result.ok:
            found["roofline"] = position(workload, self.target, result.latency)
        return found

    # ---- tasks and spaces ----------------------------------------------------------------
    def workload(self, task: str):
        """A task by name: PRESET, FAMILY:P=V,... or MODEL:KERNEL."""
        if task not in self._workloads:
            self._workloads[task] = self._resolve(task)
        return self._workloads[task]

    def _resolve(self, task: str):
        from ..model.zoo import ZOO

        source, _, detail = task.partition(":")
        if source in ZOO:
            kernels = {k.name: k for k in self._imported(source).kernels}
            if detail not in kernels:
                raise UserError(f"{source} has no kernel '{detail}'; tasks(model='{source}') lists them")
            if not kernels[detail].tunable:
                raise UserError(f"{task} writes several tensors: it keeps TVM's default schedule")
            return kernels[detail].workload
        return get_workload(source, detail or None)

    def _imported(self, model: str):
        from ..model import import_model, load_factory

        if model not in self._models:
            name, (module, inputs) = load_factory(model)
            self._models[model] = import_model(name, module, inputs, self.target)
        return self._models[model]

    def _space_names(self, workload) -> list[str]:
        """The target's template space first where it fits the workload, then sketch."""
        template = TEMPLATES[self.target.kind]
        return ["sketch"] if isinstance(workload, KernelWorkload) else [template, "sketch"]

    def space(self, workload, name: str):
        key = (workload.key, name)
        if key not in self._spaces:
            try:
                self._spaces[key] = CodeSpace(workload) if name == CodeSpace.name else make_space(name, workload, self.target)
            except InvalidPoint as err:
                raise UserError(f"{workload.key} has no {name} space: {err}") from None
        return self._spaces[key]

    def _task(self, workload, space: str) -> Task:
        return Task(workload.key, self.target.name, self.target.hardware, space)

    def _describe_space(self, workload, name: str) -> dict:
        space = self.space(workload, name)
        examples = {}
        for example in ("naive", "hand", "default"):
            try:
                examples[example] = space.named(example)
            except (InvalidPoint, NotImplementedError):
                continue
        return {"knobs": [k.describe() for k in space.knobs], "named_points": examples}

    def _baselines(self, workload) -> dict:
        """The naive and hand kernels' latencies as stored (by `baselines` or `tune`)."""
        found = {}
        for name in self._space_names(workload):
            for label in (Label.NAIVE, Label.HAND):
                for stored in self.db.records(self._task(workload, name), (label,)):
                    found[label] = stored.result.latency if stored.result.ok else stored.result.status
        return found

    def baselines(self, task: str) -> dict:
        """Measure (and store) the naive and hand kernels of the target's template space, and
        time the vendor library (NumPy, torch) for a built-in operator, all side by side now.
        Not counted as trials."""
        from ..measure.baselines import measure_baselines

        workload = self.workload(task)
        name = self._space_names(workload)[0]
        template, out = self.space(workload, name), {}
        for label in (Label.NAIVE, Label.HAND):
            try:
                point = template.named(label)
            except (InvalidPoint, NotImplementedError) as err:
                out[label] = {"status": "none", "reason": str(err)}
                continue
            [result] = record(self._ensure_measurer(), self.db, self._task(workload, name), template, label, [point],
                              final=True)
            out[label] = _result(result)
        if not isinstance(workload, KernelWorkload) and workload.family.source is None and self.target.name == "cpu":
            out["vendor"] = measure_baselines(workload.name, workload.shape, self.target.threads)  # as `tune` does
        return {"task": task, "space": name, **out}

    def _ensure_measurer(self) -> Evaluator:
        if self._measurer is None:
            self._measurer = make_evaluator(self.target, self.config)
        return self._measurer

    def close(self) -> None:
        self._claims.close()
        if self._measurer is not None:
            self._measurer.close()
        for space in self._spaces.values():
            if isinstance(space, CodeSpace):
                space.close()


def loop_features(script: str) -> dict:
    """The widest vectorised loop and the widest parallel loop of a scheduled kernel (from
    its TVMScript: `T.vectorized(n)`, `T.parallel(n)`)."""
    def widest(kind: str) -> int:
        return max((int(m) for m in re.findall(rf"T\.{kind}\((?:\d+,\s*)?(\d+)\)", script)), default=1)

    return {"vector_width": widest("vectorized"), "parallel_extent": widest("parallel")}


def _result(result: Result) -> dict:
    return {"status": result.status, "ok": result.ok, "latency_s": result.latency if result.ok else None,
            "reason": result.reason}


def _record(space: str, record) -> dict:
    return {"space": space, "label": record.label, "point": record.point, **_result(record.result)}
