"""Apply and check: the model built with each kernel's best verified schedule, run in TVM's
VM and compared with torch eager on fresh inputs.

A kernel never tuned, or whose best is not faster than its default, keeps TVM's default. If
the built model disagrees with torch, the tuned kernel responsible is found by putting each
back to its default in turn; it is named in the result and stays at its default.
"""
from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..db import Database
from ..errors import UserError
from ..measure.runner import verify
from ..space import make_space, stored_space
from ..space.default import DefaultSpace
from ..target import Target, compile_for, tvm_target
from .defaults import stored_default
from .importer import ImportedModel, torch_build
from .layout import prepack
from .torch_ops import in_place_residuals, register, vendor_calls
from .vm import ROUNDS, eager_seconds, in_turn, rounds_in_turn, run, vm_seconds


@dataclass
class BuiltModel:
    model: ImportedModel  # as imported; `build` is the build chosen (it or its with_torch_ops)
    executable: object  # tvm.runtime.Executable of the Relax VM
    tuned: dict[str, float] = field(default_factory=dict)  # function -> tuned seconds per call
    fell_back: dict[str, str] = field(default_factory=dict)  # function -> why it keeps its default
    error: float = 0.0  # max error against torch eager, relative to max |torch output|
    build: ImportedModel | None = None
    # seconds per call of torch eager and of each build timed for the choice ("tvm", "torch ops",
    # "mixed"), on the same inputs; empty where nothing was timed (a GPU target)
    timed: dict[str, float] = field(default_factory=dict)
    refused: str = ""  # why the build that calls torch was not kept, if it failed its check
    kept: str = "tvm"  # which of `timed`'s builds this is

    def __post_init__(self):
        self.build = self.build or self.model

    @property
    def slower_than_eager(self) -> bool:
        """Whether torch eager ran faster than this build when both were timed: a region
        that is runs in PyTorch instead (never slower by surprise)."""
        return "eager" in self.timed and self.timed["eager"] < self.timed[self.kept]

    def against_eager(self) -> str:
        """'x ms a call against eager's y ms', for the messages saying which runs."""
        return f"{self.timed[self.kept] * 1e3:.3f} ms a call against eager's {self.timed['eager'] * 1e3:.3f} ms"

    @property
    def torch_ops(self) -> int:
        """Operations the chosen build calls torch for (0: every kernel in TVM)."""
        return self.build.torch_ops


def tolerance(dtype) -> float:
    """End-to-end agreement with torch: ten times the square root of the dtype's epsilon
    (3.5e-3 for float32), as every kernel's rounding differs from torch's; integers and
    booleans (a mask, positions) exactly."""
    if not np.issubdtype(np.dtype(dtype), np.inexact):
        return 0.0
    return 10 * float(np.sqrt(np.finfo(np.dtype(dtype)).eps))


def best_schedules(model: ImportedModel, target: Target, db: Database) -> dict[str, tuple[object, float]]:
    """function name -> (scheduled PrimFunc, seconds per call) for each kernel whose best
    verified record (any space) is faster than its default."""
    out = {}
    for kernel in model.kernels:
        key = kernel.workload.key
        default = stored_default(db, key, target)
        limit = default.latency if default else float("inf")
        best = [(record, task) for task in db.tasks(key) if (task.target, task.hardware) == (target.name, target.hardware)
                for record in [db.best(task)] if record is not None and record.result.latency < limit]
        if kernel.tunable and best:
            record, task = min(best, key=lambda b: b[0].result.latency)
            space = make_space(stored_space(task.space, record.label, target), kernel.workload, target)
            schedule = space.apply(record.point)
            out[kernel.name] = (schedule.mod["main"], record.result.latency)
    return out


# times one build or eager: (label, the real timing) -> seconds per call; tests inject theirs
Timer = Callable[[str, Callable[[], float]], float]


def timed_now(label: str, measure: Callable[[], float]) -> float:
    """The real timing, now."""
    return measure()


