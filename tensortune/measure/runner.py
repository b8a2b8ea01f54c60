"""Load a compiled kernel, verify it, time it: with only NumPy and TVM's runtime.

This file imports nothing from tensortune, so a batch directory carries it (with vendor.py)
to a GPU host that has no TVM compiler and no network, where

    python runner.py BATCH_DIR [--timeout 60]

verifies and times every artifact of the batch, times the vendor baselines (torch, where
installed) in the same run, and writes BATCH_DIR/results.jsonl for `tensortune batch import`.
Each kernel runs in a worker process: a crash or a hang costs that candidate only, and
results are appended as they come, so nothing measured is lost. The tuner's own runner
(measure/tasks.py) calls the same `load` and `run_kernel`.

CUDA artifacts are a host library holding the kernels' CUDA source plus the binary nvcc made
from that source on the build machine; on load, TVM asks for the source to be compiled and
gets that binary instead, so no compiler is needed here. Timing on a GPU uses CUDA events
(through torch) with the L2 cache flushed before every repeat; without torch it falls back
to TVM's time_evaluator and says so.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

L2_FLUSH_BYTES = 256 << 20  # several times the L2 of current GPUs (H100/H200: 50 MB)


def load(path: str, device: str):
    """The kernel library at `path` (and, for CUDA, the binary beside it)."""
    import tvm

    if device == "cuda":
        _serve_binary(Path(path).with_suffix(".fatbin"))
    return tvm.runtime.load_module(path)


def _serve_binary(binary_path: Path) -> None:
    import tvm_ffi

    _load_cuda_runtime()
    binary = binary_path.read_bytes()

    def compile_cuda(code, *_):  # TVM asks to compile the embedded source: hand back nvcc's binary
        expected = binary_path.with_suffix(".sha256").read_text().strip()
        if hashlib.sha256(code.encode()).hexdigest() != expected:
            raise RuntimeError(f"{binary_path.name} was compiled from different CUDA source")
        return binary

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_cuda, override=True)


def _load_cuda_runtime() -> None:
    """TVM loads its CUDA runtime library when it registers its CUDA backend, which a
    runtime-only install may skip; load it directly then (it needs the CUDA driver)."""
    import ctypes

    import tvm
    import tvm_ffi

    if tvm_ffi.get_global_func("ffi.Module.load_from_bytes.cuda", allow_missing=True) is None:
        ctypes.CDLL(str(Path(tvm.__file__).parent / "lib" / "libtvm_runtime_cuda.so"), mode=ctypes.RTLD_GLOBAL)


def device_of(kind: str):
    import tvm

    return tvm.cuda(0) if kind == "cuda" else tvm.cpu(0)


def verify(got: np.ndarray, expected: np.ndarray, tolerance: float,
           bound: np.ndarray | None = None) -> tuple[float, str | None]:
    """(max error, the reason it is wrong or None). The error of an element is relative to
    max |expected| (`largest`), or where `bound` is given to the element's own bound (see
    checks.error_bound: tighter for a polynomial, so that a wrong element where values are small
    cannot hide under the largest element's bound; looser where the element is ill-conditioned).
    Equal elements count as exact,
    infinities included (a causal mask's -inf), and so do NaNs where NaN is expected (a square
    root of a negative draw); a NaN where a number is expected (an element never written) is
    an infinite error."""
    got, expected = got.astype(np.float64), expected.astype(np.float64)
    bound = largest(expected) if bound is None else bound
    # inf - inf is NaN (an infinity where another is expected: wrong); a nonzero error where
    # the bound is 0 is infinite
    with np.errstate(divide="ignore", invalid="ignore"):
        diff = np.where((got == expected) | (np.isnan(got) & np.isnan(expected)), 0.0, np.abs(got - expected))
        relative = np.where(diff == 0, 0.0, diff / bound)
    error = float(np.nan_to_num(relative, nan=np.inf).max(initial=0.0))
    return error, None if error <= tolerance else f"max relative error {error:.2e} exceeds {tolerance:.1e}"


def largest(expected: np.ndarray) -> float:
    """max |expected| over its finite elements (1 where that is 0 or there are none)."""
    finite = np.abs(expected[np.isfinite(expected)].astype(np.float64))
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


def numpy_dtype(name) -> np.dtype:
    """NumPy's dtype for a TVM dtype name; bfloat16, which NumPy lacks, from ml_dtypes (as in
    TVM's own tensors)."""
    if str(name) == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def is_float(dtype) -> bool:
    return str(dtype) == "bfloat16" or np.dtype(dtype).kind == "f"


