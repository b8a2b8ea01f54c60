"""One contract for every strategy, plus the model-based parts checked by hand.

Strategies are driven by a deterministic synthetic objective on real spaces, so these tests
exercise the search logic without timing noise (the replay idea of Kernel Tuner)."""
import math
import random

import pytest

from tensortune.result import Result
from tensortune.search import REPLAYABLE, make_strategy
from tensortune.search.inner_search import evolve
from tensortune.search.bo import log_expected_improvement, log_probability_feasible, screen
from tensortune.space import make_space
from tensortune.points import point_key
from tensortune.workloads import get_workload

from synthetic import infeasible, needle_result, synthetic_result

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py says why


@pytest.fixture(scope="module")
def space():
    return make_space("cpu-template", get_workload("gemm", "64,48,32"))


# smaller batch acquisitions and pools for the contract tests, where the dearest strategies'
# defaults cost 10-20 s a test and prove nothing more
LIGHT = {"mobo": {"mc_samples": 8, "shortlist": 16, "pool_samples": 40, "pool_mutants": 80},
         "bo-model": {"pool_samples": 40, "pool_mutants": 80}}


def drive(strategy, rounds: int, batch: int, objective=synthetic_result) -> list[list[dict]]:
    asked = []
    for _ in range(rounds):
        points = strategy.ask(batch)
        strategy.tell(points, [objective(p) for p in points])
        asked.append(points)
    return asked


@pytest.mark.parametrize("name", sorted(REPLAYABLE))
def test_same_seed_same_proposals(name, space):
    first = drive(make_strategy(name, space, seed=7, options=LIGHT.get(name)), rounds=3, batch=8)
    again = drive(make_strategy(name, space, seed=7, options=LIGHT.get(name)), rounds=3, batch=8)
    other = drive(make_strategy(name, space, seed=8, options=LIGHT.get(name)), rounds=3, batch=8)
    assert [list(map(point_key, b)) for b in first] == [list(map(point_key, b)) for b in again]
    assert first != other


@pytest.mark.parametrize("name", sorted(REPLAYABLE))
def test_full_batches_and_no_point_proposed_twice(name, space):
    strategy = make_strategy(name, space, seed=1, options=LIGHT.get(name))
    past = [space.sample(random.Random(i)) for i in range(6)]
    strategy.tell(past, [synthetic_result(p) for p in past])  # as when a run resumes
    keys = [point_key(p) for batch in drive(strategy, rounds=4, batch=8) for p in batch]
    assert len(keys) == 32 and len(set(keys)) == 32
    assert not set(keys) & {point_key(p) for p in past}


@pytest.mark.parametrize("name", ["bo", "evolutionary", "lfbo", "model", "rl"])
def test_model_based_search_beats_random_on_the_synthetic_objective(name, space):
    """Median over 3 seeds after 64 trials; the objective's optimum is 1 ms."""
    def best(strategy_name, seed):
        strategy = make_strategy(strategy_name, space, seed)
        drive(strategy, rounds=8, batch=8)
        return min(r.latency for _, r in strategy.history)

    ours = sorted(best(name, s) for s in range(3))[1]
    theirs = sorted(best("random", s) for s in range(3))[1]
    assert ours < theirs


@pytest.mark.parametrize("name", ["bo", "lfbo", "model", "rl"])
def test_model_based_search_finds_the_needle_random_search_misses(name, space):
    """Median over 5 seeds of the best after 64 trials on the needle landscape (random: 6.2 ms)."""
    def best(strategy_name, seed):
        strategy = make_strategy(strategy_name, space, seed)
        drive(strategy, rounds=8, batch=8, objective=needle_result)
        return min(r.latency for _, r in strategy.history if r.ok)

    assert sorted(best(name, s) for s in range(5))[2] < sorted(best("random", s) for s in range(5))[2]


@pytest.mark.parametrize("name", ["bo", "lfbo", "model", "rl"])
def test_model_based_search_learns_to_avoid_the_infeasible_region(name, space):
    """Random sampling lands in the region 1/2 x 1/4 = 1/8 of the time; after 48 trials the
    feasibility model should bring that well under it (0 or 1 of 16 is typical)."""
    rng = random.Random(0)
    assert 0.05 < sum(infeasible(space.sample(rng)) for _ in range(400)) / 400 < 0.2
    strategy = make_strategy(name, space, seed=3)
    drive(strategy, rounds=6, batch=8)
    late = [p for batch in drive(strategy, rounds=2, batch=8) for p in batch]
    assert sum(infeasible(p) for p in late) <= 2


