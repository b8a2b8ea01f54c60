"""Bayesian optimisation over a discrete schedule space (BoTorch + GPyTorch).

Surrogate: a Gaussian process of log throughput (minus log latency; warm-start records of
other shapes arrive with latencies rescaled by FLOPs, so they are comparable) over the
space's encoding in the unit cube. Its targets are warped to normal scores of their ranks:
the few hopeless kernels, orders of magnitude slower, would otherwise dominate the fit and
blur the differences among good ones. Failures (invalid, build errors, wrong results, crashes)
train a separate feasibility GP on 0/1 labels: a candidate counts as feasible where that
model predicts a label over one half.

Acquisition, kept apart from the models: a pool of mutants and crossovers of the best
points (local moves in tile space, where good schedules cluster) plus fresh samples (so the
search can still jump), never a point already measured, is screened with analytic log
expected improvement
plus log probability of feasibility; the shortlist then goes to batch qLogEI with the
feasibility constraint, maximised greedily with chosen points pending, so the q points of
one batch spread out instead of piling onto one optimum.
"""
from __future__ import annotations

import math

from ..result import Result
from ..points import Point, point_key
from .base import Option, Strategy


class BayesianOptimisation(Strategy):
    """Bayesian optimisation: a Gaussian process of log throughput and a feasibility model pick each batch."""
    name = "bo"
    requires = ("torch", "botorch", "gpytorch")
    options = (Option("initial", 8, "random points before the first model", low=2),
               Option("pool_samples", 160, "random samples in each batch's candidate pool"),
               Option("pool_mutants", 480, "mutants of the best points in the pool"),
               Option("pool_parents", 16, "best points the mutants come from", low=1),
               Option("shortlist", 64, "pool points kept by expected improvement for the batch's joint choice", low=1),
               Option("mc_samples", 32, "Monte Carlo samples of the batch acquisition (qLogEI)", low=1),
               Option("fit_iterations", 30, "L-BFGS steps per GP fit: enough for the hyperparameters, and fast", low=1))

    def ask(self, n: int) -> list[Point]:
        if len(self.observations()) < self.initial or not self.modelable():
            return super().ask(n)
        import torch

        torch.manual_seed(self.rng.randrange(2**31))
        pool = self._pool()
        chosen = self._select(pool, n) if pool else []
        for point in chosen:
            self.seen.add(point_key(point))
        return chosen or super().ask(n)

    def propose(self) -> Point:
        return self.space.sample(self.rng)

    def modelable(self) -> bool:
        """Enough correct observations for the surrogate (else the batch is random)."""
        return len(self.ranked(with_prior=True)) >= 2

    def observations(self) -> list[tuple[Point, Result]]:
        """Everything the models learn from: this task's trials and any warm-start records."""
        return self.prior + self.history

    def parents(self) -> list[Point]:
        """The points the pool's mutants come from: the fastest measured."""
        return [p for p, _ in self.ranked(with_prior=True)[: self.pool_parents]]

    def _pool(self) -> list[Point]:
        ranked = self.parents()
        raw = [self.space.sample(self.rng, checked=False) for _ in range(self.pool_samples)]
        for _ in range(self.pool_mutants):
            parent = ranked[min(self.rng.randrange(len(ranked)) for _ in range(2))]  # leaning to the best
            if self.rng.random() < 0.25:
                parent = self.space.crossover(parent, self.rng.choice(ranked), self.rng, checked=False)
            raw.append(self.space.mutate(parent, self.rng, steps=self.rng.choice((1, 1, 2, 3)), checked=False))
        unique = {point_key(p): p for p in raw}
        return [p for k, p in unique.items() if k not in self.seen]

    def _select(self, pool: list[Point], n: int) -> list[Point]:
        import torch
        from botorch.optim import optimize_acqf_discrete

        objective, feasibility, best = self.models()
        choices = self.inputs(pool)
        with torch.no_grad():
            scores = screen(objective, feasibility, choices, best)
        keep = scores.topk(min(self.shortlist, len(pool))).indices
        acquisition = self._batch_acquisition(objective, feasibility, best)
        picked, _ = optimize_acqf_discrete(acquisition, q=min(n, len(keep)), choices=choices[keep], unique=True)
        index = {tuple(row): i for i, row in enumerate(choices.tolist())}
        return [pool[index[tuple(row)]] for row in picked.tolist()]

    def models(self):
        """The surrogate of warped speed (higher is faster), the feasibility model (None while
        every observation is feasible), and the best warped speed observed."""
        X, y, feasible = self._data()
        objective = _fit_gp(X[feasible], y[feasible].unsqueeze(-1), self.fit_iterations)
        feasibility = None if bool(feasible.all()) else _fit_gp(X, feasible.double().unsqueeze(-1),
                                                                self.fit_iterations, standardize=False)
        return objective, feasibility, float(y[feasible].max())

    def _batch_acquisition(self, objective, feasibility, best: float):
        import torch
        from botorch.acquisition.logei import qLogExpectedImprovement
        from botorch.acquisition.objective import GenericMCObjective
        from botorch.models import ModelListGP
        from botorch.sampling import SobolQMCNormalSampler

        sampler = SobolQMCNormalSampler(torch.Size([self.mc_samples]), seed=self.rng.randrange(2**31))
        if feasibility is None:
            return qLogExpectedImprovement(objective, best_f=best, sampler=sampler)
        return qLogExpectedImprovement(
            ModelListGP(objective, feasibility), best_f=best, sampler=sampler,
            objective=GenericMCObjective(lambda Z, X=None: Z[..., 0]),
            constraints=[lambda Z: 0.5 - Z[..., 1]])  # satisfied (<= 0) where the label is over 1/2

    def inputs(self, points: list[Point]):
        """What the models see of each point: a row of the space's encoding (in the unit cube)."""
        import torch

        return torch.tensor([self.space.encode(p) for p in points], dtype=torch.double)

    def _data(self):
        import torch

        obs = self.observations()
        X = self.inputs([p for p, _ in obs])
        feasible = torch.tensor([r.ok for _, r in obs])
        y = torch.zeros(len(obs), dtype=torch.double)
        y[feasible] = normal_scores(torch.tensor([-math.log(r.latency) for _, r in obs if r.ok], dtype=torch.double))
        return X, y, feasible


