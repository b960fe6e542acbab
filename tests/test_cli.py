"""The core judge through the command line (issue "Core judge"): verdicts, findings, exit codes and
output formats of `kerneljudge eval` and `kerneljudge problems`, on real evaluations.

Exit codes: 0 every candidate passed, 1 some candidate was wrong, 2 some candidate could not be judged
(or a usage error). Several candidates share one CLI call where that is natural (`eval PROBLEM A B ...`
prints {"results": [...]}), so the file stays fast on a 2-core machine.
"""

from __future__ import annotations

import json
import re

import pytest
from conftest import CANDIDATES, SEED, codes, parse_json

from kerneljudge import suite
from kerneljudge.records import Result

CORE = CANDIDATES / "core"
CPU = ("--device", "cpu", "--no-store")
NO_TIMING = (*CPU, "--no-timing")
RESULT_KEYS = {"verdict", "correct", "findings", "trials", "timing", "speedup", "problem", "candidate", "device",
               "versions"}


def cand(name: str) -> str:
    return str(CORE / name)


def by_candidate(payload: dict, names: list[str]) -> dict[str, dict]:
    """{"results": [...]} in the order given on the command line, keyed by candidate file name."""
    results = payload["results"]
    assert len(results) == len(names)
    return dict(zip(names, results))


def finding(result: dict, code: str) -> dict:
    found = [f for f in result["findings"] if f["code"] == code]
    assert found, f"no {code} finding in {[(f['code'], f['message']) for f in result['findings']]}"
    return found[0]


# --- 1. pass and fail, as JSON ----------------------------------------------------------------------

def test_eval_json_correct_candidate_passes(kj):
    """The documented command, with a short timing budget: exit 0 and exactly one JSON object."""
    rc, out, err = kj("eval", "level2/51", cand("correct.py"), "--set", "batch_size=64", "--set", "in_features=256",
                      "--set", "out_features=128", *CPU, "--json", "--budget-ms", "50", "--no-baselines")
    assert rc == 0, err
    result = parse_json(out)
    assert isinstance(result, dict) and RESULT_KEYS <= set(result)
    assert result["verdict"] == "pass" and result["correct"] is True
    for f in result["findings"]:
        assert isinstance(f["code"], str) and f["severity"] in ("fail", "warn", "info") and f["message"]
        assert f["severity"] != "fail"
    assert len(result["trials"]) == 5 and all(t["passed"] for t in result["trials"])
    assert all(t["max_abs_err"] < 1e-4 for t in result["trials"])
    assert result["problem"]["name"].startswith("level2/51_")
    assert result["problem"]["constants"] == {"batch_size": 64, "in_features": 256, "out_features": 128}
    assert result["candidate"]["path"] == str(CORE / "correct.py") and result["candidate"]["label"] == "pytorch"
    assert result["device"]["type"] == "cpu"
    assert {"torch", "python", "kerneljudge"} <= set(result["versions"])
    assert result["timing"]["candidate"]["median_ms"] > 0  # timing ran (no baselines: no speedup figures)
    assert "error" not in err.lower()


def test_eval_wrong_answers_fail_with_exit_1(kj):
    """Wrong values, shape, dtype, None and a non-tensor: each verdict fail with its own finding."""
    names = ["wrong.py", "wrong_shape.py", "wrong_dtype.py", "returns_none.py", "returns_nontensor.py",
             "off_by_5e3.py"]
    rc, out, err = kj("eval", SEED, *map(cand, names), *NO_TIMING, "--json")
    assert rc == 1, err
    results = by_candidate(parse_json(out), names)
    for name, result in results.items():
        assert result["verdict"] == "fail", name
        assert result["correct"] is False, name
        assert Result.from_json(result).exit_code == 1
        assert result["trials"] and not any(t["passed"] for t in result["trials"]), name
        assert not any(f["severity"] == "fail" and f["code"] not in
                       ("wrong-output", "output-shape", "output-dtype", "output-none", "output-type")
                       for f in result["findings"]), (name, codes(result))

    wrong = results["wrong.py"]
    assert "wrong-output" in codes(wrong)
    assert len(wrong["trials"]) == 5
    for t in wrong["trials"]:
        assert t["max_abs_err"] > 0.1 and 0 < t["mean_abs_err"] <= t["max_abs_err"] and t["max_rel_err"] > 1e-4
        assert t["mismatched"] > 0 and t["atol"] == pytest.approx(1e-4)
    assert "max_abs_err=" in finding(wrong, "wrong-output")["message"]

    shape = finding(results["wrong_shape.py"], "output-shape")["message"]
    assert "(64, 1)" in shape and "(64, 256)" in shape
    dtype = finding(results["wrong_dtype.py"], "output-dtype")["message"]
    assert "float64" in dtype and "float32" in dtype
    assert "None" in finding(results["returns_none.py"], "output-none")["message"]
    assert "ndarray" in finding(results["returns_nontensor.py"], "output-type")["message"]
    off = results["off_by_5e3.py"]
    assert "wrong-output" in codes(off)
    assert all(4e-3 < t["max_abs_err"] < 6e-3 for t in off["trials"])


