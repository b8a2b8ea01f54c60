"""Targets by name, and the hardware fingerprint records are keyed by."""
from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass

from .errors import UserError

TARGETS = ("cpu",)


@dataclass(frozen=True)
class Target:
    name: str
    spec: dict  # TVM's dict form (strings like "llvm -mcpu=..." are rejected by TVM 0.27)
    threads: int

    @property
    def hardware(self) -> str:
        """Which machine a timing belongs to: CPU model, ISA level and thread count."""
        text = f"{_cpu_model()}|{self.spec.get('mcpu')}|{self.threads}"
        return f"{self.spec.get('mcpu')}-{self.threads}t-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def make_target(name: str, threads: int, mcpu: str | None = None) -> Target:
    if name not in TARGETS:
        raise UserError(f"unknown target '{name}'; known: {', '.join(TARGETS)}")
    from tvm.target.codegen import llvm_get_system_cpu

    # Without mcpu LLVM emits generic x86-64 (no AVX): kernels run about 2x slower.
    mcpu = mcpu or llvm_get_system_cpu()
    return Target(name, {"kind": "llvm", "mcpu": mcpu, "num-cores": threads}, threads)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
