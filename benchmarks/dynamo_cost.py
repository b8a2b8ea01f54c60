"""What `torch.compile` itself costs a call, whatever the backend: the part of a compiled
model's time that a backend cannot remove, and that `tensortune.load`'s build (one call of
one VM, no dynamo) does not pay.

Per model, in a process of its own, timed in turn (interleaved rounds, medians):
- eager: the module called as it is;
- graph: the graph dynamo captured (an identity backend's), called directly with its inputs
  (the module's parameters among them);
- compiled: the module through `torch.compile` with that identity backend: dynamo's guards,
  its gathering of the parameters as inputs, the module's Python left outside the graph, and
  the graph;
- unguarded: compiled, called under `torch.compiler.set_stance(skip_guard_eval_unsafe=True)`
  (dynamo checks no guards: safe only where nothing the guards check changes between calls);
- free tensors: a copy of the module compiled under `torch._dynamo.config.install_free_tensors`
  (the parameters become attributes of the graph, not inputs dynamo gathers each call);
- floor: the module through `torch.compile` with a backend that returns the outputs computed
  once: dynamo's call alone, the graph's work left out;
- ours direct: what tensortune's backend returned for the graph (default mode, an empty
  database), called directly with dynamo's inputs; ours compiled: the module through
  `torch.compile` with that backend.
"dynamo" is compiled minus graph: what any backend's build pays on top of its own graph; "on
ours" the same for tensortune's backend (ours compiled minus ours direct). "guards": the check
of dynamo's guards for ours' frame alone, timed right after a call of ours direct (as a call
finds the caches) and, "warm", right after another check.
The guards read each parameter's tensor and the modules' dictionaries after the graph's work
has pushed them out of the caches; the floor, with no work between calls, does not see that.

Run alone on the machine:
    .venv/bin/python benchmarks/dynamo_cost.py [--models resnet18 ...] [--out benchmarks/results/dynamo_cost.txt]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from children import in_child
from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))
MODELS = ("resnet18", "resnet50", "mobilenet_v2", "bert_layer", "gpt_block", "vit_block")
ROUNDS = 9
ROUND_S = 0.3  # seconds each variant is called for, per round


def measure(name: str) -> dict:
    """The model's timings (seconds per call, by variant) and its graph's input count."""
    import torch

    from tensortune import backend as tensortune_backend
    from tensortune.model import zoo

    torch.set_num_threads(THREADS)
    module, inputs = zoo.ZOO[name]()
    seen = {}

    def identity(gm, example_inputs):
        seen["graph"], seen["inputs"] = gm, example_inputs
        return gm.forward

    def constant(gm, example_inputs):
        outputs = gm(*example_inputs)
        return lambda *_: outputs

    def tensortune(gm, example_inputs):
        seen["ours"], seen["ours inputs"] = ours_backend(gm, example_inputs), example_inputs
        return seen["ours"]

    compiled = torch.compile(module, backend=identity, dynamic=False)
    floor = torch.compile(zoo.ZOO[name]()[0], backend=constant, dynamic=False)
    free = torch.compile(zoo.ZOO[name]()[0], backend="eager", dynamic=False)
    ours = torch.compile(zoo.ZOO[name]()[0], backend=tensortune, dynamic=False)
    with torch.no_grad(), tempfile.TemporaryDirectory() as tmp:
        ours_backend = tensortune_backend(db=f"{tmp}/empty.db", progress=False)
        compiled(*inputs), floor(*inputs), ours(*inputs)
        graph, graph_inputs = seen["graph"], seen["inputs"]
        with torch._dynamo.config.patch(install_free_tensors=True):
            free(*inputs)
        calls = {"eager": lambda: module(*inputs), "graph": lambda: graph(*graph_inputs),
                 "compiled": lambda: compiled(*inputs), "unguarded": lambda: _unguarded(compiled, inputs),
                 "free tensors": lambda: free(*inputs), "floor": lambda: floor(*inputs),
                 "ours direct": lambda: seen["ours"](*seen["ours inputs"]), "ours compiled": lambda: ours(*inputs)}
        times = {key: [] for key in calls}
        for _ in range(ROUNDS):
            for key, call in calls.items():
                times[key].append(_seconds(call))
        times.update(_guard_seconds(ours._orig_mod, inputs, calls["ours direct"]))
    return {"model": name, "graph_inputs": len(graph_inputs), **{k: statistics.median(v) for k, v in times.items()}}


def _guard_seconds(module, inputs, call, repeats: int = 30) -> dict[str, list[float]]:
    """Seconds of one check of dynamo's guards for `module`'s compiled frame: right after
    `call()` ("guards": the caches as a call of the model leaves them) and right after another
    check ("guards warm")."""
    import inspect

    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    frame = {"self": module, **dict(zip(inspect.signature(module.forward).parameters, inputs))}
    entries = _debug_get_cache_entry_list(type(module).forward.__code__)
    guards = next(e.guard_manager for e in entries if e.guard_manager.check(frame))  # this module's entry
    times = {"guards": [], "guards warm": []}
    for _ in range(repeats):
        for key, before in (("guards", call), ("guards warm", lambda: guards.check(frame))):
            before()
            start = time.perf_counter()
            guards.check(frame)
            times[key].append(time.perf_counter() - start)
    return times


def _unguarded(compiled, inputs):
    import torch

    with torch.compiler.set_stance(skip_guard_eval_unsafe=True):
        return compiled(*inputs)


def _seconds(call) -> float:
    """Seconds per call of `call`, over ROUND_S of calls."""
    start, count = time.perf_counter(), 0
    while time.perf_counter() - start < ROUND_S:
        call()
        count += 1
    return (time.perf_counter() - start) / count


def table(rows: list[dict], head: list[str]) -> str:
    lines = head + ["every variant timed in turn in one process per model (%d rounds of %.1f s, medians); "
                    "dynamo = compiled - graph" % (ROUNDS, ROUND_S), "",
                    f"{'model':14}{'inputs':>7}{'eager ms':>10}{'graph ms':>10}{'compiled':>10}{'unguarded':>10}"
                    f"{'free t.':>10}{'floor ms':>10}{'dynamo ms':>11}{'of graph':>10}"
                    f"{'ours dir':>10}{'ours com':>10}{'on ours':>9}{'of ours':>9}{'guards ms':>10}{'warm ms':>9}"]
    for r in rows:
        dynamo, on_ours = r["compiled"] - r["graph"], r["ours compiled"] - r["ours direct"]
        lines.append(f"{r['model']:14}{r['graph_inputs']:>7}{r['eager'] * 1e3:>10.3f}{r['graph'] * 1e3:>10.3f}"
                     f"{r['compiled'] * 1e3:>10.3f}{r['unguarded'] * 1e3:>10.3f}{r['free tensors'] * 1e3:>10.3f}"
                     f"{r['floor'] * 1e3:>10.3f}{dynamo * 1e3:>11.3f}{dynamo / r['graph']:>10.1%}"
                     f"{r['ours direct'] * 1e3:>10.3f}{r['ours compiled'] * 1e3:>10.3f}"
                     f"{on_ours * 1e3:>9.3f}{on_ours / r['ours direct']:>9.1%}"
                     f"{r['guards'] * 1e3:>10.3f}{r['guards warm'] * 1e3:>9.3f}")
    return "\n".join(lines)


def zoo_models() -> list[str]:
    from tensortune.model import zoo

    return list(zoo.ZOO)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), metavar="MODEL", help="zoo models")
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    unknown = sorted(set(args.models) - set(zoo_models()))
    if unknown:
        sys.exit(f"error: no zoo model {', '.join(unknown)}; the zoo has: {', '.join(zoo_models())}")
    head = header(THREADS)
    rows = []
    for name in args.models:
        rows.append(in_child(__file__, name))
        if "failed" in rows[-1]:
            sys.exit(f"error: {name} failed: {rows[-1]['failed']}")
        print(f"{name} done", file=sys.stderr)
    publish(table(rows, head), args.out)


if __name__ == "__main__":
    main()
