"""Targets by name, and the hardware fingerprint records are keyed by.

A CUDA target can be built for on any machine (nvcc compiles here); its kernels run on a GPU
of that architecture, here if there is one, else on a GPU host through a batch (see tuning/batch.py).
"""
from __future__ import annotations

import hashlib
import os
import platform
import re
from contextlib import contextmanager
from dataclasses import dataclass

from .errors import UserError

TARGETS = ("cpu", "cuda")


@dataclass(frozen=True)
class Target:
    """Where kernels run: a name (`cpu`, `cuda`), TVM's target dict, threads, and for a GPU its
    name and class; `hardware` fingerprints it so records never mix machines."""

    name: str
    spec: dict  # TVM's dict form (strings like "llvm -mcpu=..." are rejected by TVM 0.27)
    threads: int
    gpu: str = ""  # the GPU's name, where it is known (a local GPU, or a batch's results)
    device_class: str = ""  # a Ray cluster's device class (measure/cluster.py), timing on its devices

    @property
    def kind(self) -> str:
        """TVM's target kind: "llvm" (a CPU) or "cuda"."""
        return self.spec["kind"]

    @property
    def hardware(self) -> str:
        """Which machine a timing belongs to: CPU model, ISA level and thread count; or the
        GPU's architecture and name; or, tuning on a cluster, the device class timing it."""
        if self.device_class:
            return self.device_class
        if self.name == "cuda":
            return cuda_hardware(self.spec["arch"], self.gpu)
        text = f"{cpu_model()}|{self.spec.get('mcpu')}|{self.threads}"
        return f"{self.spec.get('mcpu')}-{self.threads}t-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


@dataclass(frozen=True)
class GpuLimits:
    """What a block may use; the defaults are sm_90's (static shared memory: 48 KiB)."""

    arch: str = "sm_90"
    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 49152
    max_registers_per_thread: int = 255
    registers_per_block: int = 65536

    @classmethod
    def from_target(cls, spec: dict) -> "GpuLimits":
        return cls(spec["arch"], spec["max_threads_per_block"], spec["max_shared_memory_per_block"])

    def target(self) -> dict:
        return {"kind": "cuda", "arch": self.arch, "max_threads_per_block": self.max_threads_per_block,
                "max_shared_memory_per_block": self.max_shared_memory_per_block}


def cuda_hardware(arch: str, gpu: str) -> str:
    return f"{arch}-" + ("-".join(gpu.lower().split()) or "unknown-gpu")


def default_threads() -> int:
    """The cores this process may use."""
    return len(os.sched_getaffinity(0))


def size_tvm_pool(threads: int) -> None:
    """Have TVM's CPU thread pool in this process run `threads` threads, unless the user set
    TVM_NUM_THREADS. TVM sizes its pool once, when a kernel first runs, from that variable;
    unset, it takes half the logical CPUs, as if each core had two hyperthreads: one thread on
    a 2-vCPU machine, where every kernel was tuned with two (a model then runs twice slower)."""
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))


def make_target(name: str, threads: int | None = None, mcpu: str | None = None, arch: str = "sm_90") -> Target:
    """The target `name` ("cpu" or "cuda"): kernels built for this machine's CPU (`mcpu`: LLVM's
    name of another) with `threads` threads each (default: the cores this process may use), or
    for a GPU of architecture `arch`."""
    threads = threads or default_threads()
    if name not in TARGETS:
        raise UserError(f"unknown target '{name}'; known: {', '.join(TARGETS)}")
    if name == "cuda":
        if not re.fullmatch(r"sm_\d+a?", arch):
            raise UserError(f"bad GPU architecture '{arch}'; use the form sm_90 (or sm_80, sm_90a, ...)")
        return Target(name, GpuLimits(arch=arch).target(), threads, local_gpu_name())
    from tvm.target.codegen import llvm_get_system_cpu

    # Without mcpu LLVM emits generic x86-64 (no AVX): kernels run about 2x slower.
    mcpu = mcpu or llvm_get_system_cpu()
    return Target(name, {"kind": "llvm", "mcpu": mcpu, "num-cores": threads}, threads)


