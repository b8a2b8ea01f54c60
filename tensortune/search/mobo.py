"""Multi-objective Bayesian optimisation (BoTorch's qLogNEHVI): the front of latency and build
time, over the same discrete candidate pools as `bo`.

Each objective gets its Gaussian process, on minus the log of the value (BoTorch maximises),
from the correct trials; failures train the feasibility model of `bo`. A batch: the pool
(fresh samples, and mutants and crossovers of the points on the current front, so the search
refines every trade-off and not only the fastest kernel) is screened with each objective's
analytic expected improvement (a point good at either survives), and the shortlist goes to
batch qLogNEHVI, the noisy expected hypervolume improvement over the measured points, chosen
greedily with chosen points pending. The reference point sits a tenth of each objective's
observed range below its worst value, so every correct kernel counts.
"""
from __future__ import annotations

import math

from ..objectives import pareto_front
from ..points import Point
from .bo import BayesianOptimisation, _fit_gp, screen


class MultiObjectiveBO(BayesianOptimisation):
    """Multi-objective Bayesian optimisation (qLogNEHVI): the front of latency and build time."""
    name = "mobo"
    objectives = ("latency", "build_s")

    def modelable(self) -> bool:
        """Two correct observations with a build time (replayed or synthetic results may have none)."""
        return sum(r.ok and r.build_s > 0 for _, r in self.observations()) >= 2

    def parents(self) -> list[Point]:
        """The points on the front of what was measured, then the fastest, up to pool_parents."""
        measured = self.observations()
        front = [p for p, _ in pareto_front(measured, self.objectives)]
        return (front + [p for p, _ in self.ranked(with_prior=True) if p not in front])[: self.pool_parents]

    def _select(self, pool: list[Point], n: int) -> list[Point]:
        import torch
        from botorch.acquisition.multi_objective.logei import qLogNoisyExpectedHypervolumeImprovement
        from botorch.acquisition.multi_objective.objective import IdentityMCMultiOutputObjective
        from botorch.models import ModelListGP
        from botorch.optim import optimize_acqf_discrete
        from botorch.sampling import SobolQMCNormalSampler

        X, Y, feasible = self._objectives_data()
        models = [_fit_gp(X[feasible], Y[feasible][:, [i]], self.fit_iterations) for i in range(Y.shape[1])]
        feasibility = None if bool(feasible.all()) else _fit_gp(X, feasible.double().unsqueeze(-1),
                                                                self.fit_iterations, standardize=False)
        choices = self.inputs(pool)
        with torch.no_grad():
            # each objective's log EI plus log P(feasible), the best of them: a point good at either survives
            scores = torch.stack([screen(model, feasibility, choices, incumbent)
                                  for model, incumbent in zip(models, Y[feasible].max(0).values.tolist())]).max(0).values
        keep = scores.topk(min(self.shortlist, len(pool))).indices
        low, high = Y[feasible].min(0).values, Y[feasible].max(0).values
        outcomes = len(models)
        acquisition = qLogNoisyExpectedHypervolumeImprovement(
            ModelListGP(*models, *([feasibility] if feasibility is not None else [])),
            ref_point=(low - 0.1 * (high - low).clamp_min(1e-6)).tolist(), X_baseline=X[feasible],
            sampler=SobolQMCNormalSampler(torch.Size([self.mc_samples]), seed=self.rng.randrange(2**31)),
            objective=IdentityMCMultiOutputObjective(outcomes=list(range(outcomes))),
            constraints=None if feasibility is None else [lambda Z: 0.5 - Z[..., outcomes]], prune_baseline=True)
        picked, _ = optimize_acqf_discrete(acquisition, q=min(n, len(keep)), choices=choices[keep], unique=True)
        index = {tuple(row): i for i, row in enumerate(choices.tolist())}
        return [pool[index[tuple(row)]] for row in picked.tolist()]

    def _objectives_data(self):
        """X, minus the log of each objective (zeros where infeasible), and the feasible mask."""
        import torch

        obs = self.observations()
        X = self.inputs([p for p, _ in obs])
        feasible = torch.tensor([r.ok and r.build_s > 0 for _, r in obs])
        Y = torch.zeros(len(obs), len(self.objectives), dtype=torch.double)
        for row, (_, result) in enumerate(obs):
            if feasible[row]:
                Y[row] = torch.tensor([-math.log(result.latency), -math.log(result.build_s)], dtype=torch.double)
        return X, Y, feasible
