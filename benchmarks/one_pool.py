"""TVM's own thread pool against torch's OpenMP pool (model/one_pool.py) for the build calling
torch's kernels, at TVM's default schedules: each (model, pool) in a child process of its own
(the registration holds for a whole process), the pools alternating, each child timing torch
eager and the build on the same inputs; prints each model's eager/build ratio per pool.

Run alone on the machine:
    .venv/bin/python benchmarks/one_pool.py [--models bert_layer gpt_block resnet18] [--rounds 3]
        [--out benchmarks/results/one_pool.txt]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))


def child(pool: str, name: str) -> dict:
    """In this process: the pool chosen, then eager and the build timed, alternately, 3 times."""
    os.environ["TVM_NUM_THREADS"] = str(THREADS)
    import tvm  # noqa: F401  (before the registration, as one_pool requires)

    from tensortune.model import zoo
    from tensortune.model.build import build_checked, fresh_case
    from tensortune.model.importer import import_model
    from tensortune.model.one_pool import use_torch_pool
    from tensortune.model.torch_ops import register
    from tensortune.model.vm import eager_seconds, vm_seconds
    from tensortune.target import make_target

    why = use_torch_pool() if pool == "torch" else ""
    target = make_target("cpu", THREADS)
    register()
    module, inputs = zoo.ZOO[name]()
    model = import_model(name, module, inputs, target, torch_ops=True)
    built = build_checked(model.with_torch_ops, target, {}, {}, seed=1)
    case, _ = fresh_case(model, 2)
    pairs = [(eager_seconds(module, case, THREADS), vm_seconds(built.executable, case, target)) for _ in range(3)]
    return {"eager": statistics.median(p[0] for p in pairs), "build": statistics.median(p[1] for p in pairs),
            "not_registered": why}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bert_layer", "gpt_block", "resnet18"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    head = header(THREADS)
    ratios: dict = {}
    for _ in range(args.rounds):
        for name in args.models:
            for pool in ("tvm", "torch"):
                done = subprocess.run([sys.executable, __file__, "--child", pool, name], capture_output=True, text=True)
                row = json.loads(done.stdout.strip().splitlines()[-1])
                if row["not_registered"]:
                    sys.exit(f"torch's pool could not be used: {row['not_registered']}")
                ratios.setdefault((name, pool), []).append(row["eager"] / row["build"])
    lines = [*head, "eager / build (above 1: the build is faster than torch eager), the build calling torch at TVM's "
             f"default schedules; median of {args.rounds} rounds, [range]", "",
             f"{'model':12}{'TVM pool':>22}{'torch pool':>22}"]
    for name in args.models:
        cells = [ratios[(name, pool)] for pool in ("tvm", "torch")]
        lines.append(f"{name:12}" + "".join(f"{statistics.median(c):8.2f}x [{min(c):.2f}-{max(c):.2f}]".rjust(22)
                                            for c in cells))
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
