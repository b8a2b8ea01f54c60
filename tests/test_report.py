"""The HTML report (tensortune report NAME --html FILE): made from real records of real tunes,
opened in a real headless browser; and what it computes from records (report/history.py)."""
import json
import math
import re
import sqlite3

import pytest
from browser import colours, figures, open_page

from tensortune.db import Database, Record, Run, Task
from tensortune.measure.config import MeasureConfig
from tensortune.result import Label, Result
from tensortune.report import history
from tensortune.target import make_target
from tensortune.tuning.tuner import TuneConfig, tune
from tensortune.workloads import get_workload

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest.py says why

FAST = MeasureConfig(threads=2, repeat=3, min_repeat_ms=1, final_repeat=3, final_min_repeat_ms=1)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """conv1d 1024x256 tuned by random search (12 trials), then resumed by mobo, for the front of
    latency and build time, to 32; (database path, mobo's summary)."""
    path = str(tmp_path_factory.mktemp("report") / "t.db")
    wl, target = get_workload("conv1d", "1024,256"), make_target("cpu", 2)
    for strategy, trials in (("random", 12), ("mobo", 32)):
        db = Database(path)
        summary = tune(wl, target, db, TuneConfig(trials=trials, strategy=strategy, batch=8, final_top=1,
                                                  objectives=("latency", "build_s")), FAST)
        db.close()
    return path, summary


def test_a_two_objective_run_gives_a_front_of_verified_kernels_none_beating_another(tuned):
    path, summary = tuned
    front = [(point, result) for point, result in summary.front]
    assert front and summary.objectives == ("latency", "build_s")  # its size is the timings' to decide
    stored = {json.dumps(r.point, sort_keys=True): r.result for r in Database(path).records(summary.task)}
    for point, result in front:
        assert stored[json.dumps(point, sort_keys=True)] == result and result.ok  # a verified, stored trial
    for other in (r for r in stored.values() if r.ok and r not in (mine for _, mine in front)):
        # every other verified trial of both runs is beaten by one on the front
        assert any(mine.latency <= other.latency and mine.build_s <= other.build_s for _, mine in front)
    for _, mine in front:
        assert not any(o.latency <= mine.latency and o.build_s <= mine.build_s and o != mine for _, o in front)
    assert [r.latency for _, r in front] == sorted(r.latency for _, r in front)
    assert [r.build_s for _, r in front] == sorted((r.build_s for _, r in front), reverse=True)


def test_the_report_of_a_multi_objective_tune_opens_in_a_headless_browser_with_its_plots(tuned, tmp_path,
                                                                                        in_process_cli):
    page = tmp_path / "conv1d.html"
    code, out, err = in_process_cli("report", "conv1d", "--shape", "1024,256", "--db", tuned[0], "--html", page)
    assert code == 0 and f"wrote {page}" in out, err
    text = page.read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:|url\(\s*["']?https?:|<script""", text)  # nothing fetched
    dom, console, shot = open_page(page, "report-tune.png")
    assert console == []
    drawn = figures(dom)
    assert set(drawn) == {"convergence", "statuses", "roofline", "importance", "front"}
    assert all(paths > 5 for paths in drawn.values()), drawn
    assert colours(shot) > 50
    # provenance: both runs, their commands and strategies; each run's curve in the plot's legend
    runs = re.findall(r"<tr><td class=\"n\">(\d+)</td><td>[^<]*</td><td>([^<]*)</td><td>(\w+)</td>", dom)
    assert [strategy for _, _, strategy in runs] == ["random", "mobo"]
    assert "random, seed 0 (run " in dom and "mobo, seed 0 (run " in dom
    assert "apache-tvm 0.27" in dom and make_target("cpu", 2).hardware in dom
    # the best kernel (a search result, or naive or hand where they won) as TVMScript, beside the unscheduled one
    assert re.search(r"Kernels: the best \([\d.]+ ms, (final|search|naive|hand)\)", dom) and dom.count("@T.prim_func") == 2
    tuned_script, naive_script = re.findall(r"<pre>(.*?)</pre>", dom, re.S)
    assert tuned_script != naive_script


def test_a_report_of_unknown_records_is_one_error_line(tuned, tmp_path, in_process_cli):
    code, out, err = in_process_cli("report", "gemm", "--shape", "8,8,8", "--db", tuned[0], "--html", tmp_path / "x.html")
    assert code == 2 and err.startswith("error: no records for gemm(M=8,N=8,K=8)") and "Traceback" not in err
    code, _, err = in_process_cli("report", "gemm-1024", "--db", str(tmp_path / "none.db"), "--html", "x.html")
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "x.html").exists()