def normal_scores(values):
    """Rank-based warping: the i-th smallest of n becomes the standard normal quantile of
    (i + 1/2) / n (ties broken by position)."""
    import torch

    ranks = values.argsort().argsort().double()
    return torch.special.ndtri((ranks + 0.5) / len(values))


def log_expected_improvement(mean, std, best: float):
    """log E[max(f - best, 0)] for f ~ N(mean, std^2): log(std) + log(phi(z) + z Phi(z))."""
    import torch

    z = (mean - best) / std
    normal = torch.distributions.Normal(0.0, 1.0)
    return std.log() + (normal.log_prob(z).exp() + z * normal.cdf(z)).clamp_min(1e-300).log()


def log_probability_feasible(mean, std):
    """log P(label > 1/2) for label ~ N(mean, std^2)."""
    import torch

    return torch.special.log_ndtr((mean - 0.5) / std)


def screen(objective, feasibility, X, best: float):
    """Analytic score of each row of X: log EI of the objective + log P(feasible)."""
    post = objective.posterior(X)
    score = log_expected_improvement(post.mean.squeeze(-1), post.variance.clamp_min(1e-12).sqrt().squeeze(-1), best)
    if feasibility is not None:
        feas = feasibility.posterior(X)
        score = score + log_probability_feasible(feas.mean.squeeze(-1),
                                                 feas.variance.clamp_min(1e-12).sqrt().squeeze(-1))
    return score


def _fit_gp(X, Y, iterations: int, standardize: bool = True):
    import warnings

    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.models.transforms.outcome import Standardize
    from gpytorch.mlls import ExactMarginalLogLikelihood

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 0/1 labels are not standardised, on purpose
        model = SingleTaskGP(X, Y, outcome_transform=Standardize(m=1) if standardize else None)
        fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model),
                         optimizer_kwargs={"options": {"maxiter": iterations}})
    return model