def to_torch(array: np.ndarray, device: str = "cpu"):
    """A torch tensor of the array; bfloat16 (ml_dtypes', which torch does not take) through
    its bits."""
    import torch

    if str(array.dtype) == "bfloat16":
        return torch.from_numpy(array.view(np.uint16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(array).to(device)


def unwritten(shape, dtype) -> np.ndarray:
    """The output's fill before a kernel runs: NaN, or for integers their largest value, so
    that an element the kernel never writes cannot pass for a computed one."""
    dtype = numpy_dtype(dtype)
    if is_float(dtype):
        return np.full(shape, np.nan, dtype)
    return np.full(shape, True if dtype.kind == "b" else np.iinfo(dtype).max, dtype)


GUARD_BYTES = 4096  # on each side of the output (a multiple of TVM's 64-byte data alignment)
CANARY = 0xA5  # the guards' bytes: a write out of bounds changes some


@dataclass(frozen=True)
class Case:
    """Everything a kernel is checked on (see measure/checks.py): the timed draw (`inputs`,
    `expected`, `tolerance`, and the per-element `bound` or None), the other draws as (layer
    name, inputs, expected, tolerance, bound), and the inputs the kernel may write (a model
    kernel's other outputs). Made by measure/tasks.py; saved into a batch (`save`) so that a
    host runs exactly the checks this machine runs."""

    inputs: list
    expected: np.ndarray
    tolerance: float
    bound: np.ndarray | None = None
    draws: tuple = ()
    written: tuple[int, ...] = ()

    def save(self, path: Path) -> None:
        arrays = {f"input{i}": a for i, a in enumerate(self.inputs)} | {"expected": self.expected}
        if self.bound is not None:
            arrays["bound"] = self.bound
        layers = []
        for j, (layer, inputs, expected, tolerance, bound) in enumerate(self.draws):
            arrays |= {f"draw{j}_input{i}": a for i, a in enumerate(inputs)} | {f"draw{j}_expected": expected}
            if bound is not None:
                arrays[f"draw{j}_bound"] = bound
            layers.append([layer, len(inputs), tolerance])
        meta = {"tolerance": self.tolerance, "inputs": len(self.inputs), "draws": layers, "written": list(self.written)}
        np.savez(path, meta=np.array(json.dumps(meta)), **arrays)

    @classmethod
    def load(cls, path: Path) -> "Case":
        data = np.load(path)
        meta = json.loads(str(data["meta"]))
        optional = lambda name: data[name] if name in data.files else None  # noqa: E731
        draws = tuple((layer, [data[f"draw{j}_input{i}"] for i in range(n)], data[f"draw{j}_expected"], tolerance,
                       optional(f"draw{j}_bound")) for j, (layer, n, tolerance) in enumerate(meta["draws"]))
        return cls([data[f"input{i}"] for i in range(meta["inputs"])], data["expected"], meta["tolerance"],
                   optional("bound"), draws, tuple(meta["written"]))


def run_kernel(lib, device: str, case: Case, timing, phase=lambda: None) -> dict:
    """Verify, then time. The timed draw is checked first, then each of the case's other
    draws. On every draw the output starts unwritten (NaN), sits between guard bytes (a write
    out of bounds is caught) and the inputs must be unchanged after the call (but those the
    case lets it write). `timing` has repeat, min_repeat_ms, budget_s and cutoff_s. `phase()`
    is called as each checked call, and the timing, begins (a worker restarts its time limit
    there: the limit is per call, not for all the checks)."""
    dev = device_of(device)
    phase()
    args, once, error, wrong = _checked_call(lib, dev, case.inputs, case.expected, case.tolerance, case.bound,
                                             case.written)
    for layer, layer_inputs, layer_expected, layer_tolerance, layer_bound in case.draws:
        if wrong:
            break
        phase()
        _, _, _, wrong = _checked_call(lib, dev, layer_inputs, layer_expected, layer_tolerance, layer_bound,
                                       case.written)
        wrong = wrong and f"{layer} draw: {wrong}"
    if wrong:
        return {"status": "wrong", "reason": wrong}
    if once > timing.cutoff_s:  # hopeless: timing it carefully would only cost search time
        return {"status": "ok", "runs": [once], "error": error,
                "note": f"timed once: slower than the cutoff {timing.cutoff_s * 1e3:.3g} ms"}
    phase()
    return {"status": "ok", "runs": time_kernel(lib, device, args, once, timing), "error": error}


def _checked_call(lib, dev, inputs, expected, tolerance, bound, written=()):
    """One call on fresh tensors: (the arguments, seconds, error, why it is wrong or None)."""
    import tvm

    args = [tvm.runtime.tensor(a, dev) for a in inputs]
    guarded, out = _guarded_output(expected.shape, expected.dtype, dev)
    start = time.perf_counter()
    lib["main"](*args, out)
    dev.sync()
    once = time.perf_counter() - start
    if any(not _same(arg.numpy(), a) for i, (arg, a) in enumerate(zip(args, inputs)) if i not in written):
        return args + [out], once, np.inf, "it wrote into an input"
    if guarded is not None and guarded.touched():
        return args + [out], once, np.inf, "it wrote outside its output"
    error, wrong = verify(out.numpy(), expected, tolerance, bound)
    return args + [out], once, error, wrong


class _Guards:
    """A CPU output inside a larger allocation whose bytes around it are a known pattern."""

    def __init__(self, fill: np.ndarray):
        self.raw = np.full(fill.nbytes + 2 * GUARD_BYTES + 64, CANARY, np.uint8)
        self.start = GUARD_BYTES + (-self.raw.ctypes.data) % 64  # TVM's kernels need 64-byte alignment
        self.end = self.start + fill.nbytes
        self.raw[self.start:self.end] = fill.reshape(-1).view(np.uint8)
        self.view = self.raw[self.start:self.end].view(fill.dtype).reshape(fill.shape)

    def touched(self) -> bool:
        return bool((self.raw[:self.start] != CANARY).any() or (self.raw[self.end:] != CANARY).any())


def _guarded_output(shape, dtype, dev):
    """(the guards or None, the output tensor). On a CPU the output is a zero-copy view inside
    guard bytes (TVM refuses a tensor with an offset, so numpy owns the memory); a GPU's
    output has no guards."""
    import tvm

    fill = unwritten(shape, dtype)
    if dev.dlpack_device_type() != tvm.cpu(0).dlpack_device_type():
        return None, tvm.runtime.tensor(fill, dev)
    guards = _Guards(fill)
    if fill.dtype.kind in "fiub":
        return guards, tvm.runtime.from_dlpack(guards.view)
    # DLPack has no bfloat16 (ml_dtypes'): pass the bits as unsigned integers, then view them as it
    bits = tvm.runtime.from_dlpack(guards.view.view(f"uint{8 * fill.dtype.itemsize}"))
    return guards, bits._create_view(fill.shape, str(fill.dtype))


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.tobytes() == b.tobytes()  # bit for bit: NaN payloads and signed zeros included


def time_kernel(lib, device: str, args, once: float, timing) -> list[float]:
    """Seconds per call, one per repeat. CPU: TVM's time_evaluator, warm caches, each repeat
    lasting min_repeat_ms. GPU: one launch per repeat between CUDA events, L2 flushed."""
    if device == "cuda" and _torch_cuda():  # launches adding up to ~0.2 s: 20 to 200 of them
        return time_on_gpu(lambda: lib["main"](*args), max(20, min(200, int(0.2 / max(once, 1e-9)))))
    # a very slow kernel (a naive GEMM takes seconds) gets fewer repeats, never under 3
    repeat = max(3, min(timing.repeat, int(timing.budget_s / max(once, 1e-9))))
    timer = lib.time_evaluator("main", device_of(device), number=1, repeat=repeat, min_repeat_ms=timing.min_repeat_ms)
    return [float(r) for r in timer(*args).results]


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def time_on_gpu(call, repeat: int) -> list[float]:
    """CUDA events around single launches, the L2 flushed before each (cold-cache timing:
    the operands come from HBM, as they do for one operator inside a model)."""
    import torch

    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(repeat)]
    for start, end in events:
        flush.zero_()
        start.record()
        call()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) / 1e3 for start, end in events]


