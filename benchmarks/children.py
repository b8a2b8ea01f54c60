"""Each model measured in a fresh process: a benchmark script run again with `--child NAME`,
which prints its result as one JSON line last."""
from __future__ import annotations

import json
import subprocess
import sys
import time


def in_child(script: str, name: str, timeout: float | None = None) -> dict:
    """`script --child name`'s result, with the seconds the child took (`child_s`); or
    {"model": name, "failed": why} where it failed or ran past `timeout` seconds."""
    start = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, script, "--child", name], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "failed": f"no result within {timeout:.0f} s"}
    if done.returncode != 0:
        last = [line for line in done.stderr.splitlines() if line.strip()][-1:] or ["no message"]
        return {"model": name, "failed": f"exit {done.returncode}: {last[0][:200]}"}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["child_s"] = time.perf_counter() - start
    return result
