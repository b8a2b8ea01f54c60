"""Train the packaged cost model on every corpus table (the leaderboard's and the training-only
ones) and save it in the package (tensortune/costmodel/pretrained/KIND.ubj), with the
hardware, machine and tasks it learned from.

    .venv/bin/python benchmarks/pretrain.py
"""
from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import corpus  # noqa: E402

from tensortune.costmodel.model import PRETRAINED  # noqa: E402
from tensortune.measure.config import MeasureConfig  # noqa: E402
from tensortune.target import make_target  # noqa: E402


def main() -> None:
    target = make_target("cpu", MeasureConfig().threads)
    missing = [t.name for t in corpus.TRAINING if corpus.load_table(t) is None]
    if missing:
        raise SystemExit(f"error: no table for {', '.join(missing)}: run benchmarks/leaderboard.py first (with "
                         f"--strategies random --seeds 2 --tasks ... for the training-only ones)")
    start = time.perf_counter()
    model = corpus.train_cost_model(list(corpus.TRAINING), target, threads=target.threads)
    model.info |= {"command": "benchmarks/pretrain.py", "date": f"{datetime.now(timezone.utc):%Y-%m-%d}"}
    PRETRAINED.mkdir(exist_ok=True)
    path = PRETRAINED / f"{target.kind}.ubj"
    model.save(path)
    print(f"{path}: {len(model.info['tasks'])} tasks, {path.stat().st_size // 1024} KiB, "
          f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
