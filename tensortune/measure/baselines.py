"""Vendor baselines (NumPy, and torch where installed), timed like our kernels.

They run in a child process whose BLAS/OpenMP pools are sized before NumPy and torch load,
so the vendor libraries use exactly as many threads as our kernels; the thread counts they
actually used are reported with the times.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Callable

from .runner import time_on_cpu, to_torch

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def measure_baselines(family: str, shape: tuple[int, ...], threads: int, timeout_s: float = 300) -> dict:
    """{'numpy': seconds, 'torch': seconds (if installed), 'threads': {...}} or {'error': ...}."""
    env = dict(os.environ, **{v: str(threads) for v in THREAD_VARIABLES})
    command = [sys.executable, "-m", "tensortune.measure.baselines", family, ",".join(map(str, shape)), str(threads)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"vendor baselines took over {timeout_s:g} s"}
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(done.stdout)


def time_call(fn: Callable[[], object], repeat: int = 15, min_repeat_s: float = 0.05, budget_s: float = 10) -> float:
    """Median seconds per call: a warm-up call, then repeats each lasting at least
    `min_repeat_s` (the same rule as TVM's time_evaluator with min_repeat_ms)."""
    return statistics.median(time_on_cpu(fn, repeat, min_repeat_s, budget_s))


def _main(family: str, shape: str, threads: int) -> dict:
    import numpy as np
    from threadpoolctl import threadpool_info

    from ..workloads import get_workload

    wl = get_workload(family, shape)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, s).astype(d) for s, d in wl.io_specs()[0]]
    out = {"numpy": time_call(lambda: wl.reference(*inputs))}
    pools = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    try:
        import torch
    except ImportError:
        return out | {"threads": pools}
    if wl.family.torch is not None:
        torch.set_num_threads(threads)
        tensors = [to_torch(a) for a in inputs]
        with torch.no_grad():
            out["torch"] = time_call(lambda: wl.family.torch(*tensors, **wl.kwargs))
        pools["torch"] = torch.get_num_threads()
    return out | {"threads": pools}


if __name__ == "__main__":
    print(json.dumps(_main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
