"""One contract, every space: the template knob spaces (CPU, CUDA), MetaSchedule's sketch space,
TVM's default schedule, MetaSchedule's recorded traces, and the code an agent writes. Each
applies its points to schedules of the same kernel, refuses a malformed point with a reason
(never another exception), keys points by canonical JSON that round-trips, and, where it
has knobs, samples by seed, mutates within itself and encodes to a fixed width."""
import random

import pytest

from tensortune.agents.code_space import CodeSpace, trace_json
from tensortune.points import InvalidPoint, point_from_json, point_key
from tensortune.space import make_space
from tensortune.workloads import get_workload

from kernels import assert_correct

GEMM = get_workload("gemm", "M=16,N=24,K=12")


def _template(target):
    space = make_space("cpu-template", GEMM, target)
    return space, [space.named("naive"), space.named("hand"), space.sample(random.Random(1))]


def _cuda(_):
    space = make_space("cuda-template", GEMM)  # sm_90's limits
    return space, [space.named("naive"), space.named("hand")]


def _sketch(target):
    space = make_space("sketch", GEMM, target)
    return space, [space.named("default"), space.sample(random.Random(1))]


def _default(target):
    return make_space("default", GEMM, target), [{}]


def _traces(target):
    space = make_space("metaschedule-trace", GEMM, target)
    sketch = space.sketches
    return space, [{"trace": trace_json(sketch.apply(sketch.sample(random.Random(s))), remove_postproc=True)}
                   for s in (1, 2)]


def _code(target):
    template = make_space("cpu-template", GEMM, target)
    function = "def schedule(sch):\n    (i, j, k) = sch.get_loops(sch.get_sblock('C'))\n    sch.parallel(i)\n"
    return CodeSpace(GEMM), [{"form": "function", "text": function},
                             {"form": "trace", "text": trace_json(template.apply(template.named("hand")))}]


SPACES = {"cpu-template": _template, "cuda-template": _cuda, "sketch": _sketch, "default": _default,
          "metaschedule-trace": _traces, "code": _code}


@pytest.fixture(params=list(SPACES), scope="module")
def space_and_points(request, cpu_target):
    space, points = SPACES[request.param](cpu_target)
    yield space, points
    if isinstance(space, CodeSpace):
        space.close()


def test_its_points_apply_to_the_kernel_and_compute_it(space_and_points, target_spec):
    space, points = space_and_points
    for point in points:
        assert space.check(point) is None
        schedule = space.apply(point)
        assert "main" in [gv.name_hint for gv in schedule.mod.get_global_vars()]
        if space.name != "cuda-template":  # CUDA kernels build here but run on a GPU only
            assert_correct(GEMM, schedule, target_spec)


def test_a_malformed_point_is_invalid_with_a_reason(space_and_points):
    space, _ = space_and_points
    with pytest.raises(InvalidPoint) as refused:
        space.apply({"no such knob": 1})
    assert str(refused.value)
    assert space.check({"no such knob": 1}) == str(refused.value)


def test_points_round_trip_through_their_keys_and_stay_canonical(space_and_points):
    space, points = space_and_points
    for point in points:
        assert point_from_json(point_key(point)) == point
        assert space.canonical(space.canonical(point)) == space.canonical(point)


def test_knobs_sample_by_seed_mutate_within_and_encode_to_a_fixed_width(space_and_points):
    space, points = space_and_points
    if not space.knobs:  # one point (TVM's default), or points given from outside (traces, code)
        try:
            assert space.check(space.sample(random.Random(0))) is None
        except InvalidPoint as nothing:
            assert "nothing to sample" in str(nothing)
        return
    assert space.sample(random.Random(7)) == space.sample(random.Random(7))
    rng = random.Random(0)
    width = len(space.encode(points[0]))
    for _ in range(5):
        child = space.mutate(points[0], rng)
        assert space.check(child) is None
        assert len(space.encode(child)) == width and all(0 <= x <= 1 for x in space.encode(child))