# --- 2. inputs that cannot be judged: exit 2, one clear finding each -------------------------------

def test_eval_unjudgeable_candidates_exit_2(kj):
    names = ["missing.py", "syntax_error.py", "import_error.py", "no_modelnew.py", "modelnew_function.py",
             "ctor_mismatch.py", "forward_raises.py", "oom.py"]
    expected = {
        "missing.py": ("candidate-invalid", ["no candidate file", "missing.py"]),
        "syntax_error.py": ("candidate-invalid", ["syntax_error.py", "line 6", "def forward(self, x)"]),
        "import_error.py": ("import-error", ["ModuleNotFoundError", "nonexistent_module", "import_error.py:2"]),
        "no_modelnew.py": ("missing-modelnew", ["ModelNew", "MyModel"]),
        "modelnew_function.py": ("missing-modelnew", ["ModelNew as a function, not a class"]),
        "ctor_mismatch.py": ("constructor-error", ["ModelNew(*get_init_inputs())", "TypeError", "positional"]),
        "forward_raises.py": ("forward-error", ["ValueError", "kj-forward-boom", "forward_raises.py:12"]),
        "oom.py": ("out-of-memory", ["ran out of memory", "oom.py:12"]),
    }
    rc, out, err = kj("eval", SEED, *map(cand, names), *NO_TIMING, "--json")
    assert rc == 2, err
    results = by_candidate(parse_json(out), names)
    for name, result in results.items():
        code, needles = expected[name]
        assert result["verdict"] == "error", (name, codes(result))
        assert Result.from_json(result).exit_code == 2
        failing = [f for f in result["findings"] if f["severity"] in ("error", "fail")]
        assert [(f["code"], f["severity"]) for f in failing] == [(code, "error")], \
            (name, [(f["code"], f["message"]) for f in failing])
        message = failing[0]["message"]
        for needle in needles:
            assert needle in message, (name, needle, message)
        assert len(message) < 1500 and "Traceback" not in message, (name, message)
        assert failing[0]["fix"]


def test_a_candidate_saved_with_a_byte_order_mark_and_crlf_is_judged_as_python_reads_it(kj, tmp_path):
    """An editor's UTF-8 byte-order mark and Windows line ends: Python imports such a file, so the judge reads it
    the same way (it was `candidate-invalid`: "invalid non-printable character U+FEFF")."""
    candidate = tmp_path / "bom_crlf.py"
    candidate.write_bytes(b"\xef\xbb\xbf" + (CORE / "correct.py").read_bytes().replace(b"\n", b"\r\n"))
    rc, out, err = kj("eval", SEED, str(candidate), *NO_TIMING, "--json")
    result = parse_json(out)
    assert rc == 0 and result["verdict"] == "pass", (err, codes(result))


def test_compile_error_shows_the_compiler_error_line(kj):
    """A C++ extension that does not compile: compile-error with the compiler's error line (file:line),
    not the compile command or ninja's log."""
    rc, out, err = kj("eval", "level1/19", cand("compile_error.py"), *NO_TIMING, "--json")
    assert rc == 2, err
    result = parse_json(out)
    assert result["verdict"] == "error" and result["candidate"]["kinds"] == ["cpp"]
    message = finding(result, "compile-error")["message"]
    assert re.search(r"main\.cpp:\d+:\d+: fatal error: kj_no_such_header\.h", message), message
    assert "-MMD" not in message and "-isystem" not in message, message  # the command line is not an error line
    assert "ninja" not in message and "Traceback" not in message and len(message) < 800, message


def test_missing_problem_file_exits_2(kj, tmp_path):
    rc, out, err = kj("eval", str(tmp_path / "no_such_problem.py"), cand("correct.py"), *NO_TIMING, "--json")
    assert rc == 2, err
    result = parse_json(out)
    assert result["verdict"] == "error"
    message = finding(result, "problem-invalid")["message"]
    assert "no problem file" in message and "no_such_problem.py" in message


def test_malformed_problem_file_exits_2(kj, tmp_path):
    problem = tmp_path / "no_inputs.py"
    problem.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                       "        return x\n\n\ndef get_init_inputs():\n    return []\n")
    rc, out, err = kj("eval", str(problem), cand("correct.py"), *NO_TIMING)
    assert rc == 2, err
    assert "problem-invalid" in out and "get_inputs" in out


