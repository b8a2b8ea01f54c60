"""Export the best kernel: compiled shared library, its TVMScript, and its JSON record."""
from __future__ import annotations

import json
from pathlib import Path

from .db import Database, Task
from .errors import UserError
from .space import make_space
from .target import Target
from .workloads import Workload


def export_best(wl: Workload, target: Target, db: Database, folder: Path, space: str = "cpu-template") -> list[Path]:
    import tvm

    task = Task(wl.key, target.name, target.hardware, space)
    best = db.best(task)
    if best is None:
        raise UserError(f"no correct kernel for {wl.key} on this hardware ({target.hardware}) in {db.path}; "
                        f"run 'tensortune tune' first")
    schedule = make_space(space, wl).apply(best.point)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UserError(f"cannot create '{folder}': {err.strerror}; pass --out with a writable folder") from None
    paths = [folder / "kernel.so", folder / "kernel.py", folder / "record.json"]
    tvm.compile(schedule.mod, target=tvm.target.Target(target.spec)).export_library(str(paths[0]))
    paths[1].write_text(schedule.mod.script())
    ins, out = wl.io_specs()
    paths[2].write_text(json.dumps({
        "workload": wl.key, "target": target.spec, "hardware": target.hardware, "space": space,
        "point": best.point, "latency_s": best.result.latency, "spread": best.result.spread,
        "threads": best.result.threads, "gflops": wl.flops / best.result.latency / 1e9,
        "inputs": [{"shape": s, "dtype": d} for s, d in ins], "output": {"shape": out[0], "dtype": out[1]},
        "entry": "main", "note": f"set TVM_NUM_THREADS={best.result.threads} to run it as it was timed",
    }, indent=2))
    return paths
