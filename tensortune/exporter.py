"""Export the best kernel: compiled shared library, its TVMScript, and its JSON record."""
from __future__ import annotations

import json
from pathlib import Path

from .db import Database
from .errors import UserError
from .space import make_space
from .target import Target
from .workloads import Workload


def export_best(wl: Workload, target: Target, db: Database, folder: Path) -> list[Path]:
    """The fastest correct record for this workload on this hardware, from any space."""
    import tvm

    tasks = [t for t in db.tasks(wl.key) if (t.target, t.hardware) == (target.name, target.hardware)]
    candidates = [(record, task) for task in tasks for record in [db.best(task)] if record is not None]
    if not candidates:
        raise UserError(f"no correct kernel for {wl.key} on this hardware ({target.hardware}) in {db.path}; "
                        f"run 'tensortune tune' first")
    best, task = min(candidates, key=lambda c: c[0].result.latency)
    space = task.space
    schedule = make_space(space, wl, target.spec).apply(best.point)
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
