"""The door for agents: `tensortune mcp` started as a subprocess and driven by the official
MCP SDK's client (real server, real client, real kernels, a real SQLite file), and the
isolation of agent-written schedule code."""
import asyncio
import json
import sys

import pytest

TASK = "conv1d:M=256,N=16"

# Python an agent could write: valid TensorIR schedule primitives, but the padded input is
# kept in float16, so the kernel loses precision: it must come back "wrong", never timed.
WRONG_FUNCTION = '''
def schedule(sch):
    sch.unsafe_set_dtype(sch.get_sblock("A_pad"), 0, "float16")
'''


def _call(client, name: str, arguments: dict):
    """A tool's JSON result; a tool error fails the test with its message."""
    async def call():
        result = await client.call_tool(name, arguments)
        assert not result.is_error, f"{name}: {result.content}"
        return result.structured_content

    return call()


def test_an_agent_measures_a_point_a_trace_and_a_function_and_finds_them_in_the_records(tmp_path):
    from mcp import Client, StdioServerParameters

    from tensortune.db import Database, Task
    from tensortune.space import make_space
    from tensortune.agents.code_space import trace_json
    from tensortune.target import make_target
    from tensortune.workloads import get_workload

    target = make_target("cpu", 1)
    workload = get_workload("conv1d", "M=256,N=16")
    template = make_space("cpu-template", workload)
    trace = trace_json(template.apply(template.named("hand")))  # any schedule's trace replays
    db_path = tmp_path / "agent.db"
    server = StdioServerParameters(command=sys.executable, args=[
        "-m", "tensortune", "mcp", "--db", str(db_path), "--threads", "1", "--trials", "4"])

    async def session():
        async with Client(server) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            assert {"list_tasks", "describe_task", "measure", "history", "best", "baselines"} <= tools
            listed = await _call(client, "list_tasks", {})
            assert "conv1d" in listed["families"] and "resnet18" in listed["models"]
            described = await _call(client, "describe_task", {"task": TASK})
            assert described["flops"] == 2 * 256 * 16 and "T.prim_func" in described["tvmscript"]
            template = described["spaces"]["cpu-template"]
            assert any(k["kind"] == "split" and k["multiply_to"] for k in template["knobs"])
            hand = template["named_points"]["hand"]
            bad = dict(hand, **{"tile.k": [3, 5]})  # 15 is not 16: invalid, with the knob named
            runs = {"point": await _call(client, "measure", {"task": TASK, "form": "point", "schedule": hand}),
                    "invalid": await _call(client, "measure", {"task": TASK, "form": "point", "schedule": bad}),
                    "trace": await _call(client, "measure", {"task": TASK, "form": "trace", "schedule": trace}),
                    "wrong": await _call(client, "measure", {"task": TASK, "form": "function",
                                                            "schedule": WRONG_FUNCTION})}
            spent = await client.call_tool("measure", {"task": TASK, "form": "named", "schedule": "naive"})
            unknown = await client.call_tool("describe_task", {"task": "no-such-op"})
            history = await _call(client, "history", {"task": TASK})
            return runs, spent, unknown, history

    runs, spent, unknown, history = asyncio.run(session())
    assert runs["point"]["status"] == "ok" and runs["point"]["latency_s"] > 0
    assert runs["point"]["roofline"]["gflops"] > 0 and runs["point"]["vector_width"] >= 1
    assert runs["invalid"]["status"] == "invalid" and "tile.k" in runs["invalid"]["invalid_because"]
    assert runs["trace"]["status"] == "ok", runs["trace"]["invalid_because"]
    assert "T.prim_func" in runs["trace"]["tvmscript"]
    assert runs["wrong"]["status"] == "wrong" and runs["wrong"]["latency_s"] is None
    assert spent.is_error and "budget" in spent.content[0].text
    assert unknown.is_error and "no-such-op" in unknown.content[0].text
    assert history["best"]["status"] == "ok" and len(history["records"]) == 4

    db = Database(str(db_path))
    stored = {space: [r.result.status for r in db.records(Task(workload.key, "cpu", target.hardware, space))]
              for space in ("cpu-template", "code")}
    assert sorted(stored["cpu-template"]) == ["invalid", "ok"] and sorted(stored["code"]) == ["ok", "wrong"]
    code = [r.point for r in db.records(Task(workload.key, "cpu", target.hardware, "code"))]
    assert {p["form"] for p in code} == {"trace", "function"} and any(p["text"] == WRONG_FUNCTION for p in code)


def test_agent_code_runs_in_a_worker_under_a_time_limit():
    """A function that never returns costs its time limit and its worker, not the caller;
    one that touches the caller's state cannot (it runs in another process)."""
    from tensortune.points import InvalidPoint
    from tensortune.agents.code_space import CodeSpace
    from tensortune.workloads import get_workload

    space = CodeSpace(get_workload("conv1d", "M=64,N=16"), timeout_s=3)
    try:
        with pytest.raises(InvalidPoint, match="timeout"):
            space.apply({"form": "function", "text": "def schedule(sch):\n    while True:\n        pass\n"})
        marker = "import sys\nsys.modules['tensortune'].touched = True\ndef schedule(sch):\n    pass\n"
        space.apply({"form": "function", "text": marker})
        assert not hasattr(sys.modules["tensortune"], "touched")
        with pytest.raises(InvalidPoint, match="no function schedule"):
            space.apply({"form": "function", "text": "x = 1\n"})
        with pytest.raises(InvalidPoint, match="did not apply"):
            space.apply({"form": "trace", "text": json.dumps([[["NoSuchInstruction", [], [], []]], []])})
    finally:
        space.close()


