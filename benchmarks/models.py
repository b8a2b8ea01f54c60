"""End to end on whole models, in one sitting: torch eager, torch.compile with inductor (its
default, with freezing: the CPU inference configuration PyTorch's own CPU CI runs, and
max-autotune with freezing), TVM untuned, MetaSchedule (its model pipeline, weights prepacked) and tensortune
with the same total trials, and tensortune through torch.compile (its backend, on an empty
database and from the records just tuned).

A model TVM takes only in part (hf_gpt2_tiny) is tuned as tune-model tunes it (its TVM regions,
the rest in PyTorch: deploy/split_model.py); MetaSchedule cannot take it.

Run alone on the machine (any other process distorts timings):
    .venv/bin/python benchmarks/models.py [--models resnet18 bert_layer] [--trials-per-task 32]
        [--torch-modes eager inductor freezing max_autotune] [--no-metaschedule]
        [--out benchmarks/results/models.txt]

Every variant runs with the same thread count: TVM's pool through TVM_NUM_THREADS (set before
TVM starts), torch through set_num_threads, each torch mode in a child process of its own (no
mode warms or compiles for another; tvm-notes says importing TVM pins the calling thread, which
was not seen here, but a child costs nothing). Ours (exported, loaded back), ours through the
backend, eager and inductor with freezing are timed in one fresh child process, in turn, as a
user's own process runs them: in the process that tuned, one build timed 8.5 ms when it was
chosen and 12.6 ms minutes later, and eager moved 7.7-9.8 ms between sittings. Latencies are
medians of ROUNDS rounds, each the median of warm repeats of at least 50 ms.
The total trial budget is trials-per-task x the model's tunable kernels, for both tuners.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import header

THREADS = len(os.sched_getaffinity(0))
os.environ["TVM_NUM_THREADS"] = str(THREADS)


# column -> (torch.compile mode, inductor's freezing: weights constant, packed, epilogues fused)
MODES = {"eager": (None, False), "inductor": ("default", False), "freezing": ("default", True),
         "max_autotune": ("max-autotune", True)}
ROUNDS = 3  # timings of eager, freezing, ours loaded and ours compiled, taken in turn in one child
IN_TURN = ("eager", "freezing")  # the anchors timed in turn with ours; the other modes in children of their own
MODE_TIMEOUT_S = 300  # max-autotune benchmarks its templates while compiling: it may take long here


def torch_latency(name: str, column: str) -> dict:
    """torch eager or one torch.compile mode in this (child) process: seconds per call (and
    the compile time), or the error."""
    import torch

    from tensortune.measure.runner import time_on_cpu
    from tensortune.model import zoo

    torch.set_num_threads(THREADS)
    module, inputs = zoo.ZOO[name]()
    mode, freezing = MODES[column]
    torch._inductor.config.freezing = freezing
    with torch.no_grad():
        try:
            call = module if mode is None else torch.compile(module, mode=mode)
            start = time.perf_counter()
            call(*inputs)
            compile_s = time.perf_counter() - start
            return {column: statistics.median(time_on_cpu(lambda: call(*inputs), 7, 0.05)),
                    f"{column}_compile_s": compile_s}
        except Exception as err:  # inductor needs a working C++ toolchain: report why not
            return {f"{column}_error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}


def torch_latencies(name: str, columns: list[str]) -> dict:
    """These torch columns, each in a child process of its own (see the module's docstring)."""
    out = {}
    for column in columns:
        try:
            child = subprocess.run([sys.executable, __file__, "--torch-child", name, column], capture_output=True,
                                   text=True, timeout=MODE_TIMEOUT_S)
            out.update(json.loads(child.stdout) if child.returncode == 0 else
                       {f"{column}_error": child.stderr.strip().splitlines()[-1][:200]})
        except subprocess.TimeoutExpired:
            out[f"{column}_error"] = f"not done in {MODE_TIMEOUT_S} s"
    return out


def metaschedule(model, target, trials: int, per_task: int, work_dir: str):
    """MetaSchedule's own model pipeline, as TVM documents it for a CPU: `relax.pipeline.
    static_shape_tuning_pipeline` with `cpu_weight_prepack=True` (weights marked layout-free
    before tuning, each tuned kernel's layout rewrite split off after and folded on the
    constant weights), from the same Relax module as ours, with our total trials and at most
    our trials per kernel; then the same lowering: (executable, wall seconds)."""
    import tvm
    from tvm import relax

    from tensortune.model.build import lowering
    from tensortune.search.metaschedule import _stdout_to_stderr
    from tensortune.target import load_intrinsics

    load_intrinsics(target.kind)  # as ours does: the other targets' intrinsics cost 25 s
    spec = tvm.target.Target(target.spec)
    start = time.perf_counter()
    with _stdout_to_stderr():
        pipeline = relax.pipeline.static_shape_tuning_pipeline(total_trials=trials, target=spec, work_dir=work_dir,
                                                               cpu_weight_prepack=True, max_trials_per_task=per_task)
        tuned = pipeline(model.source)
        executable = tvm.compile(tuned, target=spec, relax_pipeline=lowering(spec))
    return executable, time.perf_counter() - start


def bench(name: str, args) -> dict:
    from tensortune.db import Database
    from tensortune.deploy.split_model import build_split, end_to_end, import_split
    from tensortune.errors import NotConvertible
    from tensortune.measure.config import MeasureConfig
    from tensortune.model import build_model, export_model, import_model
    from tensortune.model.build import build_checked, fresh_case
    from tensortune.model.vm import vm_seconds
    from tensortune.model.profile import seconds_by_function, top_functions
    from tensortune.model import tune_model, zoo
    from tensortune.model.torch_ops import vendor_calls
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig

    target = make_target("cpu", THREADS)
    in_turn = [m for m in args.torch_modes if m in IN_TURN]
    row = {"model": name, "torch": torch_latencies(name, [m for m in args.torch_modes if m not in IN_TURN])}
    module, inputs = zoo.ZOO[name]()
    split = None
    try:
        model = import_model(name, module, inputs, target, torch_ops=True)
    except NotConvertible as why:  # TVM takes it in part: tuned as tune-model does (deploy/split_model.py)
        split = import_split(name, module, inputs, target, str(why))
        model = split.as_one()
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(f"{tmp}/bench.db")  # fresh: every trial measured in this sitting

        def tune(model):
            tunable = sum(k.tunable for k in model.kernels)
            row.update(kernels=len(model.kernels), tunable=tunable, trials=args.trials_per_task * tunable)
            return tune_model(model, target, db, TuneConfig(trials=row["trials"], space=args.space, seed=args.seed),
                              MeasureConfig(threads=THREADS), lambda states, done, wanted: print(
                                  f"  {name}: {done}/{wanted} trials", file=sys.stderr, flush=True))
        start = time.perf_counter()
        try:
            summary = tune(model)
        except NotConvertible as why:  # converts, but a kernel does not compile: as above
            split = import_split(name, module, inputs, target, str(why))
            model = split.as_one()
            summary = tune(model)
        row["ours_trials"] = summary.trials
        if split is None:
            built = build_model(model, target, db)
            row["ours_wall_s"] = time.perf_counter() - start
            case, _ = fresh_case(model, 0)
            row["tvm_untuned"] = vm_seconds(build_checked(model, target, {}, {}, seed=1).executable, case, target)
            row["ours_error"] = built.error
            row["torch_ops"] = built.torch_ops  # operations the kept build calls torch for
            row["torch_ops_possible"] = model.with_torch_ops.torch_ops if model.with_torch_ops else 0
            row["builds"] = built.timed  # each build's end-to-end seconds when the faster was chosen
            row["torch_share"] = 0.0
            row["calls"] = {**vendor_calls(built.build.mod), **tvm_kinds(built, target, db)}  # what the kept build runs where
            row["profile"] = top_functions(seconds_by_function(built.executable, case))  # what holds it back
            export_model(built, target, Path(tmp) / "tuned", db)
        else:
            _, builds = build_split(split, target, db)
            row["ours_wall_s"] = time.perf_counter() - start
            timing, row["torch_share"] = end_to_end(split, target, db)
            row["tvm_untuned"], row["ours"] = timing.default_s, timing.tuned_s
            row["ours_error"], row["torch_ops"], row["torch_ops_possible"], row["builds"] = max(
                b.error for b in builds), 0, 0, {}
            row["in_torch"] = split.parts.in_torch
            each = [{**vendor_calls(b.build.mod), **tvm_kinds(b, target, db)} for b in builds]
            row["calls"] = {kind: sum(calls[kind] for calls in each) for kind in each[0]} if each else {}
        db.close()
        if split is None:  # ours loaded, compiled and the anchors in one fresh process, in turn
            fresh = in_fresh_process(name, str(Path(tmp) / "tuned"), f"{tmp}/bench.db", in_turn)
            row["ours"], row["via_torch_compile"], row["compiled_regions"] = (fresh["loaded"], fresh["compiled"],
                                                                            fresh["regions"])
            row["backend_empty"], row["empty_regions"] = fresh["empty"], fresh["empty_regions"]
            row["torch"].update({k: v for k, v in fresh.items() if k.split("_compile_s")[0] in in_turn})
        else:
            with tempfile.TemporaryDirectory() as empty:  # nothing tuned: what a first try gets
                row["backend_empty"], row["empty_regions"] = via_torch_compile(name, target, f"{empty}/empty.db")
            row["via_torch_compile"], row["compiled_regions"] = via_torch_compile(name, target, f"{tmp}/bench.db")
            row["torch"].update(torch_latencies(name, in_turn))
        if args.metaschedule and split is None:
            executable, row["ms_wall_s"] = metaschedule(model, target, row["trials"], args.trials_per_task, f"{tmp}/ms")
            row["metaschedule"] = vm_seconds(executable, case, target)
    return row


def tvm_kinds(built, target, db) -> dict[str, int]:
    """Of the kept build's calls of TVM kernels: those whose tuned schedule reads the weight
    prepacked (its layout rewritten once at build, model/layout.prepack), and Winograd's
    convolutions (one output transform each, model/winograd.py)."""
    from tensortune.model.build import best_schedules

    calls = {kernel.name: kernel.calls for kernel in built.build.kernels}
    packed = sum(calls[name] for name, (func, _) in best_schedules(built.build, target, db).items()
                 if name not in built.fell_back and "layout_rewrite_preproc" in func.script())
    return {"tvm_packed": packed, "winograd": sum(n for name, n in calls.items() if "winograd_output" in name)}


def ours_child(name: str, folder: str, db: str, modes: str) -> dict:
    """In this (child) process, as a user's own process runs them: torch eager and the torch
    `modes` timed IN_TURN (comma-separated), the model compiled with the backend on an empty
    database and on the records in `db` (with what their regions kept) and the export in
    `folder` loaded back; each timed ROUNDS times, in turn, medians (eager moved 7.7-9.8 ms
    between sittings of one model here: only figures taken in turn are compared)."""
    import torch

    from tensortune.model import zoo
    from tensortune.model.vm import torch_seconds
    from tensortune.target import make_target

    import tensortune

    target = make_target("cpu", THREADS)
    torch._dynamo.reset()
    calls, out = {}, {}
    # nothing tuned, what a first try gets: a database of its own beside `db` (the parent's, removed with it)
    calls["empty"], out["empty_regions"] = compiled_model(name, target, str(Path(db).with_name("empty.db")))
    calls["compiled"], out["regions"] = compiled_model(name, target, db)
    calls["loaded"] = tensortune.load(Path(folder))
    for column in [m for m in modes.split(",") if m]:
        module, inputs = zoo.ZOO[name]()
        mode, torch._inductor.config.freezing = MODES[column]
        call = module if mode is None else torch.compile(module, mode=mode)
        start = time.perf_counter()
        with torch.no_grad():
            call(*inputs)
        calls[column], out[f"{column}_compile_s"] = call, time.perf_counter() - start
    inputs = zoo.ZOO[name]()[1]
    timings = {column: [] for column in calls}
    with torch.no_grad():
        for _ in range(ROUNDS):
            for column, call in calls.items():
                timings[column].append(torch_seconds(lambda: call(*inputs), target.threads))
    return {**out, **{column: statistics.median(t) for column, t in timings.items()}}


def in_fresh_process(name: str, folder: str, db: str, modes: list[str]) -> dict:
    """`ours_child` in a child process: the tuning process's pools and compiles do not move
    the figures (a build timed 8.5 ms when chosen timed 12.6 ms there minutes later)."""
    child = subprocess.run([sys.executable, __file__, "--ours-child", name, folder, db, ",".join(modes)],
                           capture_output=True, text=True)
    if child.returncode != 0:
        raise SystemExit(f"error: timing {name} loaded and compiled in a child failed: "
                         f"{child.stderr.strip().splitlines()[-1][:300]}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def via_torch_compile(name: str, target, db: str) -> tuple[float, str]:
    """Seconds per call of the model under torch.compile(backend=tensortune.backend(db)), timed
    in torch, and what its regions kept (`compiled_model`)."""
    from tensortune.model import zoo
    from tensortune.model.vm import torch_seconds

    import torch

    torch._dynamo.reset()
    compiled, regions = compiled_model(name, target, db)
    inputs = zoo.ZOO[name]()[1]
    return torch_seconds(lambda: compiled(*inputs), target.threads), regions


def compiled_model(name: str, target, db: str):
    """The model under torch.compile(backend=tensortune.backend(db)), compiled by a first call:
    its regions built from the records in `db`, the rest in PyTorch; and what the regions kept
    (each region's build and calls, or why it runs in PyTorch)."""
    import torch

    import tensortune
    from tensortune.model import zoo
    from tensortune.model.torch_ops import vendor_calls

    module, inputs = zoo.ZOO[name]()  # a module of its own: dynamo compiles it apart from any other
    backend = tensortune.backend(db=db, threads=target.threads)
    fast = torch.compile(module, backend=backend, dynamic=False)
    with torch.no_grad():
        fast(*inputs)
    kept = [f"{r.name}: {r.built.kept} build, calls "
            + "/".join(str(n) for n in vendor_calls(r.built.build.mod).values()) for r in backend.regions]
    return fast, "; ".join(kept + [f"{where} in PyTorch: {why}" for where, why in backend.in_eager.items()])


def table(rows: list[dict], args, head: list[str]) -> str:
    def ms(x):
        return f"{x * 1e3:9.3f}" if isinstance(x, float) else f"{'-':>9}"

    def ratio(a, b):
        return f"{a / b:7.2f}x" if isinstance(a, float) and isinstance(b, float) else f"{'-':>8}"

    anchors = [c for c in args.torch_modes if c != "eager"]
    lines = [*head, f"budget: {args.trials_per_task} trials per tunable kernel for tensortune and MetaSchedule; space {args.space}",
             "latency ms (median, warm); ratios: how many times faster ours is than the column (above 1: ours faster); "
             "inductor: torch.compile default; freezing: inductor with torch._inductor.config.freezing = True (CPU "
             "inference); max_autotune: max-autotune with freezing; untuned: TVM's default schedules, no torch calls; "
             "MS: MetaSchedule's static_shape_tuning_pipeline with cpu_weight_prepack; empty: ours via torch.compile(backend) on an empty "
             "database; ours: tuned, exported and loaded back (tensortune.load) in a fresh process, called from torch, timed in turn "
             "with eager, freezing, empty and compiled there (empty in the tuning process for a model TVM takes in part); compiled: ours via "
             "torch.compile(backend) from the records just tuned, /ours its speed over ours; calls: what the kept "
             "build calls, fused packed oneDNN layers / torch's attention / torch's plain operators / TVM kernels (of which p read their "
             "weight prepacked by the tuned schedule and w are Winograd convolutions; every TVM kernel on "
             "TVM's own thread pool, torch's on its OpenMP pool); in torch: share of eager time left in PyTorch", "",
             f"{'model':14}{'eager':>9}" + "".join(f"{c[:9]:>9}" for c in anchors)
             + f"{'untuned':>9}{'MS':>9}{'ours':>9}{'/eager':>8}" + "".join(f"{'/' + c[:7]:>8}" for c in anchors)
             + f"{'/untuned':>8}{'/MS':>8}{'empty':>9}{'/eager':>8}{'compiled':>9}{'/ours':>8}"
             f"{'ours s':>8}{'trials':>7}{'calls':>14}{'':9}{'in torch':>9}"]
    for r in rows:
        t = r["torch"]
        calls = r.get("calls", {})
        lines.append(f"{r['model']:14}{ms(t.get('eager'))}" + "".join(ms(t.get(c)) for c in anchors)
                     + f"{ms(r['tvm_untuned'])}{ms(r.get('metaschedule'))}{ms(r['ours'])}{ratio(t.get('eager'), r['ours'])}"
                     + "".join(ratio(t.get(c), r["ours"]) for c in anchors)
                     + f"{ratio(r['tvm_untuned'], r['ours'])}{ratio(r.get('metaschedule'), r['ours'])}"
                     f"{ms(r['backend_empty'])}{ratio(t.get('eager'), r['backend_empty'])}"
                     f"{ms(r['via_torch_compile'])}{ratio(r['ours'], r['via_torch_compile'])}"
                     f"{r['ours_wall_s']:8.0f}{r['trials']:7d}"
                     f"{calls.get('onednn', 0):>5d}/{calls.get('attention', 0)}/{calls.get('torch', 0)}/{calls.get('tvm', 0)}"
                     f"{'(' + str(calls['tvm_packed']) + 'p,' + str(calls['winograd']) + 'w)' if 'tvm_packed' in calls else '':<9}"
                     f"{r['torch_share']:9.0%}")
        for column in anchors:
            if f"{column}_error" in t:
                lines.append(f"  {column} failed: {t[f'{column}_error']}")
        lines.append(f"  ours matches torch eager within {r['ours_error']:.1e} (relative); builds timed for the choice: "
                     + (", ".join(f"{b} {seconds * 1e3:.3f} ms" for b, seconds in r["builds"].items()) or "-"))
        lines.append(f"  through the backend, empty database: {r.get('empty_regions') or '-'}; "
                     f"from the records just tuned: {r.get('compiled_regions') or '-'}")
        if "profile" in r:
            lines.append("  ours' time by function (profiled, top 5): "
                         + ", ".join(f"{name} {seconds * 1e3:.3f} ms {share:.0%}" for name, seconds, share in r["profile"]))
        if "ms_wall_s" in r:
            lines.append(f"  MetaSchedule tuned for {r['ms_wall_s']:.0f} s, ours {r['ours_wall_s']:.0f} s")
        if "in_torch" in r:
            lines.append(f"  TVM takes it in part; left in PyTorch: {r['in_torch']} (ours: the split model, MS cannot take it)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "bert_layer"])
    parser.add_argument("--trials-per-task", type=int, default=32)
    parser.add_argument("--space", default="sketch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-metaschedule", dest="metaschedule", action="store_false")
    parser.add_argument("--torch-modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--out", help="also write the table to this file")
    parser.add_argument("--torch-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--ours-child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.torch_child:
        print(json.dumps(torch_latency(*args.torch_child)))
        return
    if args.ours_child:
        print(json.dumps(ours_child(*args.ours_child)))
        return
    head = header(THREADS)  # now, before anything is written: the revision measured
    rows = []
    for name in args.models:  # the file is rewritten after each model: a stopped run keeps what it measured
        rows.append(bench(name, args))
        print(table(rows[-1:], args, []), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                f.write(table(rows, args, head) + "\n\n" + json.dumps(rows, indent=1, default=str) + "\n")
    print(table(rows, args, head))


if __name__ == "__main__":
    main()
