"""The two ways tensortune's builds may run a CPU convolution (model/onednn.py:
conv_candidates), side by side on convolution shapes of the zoo's and the coverage corpus's
CNNs: oneDNN's call with the weight packed once and the ReLU fused as a post-op
(`mkldnn._convolution_pointwise`), and eager's composition (torch's `conv2d` on the plain
channels-last weight, then the ReLU in place). Activations channels-last in both.

Each convolution site keeps the faster of the two on its first call; this says where each
wins on the machine it runs on, and how much oneDNN's packed call costs a call however small
the layer (its latency on the smallest shapes).

Run alone on the machine:
    .venv/bin/python benchmarks/conv_vendors.py [--out benchmarks/results/conv_vendors.txt]
"""
from __future__ import annotations

import argparse
import os

from linear_vendors import checked_timings
from provenance import header, publish

THREADS = len(os.sched_getaffinity(0))
# (what, channels in, channels out, map side, kernel, stride, groups)
SHAPES = [("regnet-like 1x1 on 1x1", 256, 256, 1, 1, 1, 1), ("regnet-like 1x1 on 2x2", 128, 128, 2, 1, 1, 1),
          ("regnet-like 1x1 on 4x4", 64, 64, 4, 1, 1, 1), ("resnet50 1x1 on 7x7", 512, 2048, 7, 1, 1, 1),
          ("resnet18 3x3 on 56x56", 64, 64, 56, 3, 1, 1), ("resnet18 3x3 s2 on 28x28", 128, 256, 28, 3, 2, 1),
          ("resnet18 3x3 on 7x7", 512, 512, 7, 3, 1, 1), ("mobilenet 1x1 on 56x56", 24, 144, 56, 1, 1, 1),
          ("mobilenet dw 3x3 on 56x56", 144, 144, 56, 3, 1, 144), ("mobilenet dw 3x3 on 7x7", 960, 960, 7, 3, 1, 960)]


def timings(cin: int, cout: int, side: int, kernel: int, stride: int, groups: int) -> dict[str, float]:
    """Seconds per call of each candidate on a 1 x cin x side x side channels-last input, with
    a ReLU after; each result checked against torch's conv2d + relu."""
    import torch

    from tensortune.model.onednn import conv_candidates

    torch.manual_seed(0)
    x = torch.randn(1, cin, side, side).contiguous(memory_format=torch.channels_last)
    w, b = torch.randn(cout, cin // groups, kernel, kernel) / (cin // groups * kernel * kernel) ** 0.5, torch.randn(cout)
    pad = kernel // 2
    onednn, composed = conv_candidates(w, b, x, (stride, stride, pad, pad, 1, 1, groups), "relu", [], "")
    expected = torch.nn.functional.conv2d(x, w, b, stride, pad, 1, groups).relu()
    return checked_timings({"onednn": lambda: onednn(x), "composed": lambda: composed(x)}, expected,
                           f"convolution differs from conv2d's at {cin}x{side}x{side}->{cout}")


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="also write the table to this file")
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    lines = [*header(THREADS), "latency us (median of 7, warm), batch 1, ReLU after; "
             "ratio: how many times faster oneDNN's packed call is (above 1: oneDNN faster)", "",
             f"{'shape':28}{'in->out, kernel/stride':>24}{'onednn':>9}{'composed':>10}{'ratio':>8}"]
    for what, cin, cout, side, kernel, stride, groups in SHAPES:
        t = timings(cin, cout, side, kernel, stride, groups)
        geometry = f"{cin}->{cout}, {kernel}/{stride}"
        lines.append(f"{what:28}{geometry:>24}{t['onednn'] * 1e6:9.1f}{t['composed'] * 1e6:10.1f}"
                     f"{t['composed'] / t['onednn']:7.2f}x")
        print(lines[-1], flush=True)
    publish("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
