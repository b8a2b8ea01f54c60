"""The seed GPU table: kernels built here, run on a GPU host that has only TVM's runtime,
the table printed here.

    .venv/bin/python benchmarks/gpu_seed.py prepare     # here: .gpu/ (batch, runtime, tvm-ffi wheel)
    bash benchmarks/gpu_seed.sh                         # on the GPU host (device tool: carry .gpu)
    .venv/bin/python benchmarks/gpu_seed.py report RESULTS.jsonl [--db tensortune.db]

`prepare` builds, for each seed GPU shape (gemm 1024^3, conv1d M=N=1024, depthwise conv
1x5x128x128 K3), naive, hand and --count candidates of the CUDA knob space for --arch
(nvcc runs here); then, for tensor cores, --tensor-core-count candidates each of fp16 and
bf16 GEMMs 4096^3 (our tensor-core template) and six fp16 convolutions of ResNet-50 (NHWC,
batch 8; the sketch space, MetaSchedule's tensor-core rules), timed there against torch at
the same precision (cuBLAS and cuDNN on tensor cores); and packs TVM's runtime without its compiler. The seed workloads run first: what
the device's time limit leaves unmeasured is lost, what was measured is kept. On the GPU host the batch
runner verifies and times every kernel (CUDA events, L2 flushed) and torch (cuBLAS with TF32
off, cuDNN) in the same run. `report` imports the results into the records database, prints
best vs naive, hand and torch per workload, and keeps the table and the raw timings (with
every point) under benchmarks/results/, so that strategies can be replayed offline on them.
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import tvm

from tensortune.measure.batch import MANIFEST, RESULTS
from tensortune.tuning.batch import export_batch, import_batch
from tensortune.db import Database
from tensortune.report.tables import batch_table
from tensortune.target import make_target
from tensortune.workloads import get_workload
from tensortune.workloads.half import RESNET50_FP16

SEED_GPU = ("gemm-1024", "conv1d-1024", "dwconv2d-seed")
TENSOR_CORE = ("gemm-4096-fp16", "gemm-4096-bf16", *RESNET50_FP16)  # each in its default_space
CARRY = Path(".gpu")  # what travels to the GPU host (ignored by git)
BATCH = Path("gpu-batch")  # the batch as built, kept here for `report`
RESULTS_DIR = Path("benchmarks/results")
# the TVM package without its compiler (259 MB) and without sources and headers
RUNTIME_SKIP = ("libtvm_compiler.so", "3rdparty", "src", "include", "web", "__pycache__")
TVM_FFI = "apache-tvm-ffi==0.1.14.post1"  # the version pinned in pyproject.toml, built for the host's Python


def prepare(count: int, tensor_core_count: int, arch: str, python: str) -> None:
    for old in (CARRY, BATCH):
        shutil.rmtree(old, ignore_errors=True)
    CARRY.mkdir()
    target = make_target("cuda", 1, arch=arch)
    tensor_cores = [get_workload(w) for w in TENSOR_CORE]
    export_batch([get_workload(w) for w in SEED_GPU] + tensor_cores, target, BATCH, count,
                 progress=lambda wl, n: print(f"built {n} candidates of {wl.preset}", flush=True),
                 counts={wl.key: tensor_core_count for wl in tensor_cores})
    with tarfile.open(CARRY / "batch.tgz", "w:gz") as tar:
        tar.add(BATCH, arcname="batch")
    package = Path(tvm.__file__).parent
    with tarfile.open(CARRY / "tvm-runtime.tgz", "w:gz") as tar:
        tar.add(package, arcname="runtime/tvm", filter=lambda info: None if Path(info.name).name in RUNTIME_SKIP else info)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", "--platform", "manylinux_2_28_x86_64",
                    "-d", str(CARRY), TVM_FFI], check=True)
    size = sum(f.stat().st_size for f in CARRY.iterdir()) / 2**20
    print(f"{CARRY}/ ready ({size:.1f} MiB): on the GPU host run 'bash benchmarks/gpu_seed.sh' with {CARRY} carried")


def report(results: Path, db: str) -> None:
    shutil.copy(results, BATCH / RESULTS)
    summaries = import_batch(BATCH, Database(db))
    lines = {r["id"]: r for r in map(json.loads, results.read_text().splitlines())}
    info = lines.get("baselines", {})
    table = batch_table(summaries, f"{info.get('device_name', '?')}; timer: {info.get('timer', '?')}")
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "gpu_seed.txt").write_text(table + "\n")
    manifest = json.loads((BATCH / MANIFEST).read_text())
    raw = [{k: c[k] for k in ("id", "workload", "label", "point")} | lines.get(c["id"], {})
           for c in manifest["candidates"]] + manifest["failed"] + [info]
    (RESULTS_DIR / "gpu_seed_results.json").write_text(json.dumps(raw))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--count", type=int, default=128, help="candidates per seed workload besides naive and hand")
    p.add_argument("--tensor-core-count", type=int, default=32, help="candidates per fp16 (tensor-core) workload")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--python", default="3.12", help="the GPU host's Python version (for the tvm-ffi wheel)")
    r = sub.add_parser("report")
    r.add_argument("results", type=Path)
    r.add_argument("--db", default="tensortune.db")
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.count, args.tensor_core_count, args.arch, args.python)
    else:
        report(args.results, args.db)


if __name__ == "__main__":
    main()
