"""One operator over several shapes (tune FAMILY --shapes ...): each shape tuned, every shape's
best schedules measured at every shape, the one schedule and the dispatch table chosen from
that, re-timed, exported as one callable that picks by shape."""
import json
import math

import pytest
import torch

from tensortune import load
from tensortune.db import Database
from tensortune.deploy.exporter import export_dispatch
from tensortune.errors import UserError
from tensortune.measure.config import MeasureConfig
from tensortune.target import make_target
from tensortune.tuning.shapes import expand, tune_shapes
from tensortune.tuning.tuner import TuneConfig

FAST = MeasureConfig(threads=2, repeat=3, min_repeat_ms=1, final_repeat=3, final_min_repeat_ms=1)


def test_shapes_expand_to_every_combination_and_bad_ones_say_how():
    workloads = expand("gemm", "M=1,8;N=16;K=16,32")
    assert [w.shape for w in workloads] == [(1, 16, 16), (1, 16, 32), (8, 16, 16), (8, 16, 32)]
    for text, message in (("M=1,8;N=16", "no value for K"), ("M=1;N=16;Q=3", "bad --shapes part 'Q=3'"),
                          ("M=1,2,3,4,5;N=1,2,3,4;K=16", "makes 20 shapes")):
        with pytest.raises(UserError, match=message):
            expand("gemm", text)
    with pytest.raises(UserError, match="takes an operator family"):
        expand("gemm-1024", "M=1")


def test_a_family_tuned_at_several_shapes_gives_one_schedule_a_table_and_a_callable(tmp_path, in_process_cli):
    workloads = expand("gemm", "M=1,32;N=32;K=32")
    summary = tune_shapes(workloads, make_target("cpu", 2), Database(str(tmp_path / "t.db")),
                          TuneConfig(trials=8, batch=8, final_top=1), FAST, k=2)
    assert len(summary.candidates) >= 4 and {shape for shape, _ in summary.candidates} == {0, 1}
    assert all(math.isfinite(v) for row in summary.latency for v in row)  # every schedule measured at every shape
    assert 1 <= len(summary.table) <= 2 and set(summary.serves) <= set(summary.table)
    for s in range(2):  # re-timed together; the table serves each shape with its fastest there
        assert all(result.ok for _, result in summary.final[s].values())
        assert summary.latency[summary.serves[s]][s] == min(summary.latency[c][s] for c in summary.table)
        assert summary.ratio(s, "single") > 0 and summary.ratio(s, "table") > 0
    paths = export_dispatch(summary, make_target("cpu", 2), tmp_path / "table")
    assert json.loads(paths[-1].read_text())["kernels"][1]["shape"] == {"M": 32, "N": 32, "K": 32}
    table = load(tmp_path / "table")
    for m in (1, 32):
        a, b = torch.randn(m, 32), torch.randn(32, 32)
        assert torch.allclose(table(a, b), a @ b, atol=1e-4)
    with pytest.raises(UserError, match="no kernel for inputs of shapes"):
        table(torch.randn(3, 32), torch.randn(32, 32))
    code, _, err = in_process_cli("tune", "gemm", "--shape", "1,32,32", "--shapes", "M=1;N=32;K=32", "--db", "t.db",
                                  cwd=tmp_path)
    assert code == 2 and "drop --shape" in err
    code, _, err = in_process_cli("tune", "gemm", "--shapes", "M=1;N=32;K=32", "--space", "sketch", cwd=tmp_path)
    assert code == 2 and "needs a template space" in err