def build_model(model: ImportedModel, target: Target, db: Database, seed: int = 1,
                progress: Callable[[str], None] = lambda _: None, timer: Timer = timed_now,
                deadline: float | None = None, mix: bool = True) -> BuiltModel:
    """Build with the best schedules; check against torch; fall back where a kernel is wrong.
    Where the model also has a build that calls torch (`with_torch_ops`), both are built and
    checked, timed end to end on the same inputs, and the faster is kept; if that is the one
    calling torch and `mix` is set, a few of its operations are tried back in TVM
    (_back_to_tvm), until `deadline` (time.perf_counter's clock) if one is given. The choice is
    stored in `db`: a later build while no newer record of the model's kernels is stored (the
    backend's, after tune-model's) builds that one alone. On a CPU the kept build is also timed
    against torch eager on the same inputs (`slower_than_eager`)."""
    if target.kind != "llvm":  # eager runs on this CPU, not on the target's device
        return _build_best(model, target, db, seed)
    inputs, _ = fresh_case(model, seed + 1)
    timed = {"eager": timer("eager", lambda: eager_seconds(model.module, inputs, target.threads))}
    chosen = _stored_choice(model, target, db, seed)
    if chosen is not None:
        timed[chosen.kept] = timer(chosen.kept, lambda: vm_seconds(chosen.executable, inputs, target))
        return replace(chosen, timed=timed)
    built = _choose(model, target, db, seed, inputs, timed, progress, timer, deadline, mix)
    if "torch ops" in timed and (deadline is None or time.perf_counter() <= deadline):  # a choice timed, made whole
        db.set_build_choice(_choice_key(model), target.name, target.hardware, built.kept, built.build.kept_in_tvm)
    return built


def _choose(model: ImportedModel, target: Target, db: Database, seed: int, inputs, timed: dict,
            progress: Callable[[str], None], timer: Timer, deadline: float | None, mix: bool) -> BuiltModel:
    """The faster of the all-TVM build and the one calling torch (mixed where `mix`), each
    build's seconds added to `timed`. Without `mix` and any tuning, the all-TVM build is not
    built where the one calling torch takes over UNTUNED_LOSES_S a call per operation it sends
    to torch: at TVM's serial default schedules it cannot win there."""
    other, refused = None, ""
    try:
        other = _build_best(model.with_torch_ops, target, db, seed) if model.with_torch_ops else None
    except UserError as err:  # torch's operators disagree with the import: the all-TVM build stands
        refused = str(err)
    if other is not None and not mix and not tuned_before(model, target, db):
        timed["torch ops"] = timer("torch ops", lambda: vm_seconds(other.executable, inputs, target))
        if timed["torch ops"] > UNTUNED_LOSES_S * other.torch_ops:
            return replace(other, model=model, build=other.model, timed=timed, kept="torch ops")
    built = _build_best(model, target, db, seed)
    if other is None:
        timed["tvm"] = timer("tvm", lambda: vm_seconds(built.executable, inputs, target))
        return replace(built, timed=timed, refused=refused)
    # untuned, TVM's serial default schedules take seconds a call where torch's take milliseconds
    # (ResNet-50: 10 s, timed four times in a row before): such a build is timed no further
    timed["torch ops"], timed["tvm"] = in_turn(
        timer, ("torch ops", lambda: vm_seconds(other.executable, inputs, target)),
        ("tvm", lambda lost_s: vm_seconds(built.executable, inputs, target, lost_s)), lost=LOST)
    if timed["tvm"] <= timed["torch ops"]:
        return replace(built, timed=timed)
    if not mix:
        return replace(other, model=model, build=other.model, timed=timed, kept="torch ops")
    chosen = _back_to_tvm(model, target, db, seed, other, inputs, progress, timer, deadline)
    if chosen is not other:  # each step won within noise: the sum of them raced against where they started
        timed["torch ops"], timed["mixed"] = in_turn(
            timer, ("torch ops", lambda: vm_seconds(other.executable, inputs, target)),
            ("mixed", lambda lost_s: vm_seconds(chosen.executable, inputs, target, lost_s)), lost=LOST)
        if timed["mixed"] >= timed["torch ops"]:
            chosen = other
    return replace(chosen, model=model, build=chosen.model, timed=timed,
                   kept="mixed" if chosen is not other else "torch ops")


def _choice_key(model: ImportedModel) -> str:
    """What a model's stored build choice is found by: the operations torch could take in it
    and their FLOPs. The model whole and its graph as dynamo captures it (the backend's region)
    share it, where their names and an elementwise kernel or two differ."""
    return hashlib.sha1(repr(model.with_torch_ops.torch_sites).encode()).hexdigest()[:16]


def _stored_choice(model: ImportedModel, target: Target, db: Database, seed: int) -> BuiltModel | None:
    """The build stored as kept for the model, built and checked; None if none is stored, a
    record of its kernels is newer than the choice (tuned since), or it no longer passes its check."""
    stored = db.build_choice(_choice_key(model), target.name, target.hardware) if model.with_torch_ops else None
    if stored is None:
        return None
    kept, in_tvm, created = stored
    if db.latest_record([k.workload.key for k in model.all_kernels()], target.name, target.hardware) > created:
        return None
    build = {"tvm": model, "torch ops": model.with_torch_ops}.get(kept) or torch_build(model, target, in_tvm)
    try:
        chosen = _build_best(build, target, db, seed) if build is not None else None
    except UserError:  # decide again, from every candidate
        return None
    return None if chosen is None else replace(chosen, model=model, build=chosen.model, kept=kept)


