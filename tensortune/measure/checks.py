"""What a candidate is checked on, in layers, besides the timed draw (see runner.run_kernel).

- **Exact identity** (operators of +, -, x, max and min only): two draws of small random
  integers, their magnitude chosen from the dtype's mantissa and the reduction length so that
  every partial sum is exact in any order; the output must equal the reference bit for bit.
  A kernel computing another polynomial passes one draw with probability at most
  degree/range (Schwartz-Zippel), so a wrong kernel that survives both is very unlikely.
- **Differential**: besides the timed uniform draw, a draw of values distinct per index (a
  swapped or shifted index reads a different value), a draw of large magnitudes (a clamp,
  an overflow or a lower-precision accumulation shows) and one of small values, mostly
  negative, with signed zeros among them (a flush to zero, a max started from 0, a lost
  sign shows). Where the operator is a polynomial each element gets its own bound, from the
  reference run on |inputs| (the sum of absolute terms): a wrong edge element cannot hide
  under the largest element's bound.

Structural checks (inputs unchanged, nothing written outside the output, every element
written) run on every draw in runner.run_kernel. Integer outputs are always compared exactly.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

try:
    from .runner import Case, is_float, largest, numpy_dtype
except ImportError:  # copied beside runner.py into a batch, which draws large cases there
    from runner import Case, is_float, largest, numpy_dtype

EXACT_DRAWS = 2
# TVMScript calls that keep integer arithmetic exact: structure, casts, selections, max/min
_EXACT_CALLS = re.compile(r"T\.(max|min|max_value|min_value|floordiv|floormod|truncdiv|truncmod|if_then_else|"
                          r"Select|Cast|axis\.\w+|sblock\w*|reads|writes|init|where|grid|serial|parallel|vectorized|"
                          r"unroll|alloc_buffer|Buffer|match_buffer|prim_func|func_attr|(u?int|float|bfloat)\d+|bool|"
                          r"handle|ptr|let|LetStmt|likely|decl_buffer|attr)\b")
_FLOAT_CONSTANT = re.compile(r"T\.(?:float|bfloat)\d+\(([^)]*)\)")
MANTISSA_BITS = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
LARGEST = {"float16": 65504.0, "bfloat16": 3.38e38, "float32": 3.40e38, "float64": 1.79e308}
LARGE = 1e4  # the large draw's magnitude, where the output's dtype leaves room for it
SMALL = 1e-3  # the small draw's magnitude


def exact_applies(func) -> str | None:
    """None if the function only adds, subtracts, multiplies, selects and takes max/min (the
    exact identity test applies); else what rules it out, e.g. 'T.exp' or 'division'."""
    text = func.script()
    body = text[text.index("\n", text.index("def ")):]  # past the signature's buffer types
    if re.search(r"[^/]/[^/]", body):
        return "division"
    for call in re.findall(r"T\.[\w.]+(?=\()", body):
        if not _EXACT_CALLS.fullmatch(call):
            return call
    for value in _FLOAT_CONSTANT.findall(body):
        number = float(value.strip("'\""))
        if math.isfinite(number) and number != int(number):
            return f"the constant {value}"
    return None


def epsilon(dtype: str) -> float:
    """The dtype's machine epsilon (NumPy has no bfloat16)."""
    return 2.0 ** (1 - MANTISSA_BITS[dtype]) if dtype in MANTISSA_BITS else float(np.finfo(dtype).eps)


def exact_magnitude(dtype: str, terms: int, degree: int = 2) -> int:
    """Largest integer magnitude a such that `terms` products of `degree` numbers in [-a, a],
    and all their partial sums, are exact in the dtype, with two bits to spare (0: none is)."""
    bits = MANTISSA_BITS.get(dtype)
    if bits is None:
        return 0
    room = (1 << (bits - 2)) // max(1, terms)
    magnitude = int(round(room ** (1 / degree)))
    while magnitude > 0 and magnitude ** degree > room:  # the root's rounding, either way
        magnitude -= 1
    return magnitude


def draw(specs, floats, rng: np.random.Generator | None = None) -> list[np.ndarray]:
    """One input per (shape, dtype): `floats(shape, n)` (float64 values for the n-th input)
    cast to a float input's dtype; integer inputs (indices, as often as not) 0, 1 or 2 (at
    random, or cycling without `rng`), booleans at random."""
    out = []
    for n, (shape, dtype) in enumerate(specs):
        if is_float(dtype):
            out.append(floats(shape, n).astype(numpy_dtype(dtype)))
        elif rng is None:
            out.append((np.arange(math.prod(shape), dtype=np.int64).reshape(shape) % 3).astype(dtype))
        else:
            out.append(rng.random(shape) < 0.5 if np.dtype(dtype).kind == "b" else
                       rng.integers(0, 3, shape).astype(dtype))
    return out


def integer_draw(rng: np.random.Generator, specs, magnitude: int) -> list[np.ndarray]:
    """Random integers in [-magnitude, magnitude] for float inputs."""
    return draw(specs, lambda shape, _: rng.integers(-magnitude, magnitude + 1, shape).astype(np.float64), rng)


def large_magnitude(dtype: str, reduction_length: int, polynomial: bool) -> float:
    """The large draw's magnitude: for a polynomial LARGE, or less where L products of two
    such values would come near the dtype's largest; otherwise (it may exponentiate) half
    the log of the largest, so that exp of a sum of two stays finite."""
    largest = LARGEST.get(dtype, LARGEST["float64"])
    if not polynomial:
        return math.log(largest) / 2
    return min(LARGE, math.sqrt(largest / max(1, reduction_length)) / 4)