def test_records_of_a_database_made_before_runs_were_kept_still_report(tmp_path):
    """An older database (records without a run) opens, gains the column, and its records
    are one curve, 'earlier records'."""
    path = str(tmp_path / "old.db")
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE records (id INTEGER PRIMARY KEY, workload TEXT NOT NULL, target TEXT NOT NULL,"
                      " hardware TEXT NOT NULL, space TEXT NOT NULL, point TEXT NOT NULL, label TEXT NOT NULL,"
                      " status TEXT NOT NULL, reason TEXT NOT NULL, latency_s REAL, spread REAL, runs TEXT NOT NULL,"
                      " threads INTEGER, build_s REAL, created REAL NOT NULL);"
                      "INSERT INTO records VALUES (1, 'w', 'cpu', 'h', 's', '{\"a\": 1}', 'search', 'ok', '', 0.002,"
                      " 0.0, '[0.002]', 2, 0.1, 100.0)")
    old.commit()
    old.close()
    db = Database(path)
    task = Task("w", "cpu", "h", "s")
    [record] = db.records(task)
    assert record.run is None and record.result.latency == 0.002
    [curve] = history.curves(db.records(task), db.runs())
    assert curve.name == "earlier records" and curve.best_s == [0.002]
    db.add(task, Label.SEARCH, [{"a": 2}], [Result("ok", runs=(0.001,), threads=2, build_s=0.1)])
    assert [r.run for r in db.records(task)] == [None, db.run] and db.run is not None


def _record(point: dict, latency: float | None, build_s: float = 0.1, run: int | None = 1, created: float = 0.0,
            status: str = "ok", reason: str = "") -> Record:
    """A record as the database returns it (a test double: no kernel behind it)."""
    result = Result(status, reason, (latency,) if latency else (), 2, build_s)
    return Record(point, Label.SEARCH, result, created, run)


def test_the_pareto_front_keeps_exactly_the_non_dominated_kernels():
    records = [_record({"i": i}, lat, build) for i, (lat, build) in enumerate(
        [(1.0, 5.0), (2.0, 2.0), (3.0, 1.0), (2.5, 2.5), (1.0, 6.0), (4.0, 1.0), (2.0, 2.0)])]
    records.append(_record({"i": 9}, None, 0.5, status="wrong", reason="output differs"))  # never on the front
    front = history.pareto_front(records)
    assert [(r.result.latency, r.result.build_s) for r in front] == [(1.0, 5.0), (2.0, 2.0), (3.0, 1.0)]


def test_knob_importance_finds_the_knob_that_sets_the_latency():
    records = [_record({"tile": t, "unroll": u, "noise": n}, (1 + 3 * t) * (1 + 0.01 * n), created=i)
               for i, (t, u, n) in enumerate((t, u, n) for t in (1, 2, 4) for u in (0, 1) for n in (0, 1, 2))]
    shares = dict(history.importance(records))
    assert shares["tile"] > 0.95 and shares["unroll"] < 0.01 and shares["noise"] < 0.05
    assert list(dict(history.importance(records))) == ["tile", "noise", "unroll"]
    traces = [_record({"trace": f"t{i}"}, 1.0 + i, created=i) for i in range(12)]  # one value per trial: no share
    assert history.importance(traces) == []


def test_each_run_has_its_own_curve_of_best_so_far_and_failures_count_by_reason():
    runs = {1: Run(1, "tensortune tune gemm", "random", 0, {}, {}, 10.0),
            2: Run(2, "tensortune tune gemm --strategy bo", "bo", 3, {}, {}, 50.0)}
    records = [_record({"i": 0}, 3.0, run=1, created=11), _record({"i": 1}, None, run=1, created=12, status="wrong",
                                                                      reason="max error 0.5\nmore"),
               _record({"i": 2}, 2.0, run=1, created=13), _record({"i": 3}, None, run=2, created=52,
                                                                  status="wrong", reason="max error 0.5"),
               _record({"i": 4}, 2.5, run=2, created=54)]
    first, second = history.curves(records, runs)
    assert (first.name, first.trials, first.elapsed_s, first.best_s) == ("random, seed 0 (run 1)", [1, 2, 3],
                                                                         [1, 2, 3], [3.0, 3.0, 2.0])
    assert second.name == "bo, seed 3 (run 2)" and second.best_s[0] == math.inf and second.best_s[1] == 2.5
    assert history.failures(records) == [("wrong", "max error 0.5", 2)]
    assert history.statuses(records) == {"ok": 3, "wrong": 2}
