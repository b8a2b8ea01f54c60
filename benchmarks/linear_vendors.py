"""The two vendor libraries torch offers a CPU linear layer with a packed weight, side by side
on the zoo's linear shapes: oneDNN (`mkldnn._reorder_linear_weight` + `_linear_pointwise`,
what tensortune's fused calls use) and MKL (`mkl._mkl_reorder_linear_weight` +
`_mkl_linear`), with torch's plain `F.linear` as the yardstick, each weight packed once.

MKL is known to be slow on AMD CPUs: this says by how much on the machine it runs on, and so
whether a linear layer should ever be offered MKL as a candidate there.

Run alone on the machine:
    .venv/bin/python benchmarks/linear_vendors.py [--out benchmarks/results/linear_vendors.txt]
"""
from __future__ import annotations

import argparse
import os
import statistics

from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))
# (what, tokens, in features, out features): BERT-base and GPT-2 blocks (128 tokens, 768 wide,
# MLP 3072), the ViT-B/16 block (197 tokens), BERT-mini (128 tokens, 256 wide, MLP 1024)
SHAPES = [("bert/gpt qkv", 128, 768, 2304), ("bert/gpt proj", 128, 768, 768), ("bert/gpt mlp up", 128, 768, 3072),
          ("bert/gpt mlp down", 128, 3072, 768), ("vit mlp up", 197, 768, 3072), ("vit mlp down", 197, 3072, 768),
          ("bert-mini proj", 128, 256, 256), ("bert-mini mlp up", 128, 256, 1024), ("bert-mini mlp down", 128, 1024, 256)]


def timings(tokens: int, k: int, n: int) -> dict[str, float]:
    """Seconds per call of each library on x (tokens x k) @ w.T (n x k) + b; each result checked
    against F.linear's."""
    import torch

    torch.manual_seed(0)
    x, w, b = torch.randn(tokens, k), torch.randn(n, k) / k ** 0.5, torch.randn(n)
    onednn_w = torch.ops.mkldnn._reorder_linear_weight(w, tokens)
    mkl_w = torch.ops.mkl._mkl_reorder_linear_weight(w, tokens)
    calls = {"plain": lambda: torch.nn.functional.linear(x, w, b),
             "onednn": lambda: torch.ops.mkldnn._linear_pointwise(x, onednn_w, b, "none", [], ""),
             "mkl": lambda: torch.ops.mkl._mkl_linear(x, mkl_w, w, b, tokens)}
    return checked_timings(calls, calls["plain"](), f"linear differs from F.linear's at {tokens}x{k}x{n}")


def checked_timings(calls: dict, expected, differs: str) -> dict[str, float]:
    """Median seconds per call of each of `calls` (name -> no-argument call), each result first
    checked against `expected`; one that differs ends the run with "error: NAME's DIFFERS"."""
    import torch

    from tensortune.measure.runner import time_on_cpu

    out = {}
    with torch.no_grad():
        for name, call in calls.items():
            if not torch.allclose(call(), expected, atol=1e-4, rtol=1e-4):
                raise SystemExit(f"error: {name}'s {differs}")
            out[name] = statistics.median(time_on_cpu(call, 7, 0.05))
    return out


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    lines = [*header(THREADS), "latency us (median, warm); ratios: how many times faster oneDNN is (above 1: oneDNN faster)", "",
             f"{'shape':20}{'tokens x in x out':>20}{'plain':>9}{'onednn':>9}{'mkl':>9}{'/plain':>8}{'/mkl':>8}"]
    for what, tokens, k, n in SHAPES:
        t = timings(tokens, k, n)
        lines.append(f"{what:20}{f'{tokens}x{k}x{n}':>20}{t['plain'] * 1e6:9.1f}{t['onednn'] * 1e6:9.1f}{t['mkl'] * 1e6:9.1f}"
                     f"{t['plain'] / t['onednn']:7.2f}x{t['mkl'] / t['onednn']:7.2f}x")
        print(lines[-1], flush=True)
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