def test_unknown_constant_exits_2_listing_the_known_ones(kj):
    rc, out, err = kj("eval", SEED, cand("correct.py"), "--set", "nonexistent=3", *NO_TIMING, "--json")
    assert rc == 2  # a usage error: with --json, still exactly one JSON object on stdout
    result = parse_json(out)
    assert result["verdict"] == "error" and "nonexistent" in result["error"]
    assert all(name in result["error"] for name in ("batch_size", "in_features", "out_features")), out
    assert "Traceback" not in err
    rc, out, err = kj("eval", SEED, cand("correct.py"), "--set", "nonexistent=3", *NO_TIMING)
    assert rc == 2 and out == "" and "nonexistent" in err  # without --json: the message on stderr


def test_unknown_device_exits_2(kj):
    rc, out, err = kj("eval", SEED, cand("correct.py"), "--device", "gpu", "--no-store", "--no-timing")
    assert rc == 2 and out == ""
    assert "gpu" in err and "cpu" in err and "Traceback" not in err


def test_candidate_raising_during_timing_is_reported_not_a_crash(kj):
    rc, out, err = kj("eval", SEED, cand("raises_when_timed.py"), *CPU, "--json", "--budget-ms", "100",
                      "--no-baselines")
    assert "Traceback" not in err, err[-1500:]
    assert rc == 2
    result = parse_json(out)
    assert result["verdict"] == "error" and "kj-fails-when-timed" in json.dumps(result["findings"])


# --- 3. --json stdout stays pure -------------------------------------------------------------------

def test_json_stdout_survives_a_candidate_that_prints(kj):
    rc, out, err = kj("eval", SEED, cand("noisy_stdout.py"), *NO_TIMING, "--json")
    assert rc == 0, err
    result = json.loads(out)  # exactly one JSON object, nothing else on stdout
    assert result["verdict"] == "pass"
    assert "hello from import" not in out and "forward says hi" not in out


# --- 4. the human report -----------------------------------------------------------------------------

def test_human_report_correctness_line(kj):
    rc, out, err = kj("eval", SEED, cand("correct.py"), *NO_TIMING)
    assert rc == 0, err
    assert re.search(r"^correctness: \(5 / 5\) trials passed, max_abs_err=\d", out, re.MULTILINE), out
    assert "PASS" in out


def test_human_report_trials_option(kj):
    rc, out, err = kj("eval", SEED, cand("correct.py"), cand("wrong.py"), "--trials", "3", *NO_TIMING)
    assert rc == 1, err
    assert re.search(r"^correctness: \(3 / 3\) trials passed, max_abs_err=\d", out, re.MULTILINE), out
    assert re.search(r"^correctness: \(0 / 3\) trials passed, max_abs_err=\d", out, re.MULTILINE), out
    assert "wrong-output" in out


# --- 5. shipped solutions and presets ----------------------------------------------------------------

def test_default_solution_on_cpu_uses_pytorch_and_small_preset(kj):
    rc, out, err = kj("eval", "level2/51", *NO_TIMING, "--json")
    assert rc == 0, err
    result = parse_json(out)
    assert result["verdict"] == "pass"
    assert result["candidate"]["path"] == str(suite.shipped_solutions(result["problem"]["name"])["pytorch"])
    assert result["problem"]["preset"] == "small"
    assert result["problem"]["constants"] == {"batch_size": 64, "in_features": 256, "out_features": 128}
    assert "'small'" in finding(result, "preset-used")["message"]


def test_shipped_triton_solution_runs_under_the_interpreter(kj):
    rc, out, err = kj("eval", "level2/51", "@triton", *NO_TIMING, "--json")
    assert rc == 0, err
    result = parse_json(out)
    assert result["verdict"] == "pass", codes(result)
    assert result["candidate"]["kinds"] == ["triton"] and result["candidate"]["path"].endswith("triton.py")
    calls = result["probes"]["op_trace"]["own_calls"]  # the Triton kernel itself ran, on the CPU
    assert calls and all(n > 0 for n in calls.values()), result["probes"]
    assert "decoy-kernel" not in codes(result)


def test_shipped_cpp_solution_builds_and_passes(kj, cpp_built):
    rc, out, err = kj("eval", "level1/19", "@cpp", *NO_TIMING, "--json",
                      env={"KERNELJUDGE_CACHE_DIR": str(cpp_built[0])})  # built once for the session
    assert rc == 0, err
    result = parse_json(out)
    assert result["verdict"] == "pass", [(f["code"], f["message"]) for f in result["findings"]]
    assert result["candidate"]["kinds"] == ["cpp"]
    assert result["build"]["cache"] in ("hit", "miss") and "kj_relu_cpp" in result["build"]["extensions"]
    assert result["problem"]["preset"] == "small"
    # its extension function counted at the native boundary where it ran (issue 14)
    assert result["probes"]["op_trace"]["own_calls"] == {"kj_relu_cpp.relu_forward": 1}


