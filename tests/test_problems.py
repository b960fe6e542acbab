"""Problems and their sizes (issue #11, items 4 and 11): `--set` reaches every size constant of every
KernelBench problem (expressions, chained and unpacking assignments, tuples and lists, floats,
booleans), bad values are usage errors naming the legal form, a candidate's same-named constants
follow the run's sizes, and `levelN/ID` resolves in a KernelBench checkout given by --problems-root.
"""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest
from conftest import codes, parse_json

from kerneljudge import api, sourcefile, suite
from kerneljudge.errors import ProblemError, UsageError
from kerneljudge.problem import load_problem
from kerneljudge.worker import build

KERNELBENCH = Path(__file__).parents[2] / "shared" / "kernelbench"
needs_kernelbench = pytest.mark.skipif(not (KERNELBENCH / "level1").is_dir(),
                                       reason="KernelBench's problems are not in ../shared/kernelbench")
PROBLEM_FILES = sorted(KERNELBENCH.glob("level[1-4]/*.py"))
L1_1 = "level1/1_Square_matrix_multiplication_.py"


def _used_module_names(tree: ast.Module) -> set[str]:
    """Module-level assigned names that get_inputs, get_init_inputs or class Model read."""
    assigned = {n.id for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    users = [s for s in tree.body if getattr(s, "name", None) in ("get_inputs", "get_init_inputs", "Model")]
    read = {n.id for s in users for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return assigned & read


def _changed(value):
    """A different legal value of the same kind (sizes grow by one, so they stay >= 1)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (tuple, list)):
        return type(value)(_changed(v) for v in value)
    return value + 1 if isinstance(value, int) else value + 0.5


def _as_cli(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple):
        return ",".join(map(repr, value))  # the bare form
    return repr(value)  # lists in brackets


def _executed_constants(source: str, names: set[str]) -> dict:
    """Python's own reading of the constants: run only the top-level assignments that bind them."""
    namespace: dict = {}
    for statement in ast.parse(source).body:
        bound = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if isinstance(statement, (ast.Assign, ast.AnnAssign)) and bound & names:
            exec(compile(ast.Module([statement], []), "<constants>", "exec"), namespace)  # noqa: S102
    return {k: namespace[k] for k in names if k in namespace}


# --- every constant of every KernelBench problem can be set ------------------------------------------

@needs_kernelbench
def test_every_constant_of_every_kernelbench_problem_is_reachable_with_set():
    assert len(PROBLEM_FILES) == 270
    unreachable, checked = [], 0
    for path in PROBLEM_FILES:
        source = path.read_text()
        tree = ast.parse(source)
        written = sourcefile.constants(tree)
        assert _executed_constants(source, set(written)) == written, path  # the evaluator agrees with Python
        for name in sorted(_used_module_names(tree) - set(written)):
            value = next(s.value for s in tree.body if isinstance(s, (ast.Assign, ast.AnnAssign))
                         and name in {n.id for n in ast.walk(s) if isinstance(n, ast.Name)})
            # what is not a constant is computed by code (a call, an attribute) or is a string
            if not any(isinstance(n, (ast.Call, ast.Attribute)) or (isinstance(n, ast.Constant)
                       and isinstance(n.value, str)) for n in ast.walk(value)):
                unreachable.append(f"{path.parent.name}/{path.name}: {name}")
        for name, value in written.items():
            new = _changed(value)
            problem = load_problem(path, overrides=((name, _as_cli(new)),))
            assert problem.constants[name] == new and problem.overrides[name] == new, (path, name)
            # what the worker runs: the constants as they cross the JSON channel, rewritten in the source
            sent = json.loads(json.dumps(problem.constants))
            rewritten = sourcefile.with_constants(source, build.changed_constants(source, sent), str(path))
            assert len(rewritten.splitlines()) == len(source.splitlines()), (path, name)
            assert _executed_constants(rewritten, {name})[name] == new, (path, name)
            checked += 1
    assert not unreachable, unreachable
    assert checked > 1400  # not a vacuous sweep: 1484 constants at KernelBench 423217d


@needs_kernelbench
def test_integer_expressions_chained_and_unpacking_assignments():
    problem = load_problem(KERNELBENCH / L1_1, overrides=(("N", "64"),))
    assert problem.constants == {"N": 64}
    eleven = KERNELBENCH / "level2/11_ConvTranspose2d_BatchNorm_Tanh_MaxPool_GroupNorm.py"
    source = eleven.read_text()  # `height = width = 2048` then `height, width = 32, 32`
    assert sourcefile.constants(ast.parse(source))["height"] == 32
    rewritten = sourcefile.with_constants(source, {"height": 8})
    assert _executed_constants(rewritten, {"height", "width"}) == {"height": 8, "width": 32}
    assert "height = 8; width = 2048" in rewritten and "height = 8; width = 32" in rewritten


@needs_kernelbench
def test_derived_constants_follow_the_constant_they_come_from():
    # groups = in_channels
    depthwise = KERNELBENCH / "level1/85_conv_depthwise_2D_asymmetric_input_asymmetric_kernel.py"
    problem = load_problem(depthwise, overrides=(("in_channels", "4"),))
    assert problem.constants["groups"] == 4 and problem.overrides == {"in_channels": 4, "groups": 4}
    resnet = KERNELBENCH / "level3/9_ResNet18.py"  # input_shape = (batch_size, 3, 224, 224)
    assert load_problem(resnet, overrides=(("batch_size", "3"),)).constants["input_shape"] == (3, 3, 224, 224)
    deep = KERNELBENCH / "level3/3_DeepNarrowMLP.py"  # hidden_layer_sizes = [1024] * 16
    assert load_problem(deep).constants["hidden_layer_sizes"] == [1024] * 16
    assert load_problem(deep, overrides=(("hidden_layer_sizes", "8,8"),)).constants["hidden_layer_sizes"] == [8, 8]
    bracketed = load_problem(deep, overrides=(("hidden_layer_sizes", "[8, 8, 8]"),))
    assert bracketed.constants["hidden_layer_sizes"] == [8] * 3


def test_the_evaluator_computes_numbers_and_refuses_code():
    tree = ast.parse(textwrap.dedent("""
        a = 2 ** 10 // 3 % 100 - -1
        b = a / 2
        c: int = (a, 1) * 2
        d = open("/etc/passwd")
        e = 10 ** 10 ** 10
        f = "text"
        g = 4
        def g(): pass
        h = 1
        h += 1
    """))
    assert sourcefile.constants(tree) == {"a": 42, "b": 21.0, "c": (42, 1, 42, 1)}
    for text in ("__import__('os')", "2 ** 1000", "1 / 0", "x", "[[1], [2]]", "'a'"):
        with pytest.raises(ValueError):
            sourcefile.parse_value(text)
    assert [sourcefile.parse_value(t) for t in ("1_024", "2048 * 2", "-1", "1e-5", "true", "8,8", "[8, 8]")] == \
        [1024, 4096, -1, 1e-5, True, (8, 8), [8, 8]]


def test_rewrites_keep_every_other_line_where_it_was():
    source = "a = [\n    16,\n    16,\n]  # sizes\nb = len(a); c = 2 * 3\nd = c + 1\n"
    rewritten = sourcefile.with_constants(source, {"a": [8], "c": 5})
    assert rewritten == "a = [8]\n\n\n  # sizes\nb = len(a); c = 5\nd = c + 1\n"
    assert sourcefile.constants(ast.parse(rewritten)) == {"a": [8], "c": 5, "d": 6}
    assert sourcefile.with_constants(source, {"a": [16, 16], "c": 6}) == source  # unchanged values: untouched


@needs_kernelbench
@pytest.mark.parametrize("problem, setting, says", [
    (L1_1, "N=0", "N is a size (a whole number >= 1)"),
    (L1_1, "N=-4", "N is a size (a whole number >= 1)"),
    (L1_1, "N=64.0", "N is a size (a whole number >= 1)"),
    (L1_1, "N=true", "N is a size"),
    (L1_1, "N=big", "is not a number"),
    ("level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
     "kernel_size=3,5", "kernel_size is a tuple of 3 values, each a size"),
    ("level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py",
     "padding=0,-1,0", "padding is a tuple of 3 values, each a whole number >= 0"),
    ("level3/1_MLP.py", "layer_sizes=[]", "layer_sizes is a list of one or more values"),
    ("level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py", "eps=1e999", "eps is a finite number"),
    ("level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py", "bias=1", "bias is a boolean"),
])
def test_a_value_of_the_wrong_kind_is_a_usage_error_naming_the_legal_form(problem, setting, says):
    name, _, text = setting.partition("=")
    with pytest.raises(UsageError, match=r"^--set ") as caught:
        load_problem(KERNELBENCH / problem, overrides=((name, text),))
    assert says in str(caught.value)


@needs_kernelbench
def test_values_that_are_not_sizes_take_their_own_range():
    conv = KERNELBENCH / "level1/72_conv_transposed_3D_asymmetric_input_asymmetric_kernel___strided_padded_grouped_.py"
    assert load_problem(conv, overrides=(("padding", "0,0,0"),)).constants["padding"] == (0, 0, 0)
    reduction = KERNELBENCH / "level1/47_Sum_reduction_over_a_dimension.py"  # reduce_dim = 1, an axis
    assert load_problem(reduction, overrides=(("reduce_dim", "-1"),)).constants["reduce_dim"] == -1
    scaled = KERNELBENCH / "level2/34_ConvTranspose3d_LayerNorm_GELU_Scaling.py"
    loaded = load_problem(scaled, overrides=(("eps", "-3"), ("bias", "false")))
    assert loaded.constants["eps"] == -3.0 and isinstance(loaded.constants["eps"], float)
    assert loaded.constants["bias"] is False


# --- a candidate's own constants follow the run's sizes ---------------------------------------------

STATEFUL_PROBLEM = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """The hidden state is sized by batch_size, as in KernelBench's level3/33_VanillaRNN."""

    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        self.register_buffer("state", torch.zeros(batch_size, hidden))

    def forward(self, x):
        return self.linear(x) + self.state


batch_size = 8
hidden = 16


def get_inputs():
    return [torch.randn(batch_size, hidden)]


def get_init_inputs():
    return [hidden]
'''

HONEST_CANDIDATE = '''
import torch
import torch.nn as nn

batch_size = 8


class ModelNew(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.linear = nn.Linear(hidden, hidden)
        self.register_buffer("state", torch.zeros(batch_size, hidden))

    def forward(self, x):
        return torch.addmm(self.linear.bias, x, self.linear.weight.t()) + self.state
'''


def test_a_candidates_own_batch_size_gets_the_runs_value(tmp_path, fast):
    problem, candidate = tmp_path / "stateful.py", tmp_path / "candidate.py"
    problem.write_text(STATEFUL_PROBLEM)
    candidate.write_text(HONEST_CANDIDATE)
    result = api.evaluate(problem, candidate, fast.replace(overrides=(("batch_size", "2"),)))
    assert result.verdict == "pass", [f.message for f in result.findings]
    notice = next(f for f in result.findings if f.code == "candidate-constants")
    assert notice.severity == "info" and notice.details["constants"] == {"batch_size": 2}
    assert "batch_size = 8 -> 2" in notice.message
    at_file_sizes = api.evaluate(problem, candidate, fast)
    assert at_file_sizes.verdict == "pass" and "candidate-constants" not in codes(at_file_sizes)


# --- which problem file: built-in or a KernelBench checkout -----------------------------------------

@needs_kernelbench
def test_builtin_differences_from_kernelbench_are_the_ones_the_suite_lists():
    differing = {}
    for entry in suite.list_problems():
        ours = sourcefile.constants(ast.parse(entry.path.read_text()))
        theirs = sourcefile.constants(ast.parse((KERNELBENCH / f"{entry.name}.py").read_text()))
        changed = {k: v for k, v in theirs.items() if ours.get(k) != v}
        if changed:
            differing[entry.name] = changed
    assert differing == {name: sizes for name, (sizes, _) in suite.KERNELBENCH_DIFFERENCES.items()}
    assert "dim=393216 (here 8192)" in suite.kernelbench_difference("level1/19_ReLU", suite.find_builtin("l1/19").path)


@needs_kernelbench
def test_problems_root_resolves_names_in_a_checkout_of_either_layout(tmp_path):
    direct = load_problem("level1/19", problems_root=KERNELBENCH)
    assert direct.path == (KERNELBENCH / "level1/19_ReLU.py").resolve() and not direct.builtin
    assert direct.constants["dim"] == 393216
    clone = tmp_path / "clone"
    (clone / "KernelBench").mkdir(parents=True)
    (clone / "KernelBench" / "level1").symlink_to(KERNELBENCH / "level1")
    assert load_problem("l1/19", problems_root=clone).path == direct.path
    with pytest.raises(ProblemError, match="no problem 'level9/1' in the problems root"):
        load_problem("level9/1", problems_root=KERNELBENCH)
    builtin = load_problem("level1/19")
    assert builtin.builtin and builtin.constants["dim"] == 8192


@needs_kernelbench
def test_cli_sets_n_of_kernelbench_level1_1_and_names_the_file(kj, tmp_path):
    candidate = tmp_path / "matmul.py"
    candidate.write_text("import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                         "    def forward(self, A, B):\n        return A @ B\n")
    rc, out, err = kj("problems", "--problems-root", str(KERNELBENCH), "--json")
    assert rc == 0, err
    rows = {row["name"]: row for row in parse_json(out)}
    assert len(rows) == 270 and rows["level1/1_Square_matrix_multiplication_"]["constants"] == {"N": 4096}
    common = ("--device", "cpu", "--no-timing", "--no-store", "--trials", "2")
    rc, out, err = kj("eval", "level1/1", str(candidate), "--set", "N=64", *common,
                      env={"KERNELJUDGE_PROBLEMS_ROOT": str(KERNELBENCH), "COLUMNS": "400"})
    assert rc == 0, out + err
    assert f"problem file: {(KERNELBENCH / L1_1).resolve()}" in out and "N=64" in out
    rc, out, err = kj("eval", "level1/1", str(candidate), "--set", "N=0", "--problems-root", str(KERNELBENCH),
                      *common)
    assert rc == 2 and "N is a size (a whole number >= 1)" in err


def test_cli_says_which_builtin_problems_differ_from_kernelbench(kj):
    rc, out, err = kj("problems", "--json")
    assert rc == 0, err
    notes = {row["name"]: row["note"] for row in parse_json(out)}
    assert "dim=393216" in notes["level1/19_ReLU"]
    assert notes["level2/51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd"] is None
    rc, out, err = kj("eval", "level1/19", "@pytorch", "--device", "cpu", "--no-timing", "--no-store", "--trials", "2",
                      env={"COLUMNS": "400"})
    assert rc == 0, out + err
    assert "problem file: " in out and "19_ReLU.py (built-in suite; KernelBench's file has dim=393216" in out
