"""The knob space: every sampled point applies and computes the right answer."""
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensortune.points import InvalidPoint, point_from_json, point_key
from tensortune.space import make_space
from tensortune.workloads import get_workload

from conftest import SMALL
from kernels import assert_correct

CASES = [(f, s) for f, shapes in SMALL.items() for s in shapes]


def space_for(family, shape):
    return make_space("cpu-template", get_workload(family, ",".join(map(str, shape))))


@pytest.mark.parametrize("family,shape", CASES)
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_sampled_points_apply_and_verify(family, shape, seed, target_spec):
    space = space_for(family, shape)
    point = space.sample(random.Random(seed))
    assert space.check(point) is None
    assert_correct(space.workload, space.apply(point), target_spec, seed)


@pytest.mark.parametrize("family,shape", CASES)
@pytest.mark.parametrize("name", ["naive", "hand"])
def test_named_points_verify(family, shape, name, target_spec):
    space = space_for(family, shape)
    assert_correct(space.workload, space.apply(space.named(name)), target_spec)


@pytest.mark.parametrize("family", sorted(SMALL))
def test_mutation_and_crossover_stay_valid_and_encode_to_fixed_width(family):
    space = space_for(family, SMALL[family][-1])
    rng = random.Random(3)
    widths = set()
    for _ in range(10):
        a, b = space.sample(rng), space.sample(rng)
        for child in (space.mutate(a, rng), space.crossover(a, b, rng)):
            assert space.check(child) is None
            widths.add(len(space.encode(child)))
    assert len(widths) == 1


def test_invalid_points_are_rejected_with_a_reason():
    space = space_for("gemm", (16, 24, 12))
    point = space.named("hand")
    assert "multiply to 16" in space.check(point | {"tile.i": (2, 2, 2)})
    assert "is not one of" in space.check(point | {"order": "k i j"})
    assert "differ" in space.check({"tile.i": (16, 1, 1)})
    with pytest.raises(InvalidPoint, match="unknown named point"):
        space.named("fastest")


def test_apply_reports_schedule_errors_as_invalid_points():
    """A stage computed inside a loop its consumer is not under cannot be scheduled."""
    space = space_for("dwsep_conv2d", (1, 3, 7, 5, 3, 2))
    point = space.named("naive") | {"stage.D": "root", "stage.A_pad": 3}
    with pytest.raises(InvalidPoint):
        space.apply(point)


def test_point_keys_round_trip():
    space = space_for("conv1d", (13, 5))
    point = space.sample(random.Random(0))
    assert point_from_json(point_key(point)) == point


def test_extents_with_few_divisors_may_be_tiled_padded_and_guarded(target_spec):
    """conv1d 97x31 has 127 outputs (a prime): tiles may cover 128, so a vectorised 16-wide
    register tile exists, the overhang predicated away; exact splits stay in the space."""
    space = space_for("conv1d", (97, 31))
    point = space.named("hand") | {"tile.i": (2, 4, 16)}
    schedule = space.apply(point)
    assert "< 127" in schedule.mod.script()
    assert_correct(space.workload, schedule, target_spec)
    assert space.check(point | {"tile.i": (1, 127, 1)}) is None
    assert "multiply to 127 or 128" in space.check(point | {"tile.i": (1, 126, 1)})
    tile = next(k for k in space.knobs if k.name == "tile.i")
    assert {math.prod(tile.mutate((2, 4, 16), random.Random(s))) for s in range(40)} == {127, 128}


def test_hand_gemm_is_the_expert_recipe():
    hand = space_for("gemm", (1024, 1024, 1024)).named("hand")
    assert hand["tile.i"][-1] == 8 and hand["tile.j"][-1] == 32 and hand["tile.k"][-1] == 256
    assert hand["pack.A"] != "root" and hand["pack.B"] != "root"
    assert hand["vectorize"] and hand["parallel"] == 1