def test_warm_start_evidence_steers_the_first_proposals(space):
    """With enough warm-start evidence, bo skips its random initial design: its first batch
    comes from the model and lands near the evidence's optimum."""
    rng = random.Random(5)
    evidence = [space.sample(rng) for _ in range(40)]
    cold = make_strategy("bo", space, seed=2)
    warm = make_strategy("bo", space, seed=2)
    warm.warm_start(evidence, [synthetic_result(p) for p in evidence])
    cold_best = min(synthetic_result(p).latency for p in cold.ask(8))
    warm_best = min(synthetic_result(p).latency for p in warm.ask(8))
    assert warm_best < cold_best
    assert not {point_key(p) for p in warm.history}  # evidence is not a trial of this task


def test_log_expected_improvement_by_hand():
    import torch

    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    Phi = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))  # noqa: E731
    mean, std, best = torch.tensor([1.0, -1.0], dtype=torch.double), torch.tensor([2.0, 0.5], dtype=torch.double), 0.5
    expected = [math.log(s * (phi(z) + z * Phi(z))) for m, s in [(1.0, 2.0), (-1.0, 0.5)] for z in [(m - best) / s]]
    assert log_expected_improvement(mean, std, best).tolist() == pytest.approx(expected, rel=1e-6)
    assert log_probability_feasible(torch.tensor([0.8], dtype=torch.double), torch.tensor([0.3], dtype=torch.double)).item() == pytest.approx(math.log(Phi(1.0)))


def test_normal_scores_by_hand():
    import torch

    from tensortune.search.bo import normal_scores

    got = normal_scores(torch.tensor([5.0, -1.0, 100.0, 2.0], dtype=torch.double)).tolist()
    # ranks 2, 0, 3, 1 of 4 -> quantiles 5/8, 1/8, 7/8, 3/8 of the standard normal
    assert got == pytest.approx([0.3186393639643752, -1.1503493803760079, 1.1503493803760079, -0.3186393639643752])


class _Posterior:
    def __init__(self, mean, std):
        import torch

        self.mean = torch.tensor(mean, dtype=torch.double).unsqueeze(-1)
        self.variance = torch.tensor(std, dtype=torch.double).unsqueeze(-1) ** 2


class _Model:
    def __init__(self, mean, std):
        self.p = _Posterior(mean, std)

    def posterior(self, X):
        return self.p


def test_screen_adds_log_ei_and_log_feasibility_on_a_mock_posterior():
    import torch

    objective, feasibility = _Model([1.0, 2.0], [1.0, 1.0]), _Model([0.9, 0.1], [0.2, 0.2])
    scores = screen(objective, feasibility, torch.zeros(2, 3), best=1.0)
    by_hand = [math.log(1.0 * 0.3989422804) + math.log(0.5 * (1 + math.erf(2.0 / math.sqrt(2)))),
               math.log(1.0 * (0.2419707245 + 0.8413447461)) + math.log(0.5 * (1 + math.erf(-2.0 / math.sqrt(2))))]
    assert scores.tolist() == pytest.approx(by_hand, rel=1e-6)
    assert screen(objective, None, torch.zeros(2, 3), best=1.0).argmax().item() == 1  # without feasibility
    assert scores.argmax().item() == 0  # the feasible candidate wins once feasibility counts


def test_a_strategy_told_failures_only_still_proposes(space):
    strategy = make_strategy("bo", space, seed=0)
    points = strategy.ask(8)
    strategy.tell(points, [Result("build_error", "x")] * 8)
    assert len(strategy.ask(8)) == 8


def test_the_inner_search_climbs_its_score_skips_the_excluded_and_reproduces(space):
    """evolve() on a cheap score (the synthetic objective, as a model's prediction would be):
    its best beats the best of as many random points, nothing excluded comes back, and the
    same seed gives the same ranking."""
    def score(points):
        return [-synthetic_result(p).latency for p in points]

    rng = random.Random(3)
    excluded = [space.sample(rng, checked=False) for _ in range(20)]
    exclude = {point_key(p) for p in excluded}
    found = evolve(space, score, excluded[:4], random.Random(5), population=64, generations=4, exclude=exclude)
    again = evolve(space, score, excluded[:4], random.Random(5), population=64, generations=4, exclude=exclude)
    randoms = [space.sample(random.Random(100 + i), checked=False) for i in range(64)]
    assert [point_key(p) for p in found] == [point_key(p) for p in again]
    assert not {point_key(p) for p in found} & exclude
    assert score(found[:1])[0] > max(score(randoms))
    assert score(found) == sorted(score(found), reverse=True)
