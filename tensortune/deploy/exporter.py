"""Export the best kernel: compiled shared library, its TVMScript, and its JSON record; or a
dispatch table of kernels for several shapes of one operator."""
from __future__ import annotations

import json
from pathlib import Path

from ..db import Database
from ..errors import UserError
from ..measure.tasks import BuildTask, build
from ..space import make_space, stored_space
from ..target import Target
from ..workloads import Workload


def export_best(wl: Workload, target: Target, db: Database, folder: Path) -> list[Path]:
    """The fastest correct record for this workload on this hardware, from any space. For a
    GPU, also the CUDA binary (kernel.fatbin, with its source's hash in kernel.sha256)."""
    hardware = _hardware(wl, target, db)
    tasks = [t for t in db.tasks(wl.key) if (t.target, t.hardware) == (target.name, hardware)]
    candidates = [(record, task) for task in tasks for record in [db.best(task)] if record is not None]
    if not candidates:
        raise UserError(f"no correct kernel for {wl.key} on this hardware ({hardware}) in {db.path}; "
                        f"run 'tensortune tune' first")
    best, task = min(candidates, key=lambda c: c[0].result.latency)
    return export_kernel(wl, target, stored_space(task.space, best.label, target), best.point, best.result,
                         hardware, folder)


def export_kernel(wl: Workload, target: Target, space: str, point: dict, result, hardware: str,
                  folder: Path) -> list[Path]:
    """A kernel (the point of `space`, timed as `result`) as a library, its TVMScript and its
    JSON record in `folder`."""
    import tvm

    schedule = make_space(space, wl, target).apply(point)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create '{folder}': {err.strerror}; use a writable folder", option="--out") from None
    paths = [folder / "kernel.so", folder / "kernel.py", folder / "record.json"]
    build(BuildTask(tvm.ir.save_json(schedule.mod), target.spec, str(paths[0])))
    if target.name == "cuda":
        paths += [folder / "kernel.fatbin", folder / "kernel.sha256"]
    paths[1].write_text(schedule.mod.script())
    ins, out = wl.io_specs()
    paths[2].write_text(json.dumps({
        "workload": wl.key, "target": target.spec, "hardware": hardware, "space": space,
        "point": point, "latency_s": result.latency, "spread": result.spread,
        "threads": result.threads, "gflops": wl.flops / result.latency / 1e9,
        "inputs": [{"shape": s, "dtype": d} for s, d in ins], "output": {"shape": out[0], "dtype": out[1]},
        "entry": "main", "note": _how_to_run(target, result.threads),
    }, indent=2))
    return paths


def export_dispatch(summary, target: Target, folder: Path) -> list[Path]:
    """A dispatch table (tuning/shapes.py) as one folder: each shape's kernel, built with the
    table's schedule for it, in a subfolder, and dispatch.json, which `tensortune.load` reads
    into one callable that picks the kernel by its inputs' shapes."""
    paths, entries = [], []
    for s, wl in enumerate(summary.workloads):
        point, result = summary.final[s]["table"]
        if not result.ok:
            raise UserError(f"the table's kernel for {wl.key} failed its careful re-timing ({result.status}: "
                            f"{result.reason}); nothing exported")
        sub = ",".join(f"{k}={v}" for k, v in wl.kwargs.items())
        paths += export_kernel(wl, target, summary.tasks[s].space, point, result, target.hardware, folder / sub)
        entries.append({"shape": wl.kwargs, "folder": sub, "schedule": summary.serves[s]})
    (folder / "dispatch.json").write_text(json.dumps({"family": summary.workloads[0].name, "kernels": entries}, indent=2))
    return paths + [folder / "dispatch.json"]


def _how_to_run(target: Target, threads: int) -> str:
    if target.name == "cuda":
        return ("kernel.fatbin holds the compiled kernels: load kernel.so with load(path, 'cuda') from "
                "tensortune/measure/runner.py (TVM's runtime and the CUDA driver suffice)")
    return f"set TVM_NUM_THREADS={threads} to run it as it was timed"


def _hardware(wl: Workload, target: Target, db: Database) -> str:
    """This machine's fingerprint; for a GPU target without a local GPU, the one GPU of that
    architecture whose (imported) records there are."""
    if target.name != "cuda" or target.gpu:
        return target.hardware
    prefix = target.spec["arch"] + "-"
    seen = sorted({t.hardware for t in db.tasks(wl.key) if t.target == "cuda" and t.hardware.startswith(prefix)})
    if len(seen) > 1:
        raise UserError(f"records of {wl.key} from several {target.spec['arch']} GPUs ({', '.join(seen)}); "
                        f"export on the GPU itself")
    return seen[0] if seen else target.hardware
