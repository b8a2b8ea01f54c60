"""Points of a search space and their JSON: the vocabulary every layer shares, free of TVM.

A point maps knob names to values (split factors as tuples, choices as plain values, or the
text of a schedule); its key is canonical JSON, so equal points have equal keys, which is
how records de-duplicate and how a resumed run knows what it measured.
"""
from __future__ import annotations

import json
from typing import Any

Point = dict[str, Any]


class InvalidPoint(Exception):
    """A point a space cannot turn into a schedule; the message is the precise reason."""


def point_key(point: Point) -> str:
    """Canonical text of a point: equal points have equal keys (used for de-duplication)."""
    return json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in sorted(point.items())})


def point_from_json(text: str) -> Point:
    """The point whose key is `text` (lists back to tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(text).items()}