def large_draw(rng: np.random.Generator, specs, magnitude: float) -> list[np.ndarray]:
    """Uniform in [-magnitude, magnitude] for float inputs."""
    return draw(specs, lambda shape, _: rng.uniform(-magnitude, magnitude, shape), rng)


def small_draw(rng: np.random.Generator, specs) -> list[np.ndarray]:
    """Float inputs in [-SMALL, 0], one in eight of them -0.0 or +0.0."""
    def floats(shape, _):
        values = -rng.uniform(0, SMALL, shape)
        zeros = rng.random(shape) < 0.125
        values[zeros] = np.where(rng.random(int(zeros.sum())) < 0.5, -0.0, 0.0)
        return values

    return draw(specs, floats, rng)


def distinct_draw(specs) -> list[np.ndarray]:
    """Values that differ from element to element and from input to input, in (-1, 1): an
    index swapped, mirrored or shifted reads a value it should not."""
    def floats(shape, n):
        ramp = (np.arange(math.prod(shape), dtype=np.float64) * 0.618034 + 0.1 * (n + 1)) % 1.0  # golden-ratio steps
        return (ramp * 2 - 1).reshape(shape)

    return draw(specs, floats)


def written_inputs(func) -> tuple[int, ...]:
    """Positions of the parameters before the last that the function stores into: the other
    outputs of a kernel that writes several (a model's split), not inputs it may not touch."""
    text = func.script()
    names = re.findall(r"(\w+): T\.Buffer", text[:text.index("):\n", text.index("def "))])
    stored = set(re.findall(r"^\s+(\w+)\[[^\]]*\] = ", text, flags=re.M))
    return tuple(i for i, name in enumerate(names[:-1]) if name in stored)


@dataclass(frozen=True)
class Recipe:
    """What a workload's checks are drawn from, the workload itself aside: what needs TVM to
    know (shapes, tolerance, whether it is a polynomial, the draws' magnitudes) worked out
    beforehand. Plain data, so that a batch can carry it instead of the arrays (see
    batch.py) and a host draws exactly the same case there with `make_case`."""

    specs: tuple  # ((shape, dtype), ...) of the inputs
    out_dtype: str
    seed: int
    tolerance: float
    polynomial: bool
    large: float  # the large draw's magnitude
    exact: int  # the exact draws' magnitude (0: no exact draws)
    written: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, data: dict) -> "Recipe":
        specs = tuple((tuple(shape), dtype) for shape, dtype in data["specs"])
        return cls(**data | {"specs": specs, "written": tuple(data["written"])})


Reference = Callable[[list], np.ndarray]  # inputs -> the expected output, in the output's dtype


def make_case(recipe: Recipe, reference: Reference) -> Case:
    """Every check layer for one recipe: the timed uniform draw (from `seed`), then the
    distinct, large and small draws and the exact ones (from `seed + 1`), each with its
    expected output from `reference` and its per-element bound."""
    specs, limit, polynomial = recipe.specs, recipe.tolerance, recipe.polynomial
    rng = np.random.default_rng(recipe.seed)
    inputs = draw(specs, lambda shape, _: rng.uniform(-1, 1, shape), rng)
    expected = reference(inputs)
    rng = np.random.default_rng(recipe.seed + 1)
    draws = []
    for name, inputs_n in (("distinct", distinct_draw(specs)), ("large", large_draw(rng, specs, recipe.large)),
                           ("small", small_draw(rng, specs))):
        expected_n = reference(inputs_n)
        draws.append((name, inputs_n, expected_n, limit, error_bound(reference, inputs_n, expected_n, polynomial, limit)))
    for n in range(EXACT_DRAWS if recipe.exact else 0):
        inputs_n = integer_draw(rng, specs, recipe.exact)
        draws.append((f"exact-{n + 1}", inputs_n, reference(inputs_n), 0.0, None))
    bound = error_bound(reference, inputs, expected, polynomial, limit)
    return Case(inputs, expected, limit, bound, tuple(draws), recipe.written)


PERTURBATION_CAP = 1e-3  # the relative input perturbation that probes an element's conditioning
PROBES = 2


def error_bound(reference: Reference, draw: list[np.ndarray], expected: np.ndarray, polynomial: bool,
                tolerance: float) -> np.ndarray | None:
    """Per output element, what its error is measured against (runner.verify), or None for
    max |expected| everywhere. A polynomial's element: the sum of the absolute values of its
    terms (the operator run on |inputs|, what its rounding error grows with), at most max
    |expected|. Any other element: max |expected|, raised where the element is
    ill-conditioned, so that moving it as far as the inputs rounded by `tolerance` (relative,
    random signs) move it is accepted: a batch norm after a convolution on large inputs
    subtracts nearly equal numbers, and a clip to [0, 6] then leaves outputs far smaller than
    the sums whose rounding they carry; a wrong element is off by its own size, not by that."""
    top = largest(expected)
    if polynomial:
        return np.minimum(np.abs(reference([np.abs(a) for a in draw]).astype(np.float64)), top)
    if tolerance == 0:
        return None
    rng = np.random.default_rng(0)
    size = min(tolerance, PERTURBATION_CAP)
    moved = np.zeros(expected.shape)
    for _ in range(PROBES):  # random signs can cancel at an element: the larger of two moves
        rounded = [(a * (1 + size * rng.choice((-1.0, 1.0), a.shape))).astype(a.dtype) if is_float(a.dtype)
                   else a for a in draw]
        with np.errstate(invalid="ignore"):
            move = np.abs(reference(rounded).astype(np.float64) - expected.astype(np.float64))
        moved = np.maximum(moved, np.nan_to_num(move, nan=0.0, posinf=0.0))
    return np.maximum(top, moved / tolerance)
