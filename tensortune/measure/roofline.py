"""The fastest a kernel could possibly run on a target: a floor no honest timing goes under.

A correct kernel timed below the floor means the timing is wrong (or the kernel skipped work
that the checks missed), so the tuning round re-checks it before it counts (tuning/round.py). The floor
is an upper bound on every peak, not a realistic roofline: a correct kernel beating it must
be impossible, not just unlikely.

- CPU: every core at MAX_GHZ, with two vector FMA units (2 operations per lane per cycle
  each) as wide as the widest vector the CPU has (AVX-512, AVX2, else 128-bit), the lanes
  counted for the kernel's narrowest type; 8- and 16-bit types on a CPU with AMX get
  AMX_FACTOR times that. Memory: every byte the kernel must touch (each input read once,
  the output written once) moved at three vectors per cycle per core (two loads and a
  store, the L1 cache's peak).
- GPU: GPU_PEAK_FLOPS and GPU_PEAK_BYTES_S, above any GPU sold today (H200: about 990
  TFLOP/s dense fp16 on tensor cores, 4.8 TB/s of HBM).
"""
from __future__ import annotations

from ..target import cpuinfo
from ..workloads.registry import itemsize

MAX_GHZ = 6.0
AMX_FACTOR = 16
GPU_PEAK_FLOPS = 4e15
GPU_PEAK_BYTES_S = 40e12


def floor_s(workload, target) -> float:
    """The least seconds a call of the workload's kernel can take on the target; 0 where the
    kernel's work is unknown."""
    flops_s, bytes_s = ceilings(workload, target)
    return max(workload.flops / flops_s, workload.bytes / bytes_s)


def ceilings(workload, target) -> tuple[float, float]:
    """(operations per second, bytes per second) no kernel of this workload can beat on the
    target: the roofline's two ceilings, as generous as the module docstring says."""
    if target.name == "cuda":
        return GPU_PEAK_FLOPS, GPU_PEAK_BYTES_S
    ins, out = workload.io_specs()
    narrowest = min(itemsize(dtype) for _, dtype in [*ins, out])
    flags = set(cpuinfo("flags").split()) or {"avx512f", "amx_tile"}  # unknown: the widest, so the floor stays a floor
    vector_bytes = 64 if "avx512f" in flags else 32 if "avx2" in flags else 16
    per_cycle = 2 * 2 * vector_bytes // narrowest * (AMX_FACTOR if "amx_tile" in flags and narrowest <= 2 else 1)
    cycles_s = target.threads * MAX_GHZ * 1e9
    return per_cycle * cycles_s, 3 * vector_bytes * cycles_s


def position(workload, target, seconds: float) -> dict:
    """Where a kernel timed at `seconds` sits on the roofline: its arithmetic intensity, the
    rate it reached, the ceilings, which of them bounds it, and the share of that bound it
    reached (a lower bound on the true share: the ceilings are generous)."""
    flops_s, bytes_s = ceilings(workload, target)
    intensity = workload.flops / workload.bytes if workload.bytes else float("inf")
    bound = min(flops_s, intensity * bytes_s)
    reached = workload.flops / seconds
    return {"arithmetic_intensity": round(intensity, 3), "gflops": round(reached / 1e9, 3),
            "ceiling_gflops": round(flops_s / 1e9, 1), "ceiling_gbytes_s": round(bytes_s / 1e9, 1),
            "bound_by": "compute" if flops_s <= intensity * bytes_s else "memory",
            "share_of_bound": round(reached / bound, 4)}
