"""`rl`: a policy that writes a point knob by knob, trained online by policy gradient.

The policy is autoregressive over the space's knobs, in the space's order: a GRU cell reads
the option just chosen and gives the logits of the next knob's options, so that a tile size
can depend on the loop order chosen before it. Each point is one episode. Its reward is
log(reference / latency), the reference being the median correct latency measured so far
(positive: faster than typical); a failed build, a wrong result or a crash earns less than
the worst correct point, and so does a sampled point the space rejects, which is learnt from
without being measured. After each batch the policy takes a few clipped (PPO) steps on the
batch's advantages (reward minus the batch's mean, the baseline, over the batch's spread),
with an entropy bonus that keeps it exploring.
"""
from __future__ import annotations

import math
import statistics

from ..result import Result
from ..points import Point, point_key
from .base import Strategy

HIDDEN = 32
STEPS = 8  # policy updates per batch (clipped, so reusing the batch stays near on-policy)
CLIP = 0.2
ENTROPY = 0.01
LEARNING_RATE = 0.03
SAMPLE_TRIES = 20  # policy samples per proposal before falling back to the space's own sample
FAILURE_PENALTY = 1.0  # a failure's reward: this far below the worst correct point's


class Policy:
    """The autoregressive policy: option logits per knob, conditioned on earlier choices."""

    def __init__(self, options: list[list], seed: int):
        import torch

        self.torch = torch
        self.options = options
        self.index = [{_hashable(v): i for i, v in enumerate(opts)} for opts in options]
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            self.start = torch.nn.Parameter(torch.zeros(HIDDEN))
            self.cell = torch.nn.GRUCell(HIDDEN, HIDDEN)
            self.embed = torch.nn.ModuleList(torch.nn.Embedding(len(o), HIDDEN) for o in options)
            self.heads = torch.nn.ModuleList(torch.nn.Linear(HIDDEN, len(o)) for o in options)
        params = [self.start, *self.cell.parameters(), *self.embed.parameters(), *self.heads.parameters()]
        self.optimiser = torch.optim.Adam(params, lr=LEARNING_RATE)
        self.generator = torch.Generator().manual_seed(seed)

    def sample(self) -> list[int]:
        """One episode: an option index per knob."""
        torch = self.torch
        with torch.no_grad():
            h, chosen = self.start[None], []
            for embed, head in zip(self.embed, self.heads):
                probs = torch.softmax(head(h)[0], -1)
                c = int(torch.multinomial(probs, 1, generator=self.generator))
                chosen.append(c)
                h = self.cell(embed(torch.tensor([c])), h)
        return chosen

    def log_prob(self, episodes: list[list[int]]):
        """(log-probability of each episode, mean entropy per knob) under the current policy."""
        torch = self.torch
        actions = torch.tensor(episodes)
        h = self.start[None].expand(len(episodes), -1)
        total, entropy = torch.zeros(len(episodes)), torch.zeros(len(episodes))
        for k, (embed, head) in enumerate(zip(self.embed, self.heads)):
            logp = torch.log_softmax(head(h), -1)
            total = total + logp.gather(1, actions[:, k:k + 1])[:, 0]
            entropy = entropy - (logp.exp() * logp).sum(-1)
            h = self.cell(embed(actions[:, k]), h)
        return total, entropy.mean() / max(1, len(self.heads))

    def update(self, episodes: list[list[int]], advantages: list[float]) -> None:
        """A few clipped policy-gradient steps on one batch."""
        torch = self.torch
        adv = torch.tensor(advantages, dtype=torch.float32)
        with torch.no_grad():
            old, _ = self.log_prob(episodes)
        for _ in range(STEPS):
            new, entropy = self.log_prob(episodes)
            ratio = torch.exp(new - old)
            loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - CLIP, 1 + CLIP) * adv).mean() - ENTROPY * entropy
            self.optimiser.zero_grad()
            loss.backward()
            self.optimiser.step()

    def episode(self, values: list) -> list[int] | None:
        """The option indices of a point's knob values; None if one is not an option."""
        found = [index.get(_hashable(v)) for index, v in zip(self.index, values)]
        return None if None in found else found


class PolicyGradient(Strategy):
    """A policy writes each point knob by knob, trained online by policy gradient (PPO steps)."""
    name = "rl"
    requires = ("torch",)

    def __init__(self, space, seed: int = 0, **options):
        super().__init__(space, seed, **options)
        self.knobs = space.knobs
        self.policy = Policy([k.values() for k in self.knobs], seed)
        self.rejected: list[list[int]] = []  # sampled points the space refused since the last update
        self.fallbacks = 0

    def propose(self) -> Point:
        for _ in range(SAMPLE_TRIES):
            episode = self.policy.sample()
            point = self.space.canonical({k.name: self.policy.options[i][c]
                                          for i, (k, c) in enumerate(zip(self.knobs, episode))})
            if point_key(point) in self.seen:
                continue
            if self.space.check(point) is None:
                return point
            self.rejected.append(episode)
        self.fallbacks += 1
        return self.space.sample(self.rng)

    def tell(self, points: list[Point], results: list[Result]) -> None:
        super().tell(points, results)
        rewards = self._rewards()
        batch = [(self.policy.episode([p[k.name] for k in self.knobs]), rewards[point_key(p)]) for p in points]
        batch = [(e, r) for e, r in batch if e is not None]
        floor = min(rewards.values(), default=0.0) - FAILURE_PENALTY
        batch += [(e, floor) for e in self.rejected]
        self.rejected = []
        if len(batch) > 1:
            baseline = statistics.fmean(r for _, r in batch)
            scale = statistics.pstdev(r for _, r in batch) or 1.0  # steps of one size, whatever the reward's scale
            self.policy.update([e for e, _ in batch], [(r - baseline) / scale for _, r in batch])

    def _rewards(self) -> dict[str, float]:
        """Every measured point's reward under the current reference (see the module)."""
        correct = [r.latency for _, r in self.history if r.ok]
        if not correct:
            return {point_key(p): -FAILURE_PENALTY for p, _ in self.history}
        reference = statistics.median(correct)
        good = {point_key(p): math.log(reference / r.latency) for p, r in self.history if r.ok}
        worst = min(good.values())
        return {point_key(p): good.get(point_key(p), worst - FAILURE_PENALTY) for p, _ in self.history}

    def proposals(self) -> dict[str, int]:
        return {"space samples where the policy repeated itself": self.fallbacks} if self.fallbacks else {}


def _hashable(value):
    return tuple(value) if isinstance(value, list) else value