def time_on_cpu(call, repeat: int, min_repeat_s: float, budget_s: float = 10.0,
                lost_s: float = float("inf")) -> list[float]:
    """Seconds per call, one per repeat: a warm-up call, then repeats each lasting at least
    `min_repeat_s` (the rule of TVM's time_evaluator), fewer (never under 3) for slow calls;
    only the warm-up call's where it took over `lost_s` (a build that slow has lost already)."""
    start = time.perf_counter()
    call()
    once = max(time.perf_counter() - start, 1e-9)
    if once > lost_s:
        return [once]
    number = max(1, int(min_repeat_s / once))
    runs = []
    for _ in range(max(3, min(repeat, int(budget_s / (once * number))))):
        start = time.perf_counter()
        for _ in range(number):
            call()
        runs.append((time.perf_counter() - start) / number)
    return runs


# ---- a batch: manifest.json, cases/*.npz, kernels/*, results.jsonl ----

def run_batch(batch: Path, timeout_s: float, baselines: bool = True) -> Path:
    """Every candidate of the batch in worker processes (restarted after a crash or a hang),
    then the vendor baselines (unless `baselines` is False). Returns the results file."""
    manifest = json.loads((batch / "manifest.json").read_text())
    results = batch / "results.jsonl"
    done = set(read_results(results))
    todo = [c["id"] for c in manifest["candidates"] if c["id"] not in done]
    print(f"{len(todo)} of {len(manifest['candidates'])} candidates to run on {manifest['device']}", file=sys.stderr)
    while todo:
        todo = _supervise(batch, todo, results, timeout_s)
    if baselines and "baselines" not in done:
        _append(results, {"id": "baselines", **_baselines(manifest, batch)})
    return results


