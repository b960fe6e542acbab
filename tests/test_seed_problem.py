"""The seed problem's shipped solutions under the strict judge beyond the benchmark shape: odd sizes,
batch 1, bias=False, misaligned and non-contiguous inputs (CPU; the Triton one through its interpreter)."""

from __future__ import annotations

import pytest

from conftest import codes

from kerneljudge import api, suite

SEED_ENTRY = suite.find_builtin("level2/51")
SHIPPED = suite.shipped_solutions(SEED_ENTRY.name)
VARIANTS = ["@pytorch", "@triton"]


def variant_problem(tmp_path, *, init: str | None = None, inputs: str | None = None):
    """The seed problem with get_init_inputs() or get_inputs() replaced (same Model)."""
    source = SEED_ENTRY.path.read_text()
    if init:
        source = source.replace("return [in_features, out_features]", init)
    if inputs:
        source = source.replace("return [torch.rand(batch_size, in_features)]", inputs)
    path = tmp_path / "51_variant.py"
    path.write_text(source)
    return path


def judge(problem, solution, fast, preset=None, **sets):
    """The strict check of a shipped solution (`@variant`) against `problem`, at the sizes given."""
    options = fast.replace(overrides=tuple((k, str(v)) for k, v in sets.items()), preset=preset)
    return api.check(problem, SHIPPED[solution[1:]], options)


@pytest.mark.parametrize("solution", VARIANTS)
def test_odd_width_and_batch_one(fast, solution):
    result = judge("level2/51", solution, fast, preset="small", in_features=255, batch_size=1)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity == "fail"]
    assert result.problem["constants"]["in_features"] == 255


@pytest.mark.parametrize("solution", VARIANTS)
def test_bias_false(fast, tmp_path, solution):
    problem = variant_problem(tmp_path, init="return [in_features, out_features, False]")
    result = judge(problem, solution, fast, batch_size=16, in_features=96, out_features=40)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity == "fail"]
    assert "stale-parameters" not in codes(result)


@pytest.mark.parametrize("solution", VARIANTS)
def test_misaligned_non_contiguous_inputs(fast, tmp_path, solution):
    # every row starts one element past a 16-byte boundary and rows are strided: the safe path
    problem = variant_problem(tmp_path, inputs="return [torch.rand(batch_size, in_features + 3)[:, 1:in_features + 1]]")
    result = judge(problem, solution, fast, batch_size=8, in_features=64, out_features=32)
    assert result.verdict == "pass", [f.message for f in result.findings if f.severity == "fail"]
