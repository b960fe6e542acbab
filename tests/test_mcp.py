"""The MCP server, driven through the SDK's in-process client (real evaluations on the CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from kerneljudge.mcp_server import MAX_OUTPUT_CHARS, build_server, judge_output, trim_result  # noqa: E402
from kerneljudge.options import Options  # noqa: E402
from kerneljudge.records import Result  # noqa: E402
from kerneljudge.store import Store  # noqa: E402

from scaled_relu import GOOD, PROBLEM, WRONG  # noqa: E402


@pytest.fixture
def setup(tmp_path, cache_dir):
    """The problem file and the server's options, with the session's cache (a timing on a fresh cache
    measures the copy bandwidth in full first)."""
    problem = tmp_path / "prob.py"
    problem.write_text(PROBLEM)
    options = Options(device="cpu", store_path=None, cache_dir=cache_dir).replace(
        check={"trials": 2}, timing={"min_time_ms": 5.0, "min_runs": 3, "warmup_runs": 1, "compile_baseline": False})
    return problem, options


def call(server, *calls: tuple[str, dict]) -> list:
    """Run tool calls in one client session; return the CallToolResults."""
    async def main():
        async with Client(server) as client:
            return [await client.call_tool(name, args) for name, args in calls]
    return anyio.run(main)


def test_tools_are_listed_with_descriptions_and_output_schemas(setup):
    async def main():
        async with Client(build_server(setup[1])) as client:
            return (await client.list_tools()).tools
    tools = {t.name: t for t in anyio.run(main)}
    assert set(tools) == {"list_problems", "show_problem", "run_correctness", "benchmark", "submit"}
    assert "load_state_dict" in tools["run_correctness"].description
    assert "secret" in tools["run_correctness"].description and "2 trials" not in tools["run_correctness"].description
    assert "hidden re-check" in tools["submit"].description
    assert "torch.compile" in tools["benchmark"].description
    for name in ("run_correctness", "benchmark", "submit"):
        schema = tools[name].output_schema
        assert set(schema["required"]) == {"verdict", "summary", "result"}
        arguments = set(tools[name].input_schema["properties"])
        assert {"problem", "solution_source", "solution_path", "device", "sets"} <= arguments


def test_list_and_show_problems(setup):
    listed, shown, tiny, unknown = call(build_server(setup[1]), ("list_problems", {}),
                                        ("show_problem", {"problem": "l1/19"}),
                                        ("show_problem", {"problem": str(setup[0]), "preset": "tiny"}),
                                        ("show_problem", {"problem": "l9/999"}))
    problems = {p["name"]: p for p in listed.structured_content["problems"]}
    relu = problems["level1/19_ReLU"]
    assert "small" in relu["presets"] and "pytorch" in relu["solutions"] and relu["constants"]["dim"] == 8192
    assert any(name.startswith("level2/51_") for name in problems)

    detail = shown.structured_content
    assert detail["name"] == "level1/19_ReLU" and detail["builtin"] is True
    assert "class Model" in detail["source"] and "def get_inputs" in detail["source"]
    assert detail["constants"] == detail["file_constants"] == {"batch_size": 4096, "dim": 8192}
    assert detail["presets"]["small"] == {"batch_size": 16, "dim": 1024}
    assert detail["solutions"]["pytorch"].endswith("pytorch.py") and detail["solution_sources"] == {}

    assert tiny.structured_content["constants"] == {"batch": 2, "n": 16}
    assert unknown.is_error and "no problem file 'l9/999'" in unknown.content[0].text


def test_run_correctness_from_source_and_path(setup, tmp_path):
    problem, options = setup
    wrong_path = tmp_path / "wrong.py"
    wrong_path.write_text(WRONG)
    good, wrong, sized = call(build_server(options),
                              ("run_correctness", {"problem": str(problem), "solution_source": GOOD, "device": "cpu"}),
                              ("run_correctness", {"problem": str(problem), "solution_path": str(wrong_path)}),
                              ("run_correctness", {"problem": str(problem), "solution_source": GOOD,
                                                   "sets": {"batch": 3}, "trials": 3}))
    assert not good.is_error
    out = good.structured_content
    assert out["verdict"] == "pass" and out["result"]["verdict"] == "pass" and out["result"]["correct"] is True
    assert out["summary"].startswith("verdict: pass") and "(2 / 2) trials passed" in out["summary"]
    assert out["result"]["timing"] is None  # run_correctness never times
    assert out["result"]["candidate"]["path"].endswith("candidate.py")
    assert json.loads(good.content[0].text) == out  # the same, as text, for clients that ignore structure

    out = wrong.structured_content
    assert out["verdict"] == "fail" and "wrong-output" in out["summary"] and "fix:" in out["summary"]
    assert [f["code"] for f in out["result"]["findings"] if f["severity"] == "fail"] == ["wrong-output"]
    assert out["result"]["candidate"]["path"] == str(wrong_path.resolve())

    out = sized.structured_content
    assert out["result"]["problem"]["constants"]["batch"] == 3 and len(out["result"]["trials"]) == 3


def test_usage_errors_are_tool_errors(setup):
    problem, options = setup
    unknown_constant, both = call(build_server(options),
                                  ("run_correctness", {"problem": str(problem), "solution_source": GOOD,
                                                       "sets": {"nope": 3}}),
                                  ("run_correctness", {"problem": str(problem), "solution_source": GOOD,
                                                       "solution_path": "x.py"}))
    assert unknown_constant.is_error and "unknown constant nope" in unknown_constant.content[0].text
    assert both.is_error and "not both" in both.content[0].text


def test_benchmark_and_submit(setup, tmp_path):
    problem, options = setup
    store_path = tmp_path / "results.sqlite"
    bench, submitted = call(build_server(options.replace(store_path=store_path)),
                            ("benchmark", {"problem": str(problem), "solution_source": GOOD, "budget_ms": 30}),
                            ("submit", {"problem": str(problem), "solution_source": GOOD}))
    for result in (bench, submitted):
        assert not result.is_error, result.content
        out = result.structured_content
        assert out["verdict"] == "pass" and out["result"]["correct"] is True
        assert len(json.dumps(out)) <= MAX_OUTPUT_CHARS
    assert submitted.structured_content["result"]["protocol"] == "strict"
    timing = bench.structured_content["result"]["timing"]
    assert timing["candidate"]["median_ms"] > 0 and "timing:" in bench.structured_content["summary"]
    assert [r["verdict"] for r in Store(store_path).history()] == ["pass", "pass"]  # both recorded


def test_trim_result_keeps_output_within_bound(setup):
    result = Result(verdict="error", findings=(), trials=(), problem={"name": "p"}, candidate={}, device={},
                    versions={}, protocol="strict", worker_output_tail="x" * 50_000 + "THE END",
                    timing={"candidate": {"samples_ms": [0.1] * 5000}})
    out = judge_output(result, max_chars=8_000)
    assert len(json.dumps(out)) <= 8_000
    assert out["result"]["worker_output_tail"].endswith("THE END") and "worker_output_tail" in out["result"]["trimmed"]
    assert len(out["result"]["timing"]["candidate"]["samples_ms"]) <= 64
    tiny = trim_result(result.to_json(), 300)
    assert tiny["verdict"] == "error" and "trimmed" in tiny and len(json.dumps(tiny)) < 400


def test_stdio_server_serves_tools(tmp_path):
    """`run_stdio` (what `kerneljudge mcp` runs) answers a real client over stdin/stdout."""
    import sys

    from mcp import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, args=["-c", "from kerneljudge.mcp_server import run_stdio; "
                                                                        "run_stdio()"],
                                   env={"KERNELJUDGE_STORE": str(tmp_path / "r.sqlite"), "PYTHONDONTWRITEBYTECODE": "1",
                                        "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})

    async def main():
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            shown = await client.call_tool("show_problem", {"problem": "l1/19"})
            return {t.name for t in tools}, shown
    names, shown = anyio.run(main)
    assert "run_correctness" in names and shown.structured_content["name"] == "level1/19_ReLU"