def _supervise(batch: Path, todo: list[str], results: Path, timeout_s: float) -> list[str]:
    """Run `todo` in one worker until it finishes, crashes or hangs; the rest is returned."""
    progress, log = batch / "progress", batch / "worker.log"
    progress.write_text("")
    with open(log, "w") as stderr:  # a file, not a pipe: a chatty worker cannot block on it
        worker = subprocess.Popen([sys.executable, __file__, str(batch), "--worker", *todo], stderr=stderr)
    started, last = None, time.monotonic()
    while worker.poll() is None:
        time.sleep(0.05)
        current = (progress.read_text().split() or [None])[-1]
        if current != started:
            started, last = current, time.monotonic()
        elif started and time.monotonic() - last > timeout_s:
            worker.kill()
            worker.wait()
            _append(results, {"id": started, "status": "run_timeout", "reason": f"no result within {timeout_s:g} s"})
            return todo[todo.index(started) + 1:]
    finished = read_results(results)
    rest = [c for c in todo if c not in finished]
    if worker.returncode != 0 and rest:
        crashed = rest[0] if started is None or started not in rest else started
        reason = _death(worker.returncode, log.read_text(errors="replace").splitlines())
        _append(results, {"id": crashed, "status": "run_crash", "reason": reason})
        rest.remove(crashed)
    return rest


def read_results(results: Path) -> dict[str, dict]:
    """The results file by id; a line cut short (the host itself died mid-write) counts as
    not run."""
    out = {}
    for line in results.read_text().splitlines() if results.exists() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        out[record["id"]] = record
    return out


def _death(returncode: int, stderr: list[str]) -> str:
    """Why a worker died, in one line: the signal, or its last error message."""
    if returncode < 0:
        return f"the kernel's process died: {signal.Signals(-returncode).name}"
    if returncode == 139 or any("Segfault" in line for line in stderr):
        return "the kernel's process died: SIGSEGV"
    errors = [line.strip() for line in stderr if "Error" in line]
    return (errors or [f"the kernel's process exited with code {returncode}"])[-1][:300]