class RecordedChat:
    """A TEST DOUBLE of an OpenAI-compatible chat endpoint: a local HTTP server that answers
    /chat/completions with recorded answers, in order, and keeps the requests it got."""

    def __init__(self, answers: list[str]):
        import http.server
        import threading

        self.answers, self.requests = list(answers), []
        double = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                double.requests.append((self.path, self.headers.get("Authorization"),
                                        json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                body = json.dumps({"choices": [{"message": {"content": double.answers.pop(0)}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self):
        self.server.shutdown()


@pytest.fixture
def gemm_space():
    from tensortune.space import make_space
    from tensortune.workloads import get_workload

    return make_space("cpu-template", get_workload("gemm", "16,16,16"))


def _llm_env(monkeypatch, url):
    monkeypatch.setenv("TENSORTUNE_LLM_URL", url)
    monkeypatch.setenv("TENSORTUNE_LLM_MODEL", "recorded")
    monkeypatch.setenv("TENSORTUNE_LLM_KEY", "test-key")


def test_llm_proposals_are_parsed_checked_counted_and_replaced(monkeypatch, gemm_space):
    from tensortune.search import make_strategy
    from tensortune.points import point_key

    from synthetic import synthetic_result

    hand, naive = gemm_space.named("hand"), gemm_space.named("naive")
    bad = dict(hand, **{"tile.k": [3, 5]})
    first = ("Here are my picks:\n```json\n" + json.dumps([hand, hand, bad, "not a point", naive], default=list)
             + "\n```")
    chat = RecordedChat([first, "I would rather not answer in JSON."])
    _llm_env(monkeypatch, chat.url)
    try:
        strategy = make_strategy("llm", gemm_space, seed=0)
        batch = strategy.ask(8)
        strategy.tell(batch, [synthetic_result(p) for p in batch])
        second = strategy.ask(8)
    finally:
        chat.close()
    assert [point_key(p) for p in batch[:2]] == [point_key(hand), point_key(naive)]
    keys = [point_key(p) for p in batch + second]
    assert len(keys) == 16 and len(set(keys)) == 16
    assert strategy.proposals() == {"from the model": 2, "invalid or repeated, replaced by mutations": 14}
    path, auth, request = chat.requests[1]
    assert path == "/v1/chat/completions" and auth == "Bearer test-key" and request["model"] == "recorded"
    told = json.loads(request["messages"][1]["content"])
    assert told["measured"] == 8 and told["knobs"] and told["fastest"]


def test_llm_without_an_endpoint_is_one_error_line(in_process_cli, monkeypatch):
    for variable in ("TENSORTUNE_LLM_URL", "TENSORTUNE_LLM_MODEL", "TENSORTUNE_LLM_KEY"):
        monkeypatch.delenv(variable, raising=False)
    code, _, err = in_process_cli("tune", "gemm", "--shape", "16,16,16", "--strategy", "llm", "--trials", "4")
    assert code == 2 and err.startswith("error:") and "TENSORTUNE_LLM_URL" in err and len(err.splitlines()) == 1


def test_a_tuning_run_with_llm_reports_how_many_points_came_from_the_model(monkeypatch, tmp_path):
    from tensortune.report import tables as report
    from tensortune.db import Database
    from tensortune.measure.config import MeasureConfig
    from tensortune.space import make_space
    from tensortune.target import make_target
    from tensortune.tuning.tuner import TuneConfig, tune
    from tensortune.workloads import get_workload

    workload = get_workload("gemm", "16,16,16")
    hand = make_space("cpu-template", workload).named("hand")
    chat = RecordedChat([json.dumps([hand], default=list)])
    _llm_env(monkeypatch, chat.url)
    try:
        summary = tune(workload, make_target("cpu", 1), Database(str(tmp_path / "llm.db")),
                       TuneConfig(trials=4, strategy="llm", batch=4), MeasureConfig(threads=1))
    finally:
        chat.close()
    assert summary.new_trials == 4 and summary.best is not None
    assert report.as_json(summary)["proposals"] == {"from the model": 1, "invalid or repeated, replaced by mutations": 3}
    assert "proposals: from the model 1" in report.table(summary).caption


def test_the_workbench_measures_baselines_side_by_side_and_describe_then_shows_them(tmp_path):
    from tensortune import Budget, Database, MeasureConfig, Workbench, make_target

    bench = Workbench(Database(str(tmp_path / "b.db")), make_target("cpu", 1), MeasureConfig(threads=1), Budget(trials=1))
    try:
        measured = bench.baselines("gemm:M=16,N=16,K=16")
        described = bench.describe("gemm:M=16,N=16,K=16")
    finally:
        bench.close()
    assert measured["naive"]["ok"] and measured["hand"]["ok"] and measured["vendor"]["numpy"] > 0
    assert described["baselines"] == {"naive": measured["naive"]["latency_s"], "hand": measured["hand"]["latency_s"]}
    assert described["budget"]["trials"] == 1  # baselines are not trials
