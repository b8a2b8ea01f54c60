"""Operator families and their concrete shapes.

A family is one function returning TE tensors (inputs first, output last) plus a NumPy
reference and a FLOP count. Bytes moved are derived from the tensors, so they are never
written twice. `hand` gives the expert's schedules for a shape, as knob values of the spaces it names
("cpu-template", "cuda-template"): workloads know spaces by name only.
"""
from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import UserError


@dataclass(frozen=True)
class Family:
    name: str
    params: tuple[str, ...]
    compute: Callable[..., list]
    reference: Callable[..., np.ndarray] | None
    flops: Callable[..., int]
    # the expert's schedules, by the name of the space whose knob values they give
    hand: dict[str, Callable[..., dict]] = field(default_factory=dict)
    torch: Callable[..., object] | None = None  # the vendor implementation, on torch tensors
    doc: str = ""
    source: str | None = None  # the user's file that defines it (worker processes import it)


@dataclass(frozen=True)
class Workload:
    """A family at one shape; everything downstream is keyed by `key`."""

    family: Family
    shape: tuple[int, ...]
    preset: str | None = None
    _cache: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def name(self) -> str:
        return self.family.name

    @property
    def key(self) -> str:
        """'gemm(M=64,N=64,K=64)#<digest>': the shape, then a digest of the TensorIR and the
        TVM version, so that two files defining `op.py:f`, an edited operator (built-in ones
        included) or a new TVM never share records."""
        shape = ",".join(f"{p}={v}" for p, v in self.kwargs.items())
        return f"{self.name}({shape})#{self.digest}"

    @property
    def digest(self) -> str:
        """12 hex digits of the TensorIR's structural hash and the TVM version (which lowers
        it): equal only for the same computation under the same TVM."""
        if "digest" not in self._cache:
            import tvm
            import tvm_ffi

            text = f"{tvm_ffi.structural_hash(self.prim_func())}|tvm {tvm.__version__}"
            self._cache["digest"] = hashlib.sha1(text.encode()).hexdigest()[:12]
        return self._cache["digest"]

    @property
    def kwargs(self) -> dict[str, int]:
        return dict(zip(self.family.params, self.shape))

    def tensors(self) -> list:
        return self.family.compute(**self.kwargs)

    def prim_func(self):
        """The unscheduled TensorIR function; built once per process."""
        if "func" not in self._cache:
            from tvm import te

            self._cache["func"] = te.create_prim_func(self.tensors())
        return self._cache["func"]

    def io_specs(self) -> tuple[list[tuple[tuple[int, ...], str]], tuple[tuple[int, ...], str]]:
        """(input shapes and dtypes, output shape and dtype)."""
        specs = [(tuple(int(d) for d in t.shape), str(t.dtype)) for t in self.tensors()]
        return specs[:-1], specs[-1]

    @property
    def ident(self) -> tuple:
        """What a worker process needs to rebuild this workload (see `resolve`)."""
        return (self.name, self.shape, self.family.source)

    @property
    def flops(self) -> int:
        """0 when unknown (a user's operator without a FLOP count)."""
        return int(self.family.flops(**self.kwargs))

    @property
    def bytes(self) -> int:
        """Compulsory traffic: every input read once and the output written once."""
        ins, out = self.io_specs()
        return sum(math.prod(s) * itemsize(d) for s, d in [*ins, out])

    def reference(self, *inputs: np.ndarray) -> np.ndarray | None:
        return None if self.family.reference is None else self.family.reference(*inputs, **self.kwargs)