def _worker(batch: Path, ids: list[str]) -> None:
    import tvm  # noqa: F401  (seconds on a slow machine: before any kernel's clock starts)

    manifest = json.loads((batch / "manifest.json").read_text())
    candidates = {c["id"]: c for c in manifest["candidates"]}
    timing = SimpleNamespace(**manifest["timing"])
    cases = {}
    for name in dict.fromkeys(candidates[cid]["case"] for cid in ids):  # before any kernel's clock starts
        try:
            cases[name] = _case(batch, name, manifest)
        except Exception as err:  # no torch to draw a recipe: every kernel of the case says so
            cases[name] = err
    for cid in ids:
        with open(batch / "progress", "a") as f:
            f.write(cid + "\n")
        c = candidates[cid]
        try:
            if isinstance(cases[c["case"]], Exception):
                raise cases[c["case"]]
            lib = load(str(batch / c["artifact"]), manifest["device"])
            out = run_kernel(lib, manifest["device"], cases[c["case"]], timing)
        except Exception as err:  # a kernel that fails to load or launch: its own result
            out = {"status": "run_error", "reason": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
        _append(batch / "results.jsonl", {"id": cid, **out})


_CASES: dict = {}


def _case(batch: Path, name: str, manifest: dict) -> Case:
    """A case from its file, or drawn here from its recipe with the vendor implementation as
    the reference (see batch.py)."""
    if name not in _CASES:
        spec = manifest["cases"][name]
        if "recipe" in spec:
            checks = _beside(batch, "checks")
            recipe = checks.Recipe.from_json(spec["recipe"])
            reference = _vendor_reference(batch, spec, recipe.out_dtype, manifest["device"])
            _CASES[name] = checks.make_case(recipe, reference)
        else:
            _CASES[name] = Case.load(batch / "cases" / f"{name}.npz")
    return _CASES[name]


def _beside(batch: Path, name: str):
    """A module `tensortune batch export` copied beside this file (vendor.py, checks.py)."""
    import importlib

    if str(batch) not in sys.path:
        sys.path.insert(0, str(batch))
    return importlib.import_module(name)


def _vendor_reference(batch: Path, spec: dict, out_dtype: str, device: str):
    """The vendor implementation as a reference: run in float64 (its own rounding then
    negligible, as the NumPy references are run) and rounded once to the output's dtype."""
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"drawing the case of {spec['workload']} needs torch, which is not installed here") from None
    fn = _beside(batch, "vendor").TORCH[spec["family"]]
    device = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"

    def reference(inputs: list) -> np.ndarray:
        tensors = [to_torch(a.astype(np.float64) if is_float(a.dtype) else a, device) for a in inputs]
        with torch.no_grad():
            out = fn(*tensors, **spec["kwargs"])
        return out.cpu().numpy().astype(numpy_dtype(out_dtype))

    return reference


def _baselines(manifest: dict, batch: Path) -> dict:
    """torch on the same device, per case: cuBLAS with TF32 off for fp32, cuDNN for convs."""
    info = {"device_name": _device_name(manifest["device"]), "timer": _timer(manifest["device"]), "torch": {}}
    try:
        import torch
    except ImportError:
        return info | {"note": "torch is not installed: no vendor baselines"}
    vendor = _beside(batch, "vendor")

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = "cuda" if manifest["device"] == "cuda" else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        return info | {"note": "torch sees no CUDA GPU: no vendor baselines"}
    for name, spec in manifest["cases"].items():
        fn = vendor.TORCH.get(spec["family"])
        if fn is None:
            continue
        case = _case(batch, name, manifest)
        tensors = [to_torch(a, device) for a in case.inputs]
        with torch.no_grad():
            def call():
                return fn(*tensors, **spec["kwargs"])
            error, wrong = verify(call().cpu().numpy(), case.expected, case.tolerance)
            runs = time_on_gpu(call, 50) if device == "cuda" else time_on_cpu(call, 15, 0.05)
        info["torch"][name] = {"runs": runs, "error": error, "wrong": wrong}
    return info


def _device_name(kind: str) -> str:
    if kind == "cuda":
        try:
            return str(device_of("cuda").device_name)
        except Exception as err:  # no driver: say so rather than lose the results line
            return f"unknown GPU ({type(err).__name__})"
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "cpu")


def _timer(kind: str) -> str:
    if kind != "cuda":
        return "TVM time_evaluator, warm caches"
    return "CUDA events, L2 flushed" if _torch_cuda() else "TVM time_evaluator, warm L2 (torch missing)"


def _append(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def main() -> None:
    parser = argparse.ArgumentParser(description="Verify and time a batch of compiled kernels.")
    parser.add_argument("batch", type=Path)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one kernel may take")
    parser.add_argument("--no-baselines", action="store_true", help="skip timing the vendor library")
    parser.add_argument("--worker", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args.batch, args.worker)
        return
    if not (args.batch / "manifest.json").exists():
        sys.exit(f"error: {args.batch} is not a batch directory (no manifest.json); make one with `tensortune batch export`")
    print(run_batch(args.batch, args.timeout, not args.no_baselines))


if __name__ == "__main__":
    main()
