"""A deterministic stand-in for measurement, for testing strategies without timing noise:
latency grows with the distance of the register tile from a sweet spot; points that
vectorise without unrolling 'fail to build' (a known infeasible region)."""
import math

from tensortune.result import Result


def synthetic_result(point: dict) -> Result:
    if point["vectorize"] and point["unroll"] == 0:
        return Result("build_error", "synthetic infeasible region")
    distance = sum(abs(math.log2(v[-1]) - 3) for k, v in point.items() if k.startswith("tile."))
    latency = 1e-3 * (1 + distance + (0 if point["parallel"] else 2))
    build_s = 0.05 * (1 + point["unroll"] / 16 + sum(v[-1] for k, v in point.items() if k.startswith("tile.")) / 64)
    return Result("ok", "", (latency,) * 3, threads=2, build_s=build_s)  # bigger unrolled tiles build slower


def infeasible(point: dict) -> bool:
    return not synthetic_result(point).ok


def needle_result(point: dict) -> Result:
    """A needle landscape: a narrow well (1 ms at the sweet spot) in a plateau near 10 ms, so
    that few random points see any slope (one in a hundred is under 6.2 ms); the same
    infeasible region."""
    result = synthetic_result(point)
    if not result.ok:
        return result
    distance = sum(abs(math.log2(v[-1]) - 3) for k, v in point.items() if k.startswith("tile."))
    latency = 1e-3 * (10 - 9 * math.exp(-distance ** 2) - (0.5 if point["parallel"] else 0))
    return Result("ok", "", (latency,) * 3, threads=2)