def itemsize(dtype: str) -> int:
    """Bytes per element of a TVM dtype (NumPy has no bfloat16)."""
    import tvm_ffi

    return max(1, tvm_ffi.dtype(dtype).bits // 8)


FAMILIES: dict[str, Family] = {}
PRESETS: dict[str, tuple[str, tuple[int, ...], str]] = {}


def workload(name: str, params: tuple[str, ...], flops: Callable[..., int],
             reference: Callable[..., np.ndarray] | None = None,
             hand: dict[str, Callable[..., dict]] | None = None,
             torch: Callable[..., object] | None = None) -> Callable:
    """Register a TE compute function as an operator family (see docs/own-operator.md)."""

    def register(compute: Callable[..., list]) -> Callable[..., list]:
        FAMILIES[name] = Family(name, params, compute, reference, flops, dict(hand or {}), torch,
                                (compute.__doc__ or "").strip())
        return compute

    return register


def preset(name: str, family: str, shape: tuple[int, ...], why: str) -> None:
    PRESETS[name] = (family, shape, why)


def parse_shape(text: str, params: tuple[str, ...]) -> tuple[int, ...]:
    """'M=64,N=32' or '64,32' (in the family's parameter order) -> (64, 32)."""
    parts = [p.strip() for p in re.split(r",|(?<=\d)x(?=\d)", text) if p.strip()]
    named = dict(p.split("=", 1) for p in parts if "=" in p)
    if named and len(named) != len(parts):
        raise UserError(f"bad shape '{text}': use all names ({'=..,'.join(params)}=..) or all plain numbers")
    if named:
        unknown = set(named) - set(params)
        missing = [p for p in params if p not in named]
        if unknown or missing:
            raise UserError(f"bad shape '{text}': expected {', '.join(params)}")
        parts = [named[p] for p in params]
    if len(parts) != len(params):
        raise UserError(f"bad shape '{text}': expected {len(params)} values ({', '.join(params)})")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise UserError(f"bad shape '{text}': values must be positive integers") from None
    if any(v < 1 for v in values):
        raise UserError(f"bad shape '{text}': values must be positive integers")
    return values


def get_workload(name: str, shape: str | None = None) -> Workload:
    """A preset name ('gemm-1024'), a family name with a shape ('gemm', 'M=64,N=64,K=64'), or
    a user's operator 'path/to/file.py:function' with a shape."""
    if ".py:" in name or name.endswith(".py"):
        name = load_user_family(name).name
    if name in PRESETS:
        family, values, _ = PRESETS[name]
        if shape is None:
            return Workload(FAMILIES[family], values, preset=name)
        name = family
    if name not in FAMILIES:
        known = ", ".join(sorted(FAMILIES) + sorted(PRESETS))
        raise UserError(f"unknown workload '{name}'; known: {known} (see 'tensortune list')")
    family = FAMILIES[name]
    if shape is None:
        raise UserError(f"workload '{name}' needs a shape: {','.join(p + '=..' for p in family.params)}", option="--shape")
    values = parse_shape(shape, family.params)
    _check_buildable(family, values)
    return Workload(family, values)


def _check_buildable(family: Family, values: tuple[int, ...]) -> None:
    try:
        family.compute(**dict(zip(family.params, values)))
    except (ValueError, AssertionError) as err:
        raise UserError(f"bad shape for {family.name}: {err}") from None


def check_memory(workload: Workload) -> None:
    """A UserError if measuring the workload cannot fit in this machine's free memory: a run
    holds the inputs, the kernel's output and the expected output (twice the tensors' bytes,
    about), before anything is built for a shape that could only fail."""
    need = 2 * workload.bytes
    free = _free_memory()
    if need > free:
        raise UserError(f"{workload.key} needs about {need / 1e9:.1f} GB to measure (its inputs and output take "
                        f"{workload.bytes / 1e9:.1f} GB), more than the {free / 1e9:.1f} GB free here; "
                        "choose a smaller shape")


def _free_memory() -> int:
    """Bytes of memory available to a new process (Linux's MemAvailable; else all of it)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def load_user_family(spec: str) -> Family:
    """Register the operator in 'file.py:function' (default function: the file's stem).

    The function takes the shape parameters and returns TE tensors, inputs first, output
    last. Optional, in the same file: `<function>_reference(*inputs, **shape)` (NumPy; without
    it kernels are checked against the unscheduled kernel's output) and
    `<function>_flops(**shape)`."""
    path, _, func_name = spec.partition(":")
    file = Path(path)
    func_name = func_name or file.stem
    if not file.is_file():
        raise UserError(f"no such operator file '{path}'")
    module_spec = importlib.util.spec_from_file_location(f"tensortune_user_{file.stem}", file)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        raise UserError(f"cannot import '{path}': {type(err).__name__}: {err}") from None
    compute = getattr(module, func_name, None)
    if not callable(compute):
        raise UserError(f"'{path}' has no function '{func_name}'; name it as FILE.py:FUNCTION")
    name = f"{file.stem}.{func_name}"
    params = tuple(inspect.signature(compute).parameters)
    FAMILIES[name] = Family(name, params, compute, getattr(module, f"{func_name}_reference", None),
                            getattr(module, f"{func_name}_flops", lambda **_: 0), doc=(compute.__doc__ or "").strip(),
                            source=str(file.resolve()))
    return FAMILIES[name]


def workload_from_key(key: str) -> Workload | None:
    """The workload a stored key ('gemm(M=8,N=8,K=8)') names, or None for an unknown family."""
    name, _, args = key.split("#")[0].partition("(")
    if name not in FAMILIES:
        return None
    values = dict(part.split("=") for part in args.rstrip(")").split(","))
    return Workload(FAMILIES[name], tuple(int(values[p]) for p in FAMILIES[name].params))