def tuned_before(model: ImportedModel, target: Target, db: Database) -> bool:
    """Whether the records hold tuning of any of the model's kernels on this hardware: without
    any, an operation put back in TVM runs at its default schedule (serial on a CPU), and
    trying each (a build and a timing, seconds apiece) rarely pays."""
    return any((task.target, task.hardware) == (target.name, target.hardware) and task.space != DefaultSpace.name
               for kernel in model.all_kernels() for task in db.tasks(kernel.workload.key))


# a build calling torch slower than this a call per operation sent to torch is not raced by the
# untuned all-TVM build, whose code generation is the costliest step of a compile (without it,
# MobileNetV2's compile went from 100 s to 54 s: benchmarks/results/coverage-mobilenet-*.txt); a
# tiny model whose torch calls cost more than their work (zoo.conv_block) is still raced
UNTUNED_LOSES_S = 50e-6
LOST = 3.0  # an all-TVM build whose first call takes this many times the build calling torch's is timed no further
MIX_TRIES = 8  # operations tried back in TVM, the smallest first
# kept there only where the model gets faster by more than this share, both builds timed in turn
# (one timing against the kept build's, minutes apart, needed 2% over drift; ResNet-18's max
# pool in torch is 3% of the model in models-pool.txt's profile, TVM's tuned one a third of it)
MIX_MARGIN = 0.01


def _back_to_tvm(model: ImportedModel, target: Target, db: Database, seed: int, best: BuiltModel,
                 inputs, progress: Callable[[str], None], timer: Timer, deadline: float | None) -> BuiltModel:
    """Per operation, greedily: the smallest operations the kept build calls torch for (by
    FLOPs: where torch's call and the unfused epilogue cost most relative to the work) are put
    back in TVM one at a time, fused as in the all-TVM build (with its tuned schedules where
    the kernel is the same), and left there where the model is faster end to end, timed in
    turn with the build kept so far: faster in every round, and by MIX_MARGIN at the median.
    A win at the medians alone was noise often enough that, over eight tries, BERT's layer
    kept four operations in TVM and ran 1.6x slower than the build it started from."""
    met = model.with_torch_ops.torch_sites
    for tried, (index, _) in enumerate(sorted(met, key=lambda site: site[1])[:MIX_TRIES]):
        if deadline is not None and time.perf_counter() > deadline:
            break
        candidate = torch_build(model, target, best.build.kept_in_tvm | {index})
        if candidate is None:  # every operation back in TVM: the all-TVM build, already timed
            continue
        progress(f"operation {index} back in TVM ({tried + 1} of {min(MIX_TRIES, len(met))})")
        try:
            trial = _build_best(candidate, target, db, seed)
        except UserError:  # a kernel of this build fails its check: the operation stays in torch
            continue
        kept_s, seconds = rounds_in_turn(timer, ("kept", lambda: vm_seconds(best.executable, inputs, target)),
                                         ("mixed", lambda lost_s: vm_seconds(trial.executable, inputs, target, lost_s)),
                                         lost=LOST)
        every_round = len(seconds) == ROUNDS and all(mine < theirs for mine, theirs in zip(seconds, kept_s))
        if every_round and statistics.median(seconds) < statistics.median(kept_s) * (1 - MIX_MARGIN):
            best = trial
    return best


def _build_best(model: ImportedModel, target: Target, db: Database, seed: int) -> BuiltModel:
    if model.torch_ops:
        register()  # the built model calls them when it is checked
    chosen = best_schedules(model, target, db)
    return build_checked(model, target, {name: func for name, (func, _) in chosen.items()},
                         {name: s for name, (_, s) in chosen.items()}, seed)


def build_checked(model: ImportedModel, target: Target, funcs: dict, seconds: dict, seed: int) -> BuiltModel:
    inputs, expected = fresh_case(model, seed)
    executable = compile_model(model, target, funcs)
    error = compare(run(executable, inputs, target.kind), expected)
    fell_back: dict[str, str] = {}
    if error > tolerance(expected[0].dtype) and funcs:
        for name in list(funcs):
            trial = {n: f for n, f in funcs.items() if n != name}
            candidate = compile_model(model, target, trial)
            trial_error = compare(run(candidate, inputs, target.kind), expected)
            if trial_error <= tolerance(expected[0].dtype):
                fell_back[name] = f"the model with it differed from torch by {error:.1e} (relative)"
                funcs, executable, error = trial, candidate, trial_error
                break
    if error > tolerance(expected[0].dtype):
        raise UserError(f"{model.name} built by TVM differs from torch eager by {error:.1e} (relative) even "
                        f"with {'every kernel at its default' if not funcs else 'the tuned kernels'}: "
                        "TVM's import of this model is not faithful")
    return BuiltModel(model, executable, {n: seconds[n] for n in funcs}, fell_back, error)


