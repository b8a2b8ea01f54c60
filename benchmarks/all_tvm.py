"""The all-TVM build (no torch call: what a deployment without torch gets) of this code
against an earlier revision's, in one sitting, at the same trials: each model imported,
tuned from an empty database and built by each revision in turn, and timed end to end, with
torch eager timed alike as the common yardstick.

The earlier revision runs from a temporary `git worktree` of it (its own tensortune on the
path, this checkout's virtual environment), in a child process, as this code does. With
`--winograd`, this code's build has its 3x3 convolutions in Winograd's F(4x4, 3x3)
(model/winograd.py); compare with `--against HEAD` to see what that alone does.

Run alone on the machine:
    .venv/bin/python benchmarks/all_tvm.py --against 8df7f26 [--models resnet18] [--trials-per-task 16]
        [--winograd] [--out benchmarks/results/all_tvm.txt]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))
os.environ["TVM_NUM_THREADS"] = str(THREADS)
HERE = os.path.dirname(os.path.abspath(__file__))


def measure(name: str, trials_per_task: int, winograd: bool = False) -> dict:
    """In this process's tensortune: the model's all-TVM build tuned and timed, and eager."""
    from tensortune.db import Database
    from tensortune.measure.config import MeasureConfig
    from tensortune.model import build_model, import_model, tune_model, zoo
    from tensortune.model.build import fresh_case
    from tensortune.model.vm import eager_seconds, vm_seconds
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig

    target = make_target("cpu", THREADS)
    module, inputs = zoo.ZOO[name]()
    options = {"winograd": True} if winograd else {}  # an earlier revision may not know the option
    model = import_model(name, module, inputs, target, **options)  # no build calling torch
    tunable = sum(k.tunable for k in model.kernels)
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"{tmp}/bench.db")
        start = time.perf_counter()
        tune_model(model, target, db, TuneConfig(trials=trials_per_task * tunable, space="sketch"),
                   MeasureConfig(threads=THREADS), lambda states, done, wanted: print(
                       f"  {name}: {done}/{wanted} trials", file=sys.stderr, flush=True))
        built = build_model(model, target, db)
        tuning_s = time.perf_counter() - start
    case, _ = fresh_case(model, 0)
    return {"tvm": vm_seconds(built.executable, case, target), "eager": eager_seconds(module, case, THREADS),
            "kernels": len(model.kernels), "trials": trials_per_task * tunable, "tuning_s": tuning_s,
            "error": built.error, "code": os.path.dirname(zoo.__file__)}


def in_revision(revision: str | None, name: str, trials_per_task: int, winograd: bool = False) -> dict:
    """`measure` run by the code of `revision` (a git worktree of it), or of this checkout as
    it is (None), in a child process."""
    if revision is None:
        return _child(os.path.dirname(HERE), name, trials_per_task, winograd)
    with tempfile.TemporaryDirectory() as tree:
        subprocess.run(["git", "worktree", "add", "--detach", tree, revision], cwd=HERE, check=True,
                       capture_output=True)
        try:
            return _child(tree, name, trials_per_task)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", tree], cwd=HERE, capture_output=True)


def _child(code: str, name: str, trials_per_task: int, winograd: bool = False) -> dict:
    """`measure` in a child process importing tensortune from the folder `code`."""
    child = subprocess.run([sys.executable, __file__, "--child", name, str(trials_per_task), str(int(winograd))],
                           env={**os.environ, "PYTHONPATH": code}, capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(f"error: the run of {code} failed: {child.stderr.strip().splitlines()[-1]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def table(rows: list[dict], against: str, head: list[str], winograd: bool) -> str:
    lines = [*head, f"all-TVM builds (no torch call), sketch space, tuned from an empty database; before: code {against}; "
             f"after: this code{' with Winograd' if winograd else ''}; latency ms (median, warm), eager timed in the same process as each",
             "", f"{'model':12}{'trials':>7}{'before':>9}{'eager':>9}{'after':>9}{'eager':>9}"
             f"{'after/before':>13}{'/eager before':>14}{'/eager after':>13}"]
    for r in rows:
        b, a = r["before"], r["after"]
        lines.append(f"{r['model']:12}{a['trials']:7d}{b['tvm'] * 1e3:9.2f}{b['eager'] * 1e3:9.2f}{a['tvm'] * 1e3:9.2f}"
                     f"{a['eager'] * 1e3:9.2f}{b['tvm'] / a['tvm']:12.2f}x{b['eager'] / b['tvm']:13.2f}x"
                     f"{a['eager'] / a['tvm']:12.2f}x")
        lines.append(f"  kernels {b['kernels']} -> {a['kernels']}; tuning s {b['tuning_s']:.0f} -> {a['tuning_s']:.0f}; "
                     f"max error against eager {b['error']:.1e} -> {a['error']:.1e}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="the earlier revision (a git commit)")
    parser.add_argument("--models", nargs="+", default=["resnet18"])
    parser.add_argument("--trials-per-task", type=int, default=16)
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--winograd", action="store_true", help="this code's build in Winograd's F(4x4, 3x3)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), bool(int(args.child[2])))))
        return
    if not args.against:
        raise SystemExit("error: name the earlier revision to compare with: --against COMMIT")
    head = header(THREADS)
    rows = []
    for name in args.models:
        before = in_revision(args.against, name, args.trials_per_task)
        after = in_revision(None, name, args.trials_per_task, args.winograd)
        rows.append({"model": name, "before": before, "after": after})
        print(table(rows[-1:], args.against, [], args.winograd), flush=True)
    publish(table(rows, args.against, head, args.winograd) + "\n\n" + json.dumps(rows, indent=1), args.out)


if __name__ == "__main__":
    main()