def test_unknown_variant_exits_2(kj):
    rc, out, err = kj("eval", "level1/19", "@triton", *NO_TIMING, "--json")
    assert rc == 2
    message = parse_json(out)["error"]
    assert "triton" in message and "cpp" in message and "pytorch" in message


# --- 7. problems ---------------------------------------------------------------------------------------

def test_problems_lists_the_builtin_suite(kj):
    rc, out, err = kj("problems", "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert len(rows) == 6
    assert [r["name"] for r in rows] == [e.name for e in suite.list_problems()]
    assert all(r["presets"] == ["small"] and r["constants"] for r in rows)
    by_name = {r["name"].split("_")[0]: r for r in rows}
    assert by_name["level2/51"]["solutions"] == ["cuda", "pytorch", "triton"]
    assert by_name["level1/19"]["solutions"] == ["cpp", "pytorch"]
    rc, out, err = kj("problems")
    assert rc == 0 and "level1/19_ReLU" in out and "small" in out


PROBLEM_TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x * 2


size = {size}
{presets}

def get_inputs():
    return [torch.randn(size)]


def get_init_inputs():
    return []
'''


def test_problems_lists_a_kernelbench_folder(kj, tmp_path):
    root = tmp_path / "KernelBench"
    files = {"level1/1_Foo.py": 16, "level1/10_Ten.py": 8, "level1/2_Bar.py": 32, "level2/3_Baz.py": 4}
    for rel, size in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        presets = 'PRESETS = {"small": {"size": 2}}\n' if rel.startswith("level2") else ""
        (root / rel).write_text(PROBLEM_TEMPLATE.format(size=size, presets=presets))
    (root / "level1" / "notes.py").write_text("x = 1\n")  # not <num>_<name>.py: not a problem
    (root / "misc").mkdir()
    (root / "misc" / "4_Other.py").write_text(PROBLEM_TEMPLATE.format(size=1, presets=""))  # not a level folder
    rc, out, err = kj("problems", str(root), "--json")
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["name"] for r in rows] == ["level1/1_Foo", "level1/2_Bar", "level1/10_Ten", "level2/3_Baz"]
    assert [r["constants"] for r in rows] == [{"size": 16}, {"size": 32}, {"size": 8}, {"size": 4}]
    assert [r["presets"] for r in rows] == [[], [], [], ["small"]]
    assert rows[0]["path"] == str(root / "level1" / "1_Foo.py")
    rc, out, err = kj("problems", str(root))
    assert rc == 0 and "level1/10_Ten" in out and "level2/3_Baz" in out


# --- 9. tolerance -----------------------------------------------------------------------------------------

def test_tolerance_override(kj):
    """off_by_5e3.py fails at the default tolerance (test_eval_wrong_answers_fail_with_exit_1) and passes here."""
    rc, out, err = kj("eval", SEED, cand("off_by_5e3.py"), "--atol", "1e-2", "--rtol", "1e-2", *NO_TIMING, "--json")
    assert rc == 0, err
    result = parse_json(out)
    assert result["verdict"] == "pass"
    assert all(t["atol"] == 1e-2 and t["rtol"] == 1e-2 and t["passed"] for t in result["trials"])


def test_the_exit_code_is_the_verdicts_when_the_reader_of_stdout_leaves_early(cache_dir, tmp_path):
    """`kerneljudge eval ... | head -1`: the reader is gone before the report is written (here before the judge
    starts). click and rich answer a broken pipe with exit 1, which means "fail"; the verdict's code is kept."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "KERNELJUDGE_CACHE_DIR": str(cache_dir),
           "KERNELJUDGE_SOCKET": str(tmp_path / "no-server" / "judge.sock")}
    judges = []
    for extra, solution, expected in (((), "@pytorch", 0), (("--json",), cand("wrong.py"), 1)):  # side by side
        read, write = os.pipe()
        os.close(read)  # no reader at all: the first write fails
        judges.append((subprocess.Popen([sys.executable, "-m", "kerneljudge", "eval", SEED, solution, *NO_TIMING,
                                         *extra], stdout=write, stderr=subprocess.PIPE, env=env), expected))
        os.close(write)
    for judge, expected in judges:
        stderr = judge.communicate(timeout=300)[1].decode()
        assert judge.returncode == expected, stderr[-2000:]
        assert "Traceback" not in stderr, stderr[-2000:]
