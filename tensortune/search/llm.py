"""`llm`: a language model proposes the points, from the task and what was measured so far.

Each batch, an OpenAI-compatible chat endpoint gets the space's knobs and their rules, the
operator, the best points with their speed and share of the roofline, and the failures with
their reasons, and answers with a JSON list of points. A proposal that is not JSON, not a
valid point, or one already proposed is counted and replaced by a mutation of the best point
(a sample before there is one), so a batch is always full; `proposals()` says how many came
from the model, and the tuning report prints it.

Configuration comes from the environment only, and nothing falls back silently: without it
the strategy refuses to start, with one line that names what to set.
"""
from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request

from ..errors import UserError
from ..points import InvalidPoint, Point, point_from_json, point_key
from .base import Strategy

ENV = {"url": "TENSORTUNE_LLM_URL", "model": "TENSORTUNE_LLM_MODEL", "key": "TENSORTUNE_LLM_KEY"}
SHOWN = 12  # best points and failures shown to the model each: the prompt stays short
TIMEOUT_S = 300.0


def endpoint() -> dict[str, str]:
    """URL (an OpenAI-compatible API base, e.g. http://localhost:8000/v1), model and key from
    the environment; a UserError naming what is missing."""
    found = {name: os.environ.get(variable, "") for name, variable in ENV.items()}
    missing = [ENV[name] for name, value in found.items() if not value]
    if missing:
        raise UserError(f"strategy 'llm' needs {', '.join(missing)} set (an OpenAI-compatible endpoint's base URL, "
                        f"e.g. http://localhost:8000/v1, its model name, and its API key: any text for a server "
                        f"without keys)")
    return found


class LLMGuided(Strategy):
    """A language model proposes the points from the task and what was measured (OpenAI-compatible endpoint)."""
    name = "llm"
    replayable = False

    @classmethod
    def preflight(cls) -> None:
        endpoint()

    def __init__(self, space, seed: int = 0, **options):
        super().__init__(space, seed, **options)
        self.endpoint = endpoint()
        self.seed = seed
        self.counts = {"from the model": 0, "invalid or repeated, replaced by mutations": 0}

    def ask(self, n: int) -> list[Point]:
        answer = self._chat(self._prompt(n))
        points = []
        for proposal in parse_points(answer)[:n]:
            point = self._accepted(proposal)
            if point is not None:
                points.append(point)
                self.counts["from the model"] += 1
        missing = n - len(points)
        self.counts["invalid or repeated, replaced by mutations"] += missing
        return points + self._fill(missing)

    def proposals(self) -> dict[str, int]:
        return dict(self.counts)

    def _accepted(self, proposal) -> Point | None:
        """The proposal as a point of the space, if it is one and is new."""
        if not isinstance(proposal, dict):
            return None
        point = point_from_json(json.dumps(proposal))
        try:
            self.space.validate(point)
        except InvalidPoint:
            return None
        point = self.space.canonical(point)
        if point_key(point) in self.seen or self.space.check(point) is not None:
            return None
        self.seen.add(point_key(point))
        return point

    def _fill(self, n: int) -> list[Point]:
        """Mutations of the best point so far (samples before one): the ask/tell default."""
        return super().ask(n) if n > 0 else []

    def propose(self) -> Point:
        ranked = self.ranked()
        return self.space.mutate(ranked[0][0], self.rng) if ranked else self.space.sample(self.rng)

    def _prompt(self, n: int) -> list[dict]:
        knobs = [k.describe() for k in self.space.knobs]
        workload = self.space.workload
        ranked = self.ranked()[:SHOWN]
        failures = [(p, r) for p, r in self.history if not r.ok][-SHOWN:]
        user = {"operator": workload.key, "flops": workload.flops, "bytes": workload.bytes,
                "knobs": knobs, "measured": len(self.history),
                "fastest": [{"point": p, "ms": r.latency * 1e3, "gflops": workload.flops / r.latency / 1e9}
                            for p, r in ranked],
                "failed": [{"point": p, "status": r.status, "reason": r.reason[:200]} for p, r in failures],
                "example": self._example()}
        system = ("You tune TVM schedules for a CPU or GPU kernel. Each point gives every knob a value that "
                  "obeys its rule. Propose new points likely to be faster than the fastest so far; avoid the "
                  f"failures. Answer with a JSON list of exactly {n} points (objects), nothing else.")
        return [{"role": "system", "content": system}, {"role": "user", "content": json.dumps(user, default=list)}]

    def _example(self) -> Point | None:
        """A valid point to show the format: the fastest so far, else the space's naive one."""
        if self.ranked():
            return self.ranked()[0][0]
        try:
            return self.space.named("naive")
        except (InvalidPoint, NotImplementedError):
            return None

    def _chat(self, messages: list[dict]) -> str:
        body = json.dumps({"model": self.endpoint["model"], "messages": messages, "temperature": 0.7,
                           "seed": self.seed + len(self.history)}).encode()
        request = urllib.request.Request(self.endpoint["url"].rstrip("/") + "/chat/completions", data=body, headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {self.endpoint['key']}"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                return json.loads(response.read())["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, TimeoutError, KeyError, IndexError, json.JSONDecodeError) as err:
            raise UserError(f"the LLM endpoint {self.endpoint['url']} failed: {err}; every measured batch is "
                            f"stored, run again to resume") from None


def parse_points(answer: str) -> list:
    """The JSON list in a model's answer (bare, or in a ```json block); [] if there is none."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", answer, re.DOTALL)
    text = fenced.group(1) if fenced else answer
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        return []
    try:
        found = json.loads(text[start:end + 1])
    except json.JSONDecodeError:
        return []
    return found if isinstance(found, list) else []

