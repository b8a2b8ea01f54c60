"""What a tuning run can minimise besides latency, and the Pareto front of several objectives.

Every record holds a correct kernel's latency and the seconds its build took (what a
torch.compile user pays at start-up), so a front over those two comes from the records,
whatever strategy measured them. Energy needs a meter: NVML on an NVIDIA GPU or Linux RAPL
(`/sys/class/powercap`); `check` says when neither is here. Free of TVM.
"""
from __future__ import annotations

import os
from typing import Iterable, TypeVar

from .errors import UserError
from .result import Result

NAMES = {"latency": "latency (s)", "build_s": "build time (s)"}  # what every record holds, all minimised
RAPL = "/sys/class/powercap/intel-rapl:0/energy_uj"
Item = TypeVar("Item")


def check(text: str) -> tuple[str, ...]:
    """`--objectives latency,build_s` as a tuple; a UserError for an unknown name, and for
    energy, which is not measured yet and says whether a meter is here."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if "energy" in names:
        meter = "Linux RAPL is readable here" if os.access(RAPL, os.R_OK) else \
            f"and neither NVML's GPU counter nor Linux RAPL ({RAPL}) is readable here"
        raise UserError(f"energy is not an objective yet: timings do not read a power meter, {meter}; "
                        f"use {','.join(NAMES)}", option="--objectives")
    unknown = [n for n in names if n not in NAMES]
    if unknown or not names:
        raise UserError(f"unknown objective {', '.join(unknown) or '(none)'}; known: {', '.join(NAMES)}",
                        option="--objectives")
    if names[0] != "latency":
        raise UserError("latency comes first: the objectives are latency and, optionally, build_s", option="--objectives")
    return names


def value(result: Result, name: str) -> float:
    """A correct result's value of an objective."""
    return result.latency if name == "latency" else result.build_s


def pareto_front(items: Iterable[tuple[Item, Result]], names: tuple[str, ...]) -> list[tuple[Item, Result]]:
    """The correct (item, result) pairs no other correct one beats on every objective, one per
    distinct set of values, ordered by the first objective."""
    ok = [(item, r) for item, r in items if r.ok and all(value(r, n) > 0 for n in names)]
    values = [tuple(value(r, n) for n in names) for _, r in ok]
    front, seen = [], set()
    for pair, mine in zip(ok, values):
        beaten = any(other != mine and all(a <= b for a, b in zip(other, mine)) for other in values)
        if not beaten and mine not in seen:
            seen.add(mine)
            front.append(pair)
    return sorted(front, key=lambda pair: value(pair[1], names[0]))


def hypervolume(points: list[tuple[float, float]], reference: tuple[float, float]) -> float:
    """The area two-objective points (both minimised) dominate up to `reference`."""
    inside = sorted(p for p in points if p[0] < reference[0] and p[1] < reference[1])
    area, ceiling = 0.0, reference[1]
    for x, y in inside:  # by the first objective; each point adds the strip below the lowest so far
        if y < ceiling:
            area += (reference[0] - x) * (ceiling - y)
            ceiling = y
    return area