def tvm_target(spec: dict):
    """TVM's Target for a spec; a GPU's host code is compiled for this CPU (LLVM)."""
    import tvm

    return tvm.target.Target(spec, host={"kind": "llvm"}) if spec["kind"] == "cuda" else tvm.target.Target(spec)


def compile_for(mod, spec: dict, **options):
    """`tvm.compile` for the target. On CUDA, a build that TVM 0.27's StorageRewrite breaks is
    built again with shared memory planned as one merged pool (as dynamic shared memory is):
    it shares a buffer between a float16 operand tile and a float32 accumulator tile, then
    fails ("tvm_access_ptr element type must match"), which broke most tensor-core schedules
    with float32 accumulation; the merged pool is not the default because it breaks some
    float32 kernels in turn (a missing buffer byte offset)."""
    import tvm

    try:
        return tvm.compile(mod, target=tvm_target(spec), **options)
    except tvm.error.InternalError as err:
        if spec["kind"] != "cuda" or "tvm_access_ptr element type must match" not in str(err):
            raise
    with tvm.transform.PassContext(config={"tirx.merge_static_smem": True}):
        return tvm.compile(mod, target=tvm_target(spec), **options)


def check_runnable(target: Target, model: str | None = None) -> None:
    """Kernels for this target can run on this machine, or a UserError saying what to do
    (for a model's kernels, `model` is how the user named it). A target timed on a Ray
    cluster's devices (`device_class`) runs there, not here."""
    if target.name == "cuda" and not target.gpu and not target.device_class:
        what = f"--model {model}" if model else "WORKLOAD ..."
        raise UserError(f"no CUDA GPU here (or no driver): build a batch with 'tensortune batch export {what} "
                        "--target cuda --out BATCH', run 'python BATCH/runner.py BATCH' on the GPU host, then "
                        "'tensortune batch import BATCH'")


def local_gpu_name() -> str:
    """The name of this machine's first CUDA GPU, or "" where there is none (or no driver)."""
    try:
        import tvm

        dev = tvm.cuda(0)
        return str(dev.device_name) if dev.exist else ""
    except Exception:  # no CUDA driver: TVM raises assorted errors
        return ""


def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo, else what Python's platform module knows)."""
    return cpuinfo("model name") or platform.processor() or platform.machine()


def cpuinfo(field: str) -> str:
    """The first value of `field` in /proc/cpuinfo ("model name", "flags"); "" where unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith(field)), "")
    except OSError:
        return ""


# MetaSchedule's rules for a CPU can only tensorize with the intrinsics of its own ISA (the x86
# ones for VNNI and AVX-512 rules, chosen from the target's features; the Arm ones for an
# aarch64 triple), and a GPU's with the CUDA ones; importing them all (as TuneContext does)
# parses every target's TVMScript and costs 25 s. CPU targets here are this machine's.
_CPU_INTRINSICS = ("x86",) if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686") else ("arm_cpu",)
_INTRINSICS = {"llvm": _CPU_INTRINSICS, "cuda": ("cuda",)}


def load_intrinsics(kind: str) -> None:
    """Register the tensor intrinsics MetaSchedule can use for a target kind (llvm or cuda),
    and only those: called before anything builds a MetaSchedule TuneContext."""
    import importlib
    import importlib.util
    import sys

    package = "tvm.s_tir.tensor_intrin"
    if package not in sys.modules:  # the package without its __init__, which imports every target's
        spec = importlib.util.find_spec(package)
        sys.modules[package] = importlib.util.module_from_spec(spec)
    missing = [name for name in _INTRINSICS.get(kind, ()) if f"{package}.{name}" not in sys.modules]
    if missing:
        with _frames_without_source():
            for name in missing:
                importlib.import_module(f"{package}.{name}")


@contextmanager
def _frames_without_source():
    """TVMScript's parser calls inspect.stack() for every function it parses and uses only the
    frames, but inspect reads each frame's source lines, scanning sys.modules per frame (slow
    once torch has loaded its thousands of modules): the CUDA intrinsics' 180 functions then
    take 9 s to parse instead of 4. Inside this block inspect.stack reads no source lines (a
    frame's code_context is None, which TVMScript takes for "not defined in a class", as
    every intrinsic is)."""
    import inspect

    stack = inspect.stack
    inspect.stack = lambda context=1: stack(0)
    try:
        yield
    finally:
        inspect.stack = stack
