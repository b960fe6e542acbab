"""Problem lint (issue 19): a small synthetic problem per finding and a clean one with none, all linted in
one referee; level2/51 flagged for its size-1 logsumexp and its mean-of-linear collapse; the
`problem-degenerate` notice on evaluations (cached, verdicts unchanged); the CLI on a folder.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from conftest import codes, parse_json

from kerneljudge import api, cache
from kerneljudge.problemlint import judge

HEADER = "import torch\nimport torch.nn as nn\n\n"
CONSTANTS = "batch_size = 8\ndim = 64\n\n"
ONE_INPUT = "def get_inputs():\n    return [torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n"


def _problem(forward: str, *, init: str = "", inputs: str = ONE_INPUT, constants: str = CONSTANTS) -> str:
    body = textwrap.indent(textwrap.dedent(init), "        ") if init else "        pass\n"
    return (HEADER + "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n" + body
            + "\n    def forward(self, x):\n" + textwrap.indent(textwrap.dedent(forward), "        ")
            + "\n" + constants + inputs)


CLEAN = (HEADER + textwrap.dedent("""
    class Model(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.linear = nn.Linear(dim, dim)

        def forward(self, x):
            return torch.relu(self.linear(x))

    batch_size = 256
    dim = 256

    def get_inputs():
        return [torch.randn(batch_size, dim)]

    def get_init_inputs():
        return [dim]
    """))

#: name -> (source, the finding it must raise)
PROBLEMS = {
    "tiny": (_problem("return x * 1e-6\n"), "problem-tiny-output"),
    "constant": (_problem("return torch.zeros_like(x) + 3.0 + 1e-7 * x\n"), "problem-trivial-output"),
    "seed": (_problem("return x.sum() * 0 + torch.ones_like(x) * 2 + 1e-7 * x.mean()\n"),
             "problem-insensitive-seed"),
    "input": (_problem("return x * 2", inputs="def get_inputs():\n    return [torch.randn(batch_size, dim), "
                       "torch.randn(batch_size, dim)]\n\ndef get_init_inputs():\n    return []\n")
              .replace("def forward(self, x):\n        return x * 2", "def forward(self, x, y):\n"
                       "        return x * 2 + 1e-9 * y"), "problem-insensitive-input"),
    "parameter": (_problem("return x * 2\n", init="self.unused = nn.Parameter(torch.randn(4))\n"),
                  "problem-insensitive-parameter"),
    "saturated": (_problem("return torch.tanh(x * 1000)\n"), "problem-saturated"),
    "nonfinite": (_problem("return torch.log(x - 100)\n"), "problem-nonfinite"),
    "nondeterministic": (_problem("return x + torch.rand_like(x)\n"), "problem-nondeterministic"),
    "size_one": (_problem("return torch.logsumexp(x.sum(dim=1, keepdim=True), dim=1, keepdim=True) * x\n"),
                 "problem-redundant-op"),
    "identity": (_problem("return torch.relu(torch.sigmoid(x))\n"), "problem-redundant-op"),
    "unused": (_problem("y = torch.exp(x)\nreturn x * 2\n"), "problem-redundant-op"),
    "collapse": (_problem("return self.linear(x).mean(dim=-1, keepdim=True) + x\n",
                          init="self.linear = nn.Linear(64, 32)\n"), "problem-algebraic-collapse"),
    "oversized": (_problem("return x * 2\n", constants="batch_size = 2 ** 22\ndim = 2 ** 22\n\n"),
                  "problem-oversized"),
    "unreachable": (_problem("return x * 2\n", inputs="def get_inputs():\n    return [torch.randn(batch_size, 64)]"
                             "\n\ndef get_init_inputs():\n    return []\n"), "problem-unreachable-size"),
    "tiny_launch": (_problem("return x + 1\n", constants="batch_size = 2\ndim = 2\n\n"), None),
}


@pytest.fixture(scope="module")
def linted(tmp_path_factory, cache_dir):
    """Every synthetic problem, the clean one and level2/51, linted in one referee (timed)."""
    folder = tmp_path_factory.mktemp("problems")
    paths = []
    for name, (source, _) in {**PROBLEMS, "clean": (CLEAN, None)}.items():
        path = folder / f"{name}.py"
        path.write_text(source)
        paths.append(str(path))
    options = judge.Options(device="cpu", cache_dir=cache_dir, store_path=None)
    results = judge.lint_problems((*paths, "level2/51"), options, timed=True)
    return {r.name.split("/")[0].removesuffix(".py") if "level" not in r.name else "level2/51": r for r in results}


@pytest.mark.parametrize("name", sorted(PROBLEMS.keys() - {"tiny_launch"}))
def test_each_synthetic_problem_raises_its_finding(linted, name):
    result = linted[name]
    assert PROBLEMS[name][1] in {f.code for f in result.findings}, [(f.code, f.message) for f in result.findings]
    assert all(f.fix for f in result.findings)


def test_the_clean_problem_raises_nothing(linted):
    result = linted["clean"]
    assert result.findings == () and not result.flagged
    assert result.facts["reference_ms"] >= judge_launch_bound_ms()  # timed at its own sizes, and not tiny
    assert result.facts["parameters_checked"] == [2, 2]


def judge_launch_bound_ms() -> float:
    from kerneljudge.problemlint.analysis import LAUNCH_BOUND_MS  # the referee side, imported for its threshold

    return LAUNCH_BOUND_MS


def test_launch_bound_follows_the_measured_time(linted):
    result = linted["tiny_launch"]
    flagged = "problem-launch-bound" in {f.code for f in result.findings}
    assert flagged == (result.facts["reference_ms"] < judge_launch_bound_ms())


def test_what_each_finding_says(linted):
    by_code = {f.code: f for f in linted["tiny"].findings}
    assert by_code["problem-tiny-output"].details["precision"] == "float32"
    assert {f.details["trivial"] for f in linted["tiny"].findings if f.code == "problem-trivial-output"} >= {"zeros"}
    assert linted["input"].findings[[f.code for f in linted["input"].findings].index(
        "problem-insensitive-input")].details["input"] == 1
    parameter = next(f for f in linted["parameter"].findings if f.code == "problem-insensitive-parameter")
    assert parameter.details["parameters"] == ["unused"]
    identity = next(f for f in linted["identity"].findings if f.code == "problem-redundant-op")
    assert identity.details["kind"] == "identity" and identity.details["op"] == "relu"
    unused = next(f for f in linted["unused"].findings if f.code == "problem-redundant-op")
    assert unused.details["kind"] == "unused" and unused.details["op"] == "exp"
    oversized = linted["oversized"]
    assert oversized.shrunk and "lowered" in oversized.sizes  # linted at smaller sizes, and says so
    assert oversized.constants["batch_size"] < 2 ** 22


def test_level2_51_is_flagged_for_its_size_one_logsumexp_and_its_collapse(linted):
    result = linted["level2/51"]
    assert result.preset == "small"
    redundant = [f for f in result.findings if f.code == "problem-redundant-op"]
    assert any(f.details["op"] == "logsumexp" and f.details["kind"] == "size-one" for f in redundant)
    collapse = next(f for f in result.findings if f.code == "problem-algebraic-collapse")
    assert collapse.details["linear"] == "gemm" and "mean" in collapse.details["chain"]


def test_evaluations_carry_the_notice_from_the_cache_and_keep_their_verdict(tmp_path, fast):
    problem = tmp_path / "tiny.py"
    problem.write_text(PROBLEMS["tiny"][0])
    zeros = tmp_path / "zeros.py"
    zeros.write_text("import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
                     "    def forward(self, x):\n        return torch.zeros_like(x)\n")
    options = fast.replace(cache_dir=tmp_path / "cache")
    first = api.check(problem, zeros, options)
    assert first.verdict == "pass"  # a wrong kernel on a degenerate problem: the verdict is the judge's, as before
    notice = next(f for f in first.findings if f.code == "problem-degenerate")
    assert notice.severity == "warn" and "zeros pass" in notice.message
    entries = list((tmp_path / "cache" / judge.SECTION).glob("*.json"))
    assert len(entries) == 1  # written by the judge, keyed on the problem's content and sizes
    data = json.loads(entries[0].read_text())
    data["findings"][0]["message"] = "marker from the cache"
    cache.save(tmp_path / "cache", judge.SECTION, entries[0].stem, data)
    second = api.check(problem, zeros, options)
    assert "marker from the cache" in next(f for f in second.findings if f.code == "problem-degenerate").message
    assert second.verdict == first.verdict


def test_an_honest_kernel_on_a_clean_problem_gets_no_notice(tmp_path, fast):
    problem = tmp_path / "clean.py"
    problem.write_text(CLEAN)
    honest = tmp_path / "honest.py"
    honest.write_text(CLEAN.split("batch_size")[0].replace("class Model(", "class ModelNew("))
    result = api.check(problem, honest, fast.replace(cache_dir=tmp_path / "cache"))
    assert result.verdict == "pass" and "problem-degenerate" not in codes(result)


def test_cli_lints_a_folder_and_says_the_sizes(kj, tmp_path):
    folder = tmp_path / "level9"
    folder.mkdir()
    (folder / "1_Clean.py").write_text(CLEAN)
    (folder / "2_Tiny.py").write_text(PROBLEMS["tiny"][0])
    code, out, err = kj("lint-problem", "--json", "--no-timing", str(folder))
    assert code == 1, err  # a problem is flagged
    data = parse_json(out)
    assert [p["name"] for p in data["problems"]] == ["level9/1_Clean", "level9/2_Tiny"]
    assert data["problems"][0]["findings"] == [] and data["problems"][0]["sizes"] == "the problem's own sizes"
    assert data["summary"]["flagged"] == 1 and data["summary"]["problems_per_finding"]["problem-tiny-output"] == 1


def test_sizes_named_dim1_and_dim2_are_lowered(tmp_path):
    """KernelBench's reductions name their sizes dim1 and dim2 (level1/47): lowered like any size (they were held
    as shape rules with `dim`, and the lint ran at 127 MiB)."""
    from kerneljudge.problem import load_problem
    from kerneljudge.problemlint import sizes

    path = tmp_path / "reduction.py"
    path.write_text(HEADER + textwrap.dedent("""
        class Model(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.dim = dim

            def forward(self, x):
                return torch.sum(x, dim=self.dim, keepdim=True)

        batch_size = 128
        dim1 = 4096
        dim2 = 4095
        reduce_dim = 1

        def get_inputs():
            return [torch.rand(batch_size, dim1, dim2)]

        def get_init_inputs():
            return [reduce_dim]
        """))
    problem = load_problem(path)
    wire = {"path": str(path), "source": problem.source, "constants": problem.constants}
    constants, shrunk = sizes.shrink(wire, problem.constants)
    assert {"dim1", "dim2"} & shrunk.keys(), shrunk
    assert sizes.cost(wire, constants).within()


def test_an_evaluations_lint_runs_nothing_where_the_sizes_stay_large(tmp_path):
    """Sizes written as literals cannot be lowered: at 256 MiB of inputs and outputs the evaluation's lint
    (`bounded`) says why it did not run, and the problem's forward never ran on a real tensor (it would leave a
    marker)."""
    import torch

    from kerneljudge.problemlint import analysis

    marker = tmp_path / "forward-ran"
    path = tmp_path / "literal.py"
    path.write_text(HEADER + textwrap.dedent(f"""
        class Model(nn.Module):
            def __init__(self):
                super().__init__()
                self.linear = nn.Linear(8192, 8192)

            def forward(self, x):
                if x.device.type != "meta":
                    open({str(marker)!r}, "w").close()
                return self.linear(x)

        def get_inputs():
            return [torch.randn(4096, 8192)]

        def get_init_inputs():
            return []
        """))
    wire = {"path": str(path), "source": path.read_text(), "constants": {}}
    reply = analysis.lint(wire, torch.device("cpu"), shrink=True, timed=False, bounded=True)
    assert reply["findings"] == [] and "256 MiB of inputs and outputs" in reply["skipped"], reply
    assert not marker.exists()


def test_an_evaluation_says_when_its_problem_was_not_linted_and_traces_the_lints_memory(tmp_path, fast):
    """A problem whose size cannot be measured on the meta device (its constructor reads a value) is not
    linted inside an evaluation: an info finding says so, from the cache the second time; the lint's stage has
    its own memory mark, so its peak is never counted as the check's."""
    problem = tmp_path / "reads_a_value.py"
    problem.write_text(_problem("return x * self.scale\n", init="self.scale = float(torch.ones(1).sum().item())\n"))
    honest = tmp_path / "honest.py"
    honest.write_text(problem.read_text().replace("class Model(", "class ModelNew("))
    options = fast.replace(cache_dir=tmp_path / "cache")
    for run in range(2):
        if run:  # the entry the first evaluation wrote, marked: the second reads it, not the referee
            (entry,) = (tmp_path / "cache" / judge.SECTION).glob("*.json")
            data = json.loads(entry.read_text())
            data["skipped"] = "marked " + data["skipped"]
            cache.save(tmp_path / "cache", judge.SECTION, entry.stem, data)
        result = api.check(problem, honest, options)
        assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]
        skipped = next(f for f in result.findings if f.code == "problem-lint-skipped")
        assert skipped.severity == "info" and "meta device (RuntimeError" in skipped.message, skipped.message
        assert "lint-problem" in skipped.message and skipped.message.startswith(
            "the problem was not linted in this evaluation: " + "marked " * run)
        assert "problem-lint" in result.memory["stages"] and "check" in result.memory["stages"], result.memory