def compile_model(model: ImportedModel, target: Target, funcs: dict):
    """The model with `funcs` swapped in (`with_schedules`), the weights of the tuned kernels
    prepacked (model/layout.py), residuals added in place where nothing reads them after
    (model/torch_ops.py), built for the Relax VM by TVM's remaining passes (lowering the
    dataflow, memory planning)."""
    return compile_for(in_place_residuals(prepack(with_schedules(model, target, funcs), funcs)), target.spec,
                       relax_pipeline=lowering(tvm_target(target.spec)))


def with_schedules(model: ImportedModel, target: Target, funcs: dict):
    """The model's module with `funcs` (function name -> scheduled PrimFunc) swapped in, and
    every other kernel at its default (TVM's own schedule, see space.DefaultSpace)."""
    import tvm

    mod = tvm.IRModule(dict(model.mod.functions), attrs=model.mod.attrs)
    for kernel in model.kernels:
        func = funcs.get(kernel.name) or DefaultSpace(kernel.workload, target).apply({}).mod["main"]
        gv = mod.get_global_var(kernel.name)
        mod[gv] = func.without_attr("global_symbol").with_attrs(dict(model.mod[gv].attrs or {}))
    return mod


def lowering(for_target):
    """TVM's passes after fusion (lowering the dataflow, memory planning) for `for_target` (a
    tvm.target.Target), as a pipeline. TVM 0.27's `relax.pipeline.dataflow_lower_passes`
    fails for CPUs (not exported there), so each backend's own lists are used."""
    import tvm
    from tvm import relax

    backend = relax.backend.cuda.pipeline if for_target.kind.name == "cuda" else relax.backend.cpu_generic.pipeline
    return tvm.transform.Sequential(backend.dataflow_lower_passes(for_target) + backend.finalize_passes(for_target))


def fresh_case(model: ImportedModel, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Inputs drawn afresh (like the example inputs: same shapes and dtypes), or the example
    inputs themselves for a model with `fixed_inputs`, and torch eager's outputs."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(t.shape, generator=generator).to(t.dtype) if t.is_floating_point() and not model.fixed_inputs
              else t.clone() for t in model.example_inputs]
    with torch.no_grad():
        out = model.module(*inputs)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [t.detach().numpy() for t in inputs], [t.detach().numpy() for t in outs]


def compare(got: list[np.ndarray], expected: list[np.ndarray]) -> float:
    """Max error relative to max |expected| (runner.verify's measure), over every output."""
    if [g.shape for g in got] != [e.shape for e in expected]:
        return float("inf")
    return max((verify(g, e, float("inf"))[0] for g, e in zip(got, expected)), default=0.0)


def export_model(built: BuiltModel, target: Target, folder: Path, db: Database) -> list[Path]:
    """model.so (the Relax VM executable) and model.json (inputs, outputs, kernels, check)."""
    model = built.model
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create '{folder}': {err.strerror}; use a writable folder", option="--out") from None
    library, meta = folder / "model.so", folder / "model.json"
    built.executable.export_library(str(library))
    _, expected = fresh_case(model, 0)
    meta.write_text(json.dumps({
        "kind": "model", "model": model.name, "key": model.key, "target": target.spec, "threads": target.threads,
        # a build that calls torch's operators needs torch, and tensortune.load registers them
        "torch_ops": built.torch_ops, "runtime_needs": ["tvm", "torch"] if built.torch_ops else ["tvm"],
        # what the build runs where: fused oneDNN layers (weights packed on their first call in the
        # process), torch's plain operators, TVM kernels
        "calls": vendor_calls(built.build.mod),
        "inputs": [{"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")} for t in model.example_inputs],
        "outputs": [{"shape": list(e.shape), "dtype": str(e.dtype)} for e in expected],
        "checked_against_torch": {"max_relative_error": built.error, "tolerance": tolerance(expected[0].dtype)},
        "kernels": [{"function": k.name, "kernel": k.workload.key, "calls": k.calls,
                     "default_s": _seconds(stored_default(db, k.workload.key, target)), "tuned_s": built.tuned.get(k.name),
                     "fell_back": built.fell_back.get(k.name)} for k in built.build.kernels],
    }, indent=1))
    return [library, meta]



def _seconds(result) -> float | None:
    return result.latency if result is not None and result.ok else None
