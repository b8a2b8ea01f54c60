"""Where a benchmark's figures came from: the command, date, machine and code revision, as the
first lines of every results file (absolute times drift between machines; this says which)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import datetime, timezone


def revision() -> str:
    """The checkout's commit, '-dirty' when tracked files other than results files differ from
    it (a results file being written, or one from an earlier run, says nothing about the code)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True,
                              cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ":/", ":(exclude,top)benchmarks/results")
    return commit + ("-dirty" if changed else "")


def header(threads: int) -> list[str]:
    """Two lines: the command as run with its revision; the date, machine (its vector extensions)
    and threads. Call it when the run starts: the revision is then the code that measured."""
    from tensortune.target import cpu_model, cpuinfo

    script = os.path.basename(sys.argv[0])
    vectors = " ".join(f for f in cpuinfo("flags").split() if f.startswith(("avx512f", "avx512_bf16", "amx", "avx2")))
    return [f"{script}: {' '.join(sys.argv[1:])} (code {revision()})",
            f"date {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, machine {cpu_model()} [{vectors or 'no AVX2'}] "
            f"({threads} threads for every variant), python {platform.python_version()}"]


def publish(text: str, out: str | None) -> None:
    """Print a results table, and write it to `out` too where one is given."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")
