"""The seed problem's shipped solutions with parameters made under torch.inference_mode() (issue 11, item 13).

Such parameters are inference tensors: they have no version counter, so the solutions cannot key their
cache of w_mean and c on it and must derive them on every call. Each step changes the parameters the way a
harness does (load_state_dict, in place, replaced) and compares the output with the reference Model's.
These are our own shipped files, so they run in this process (the Triton one through its interpreter, on the
CPU); the CUDA one needs a GPU (benchmarks/l2_51_variants.py checks it the same way there).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kerneljudge import suite

SEED_ENTRY = suite.find_builtin("level2/51")
SHIPPED = suite.shipped_solutions(SEED_ENTRY.name)
INIT = (64, 32)  # in_features, out_features
BATCH = 8
TOLERANCE = 1e-4  # KernelBench's fp32 tolerance, the judge's default

needs_interpreter = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None or importlib.util.find_spec("numpy") is None,
    reason="Triton's CPU interpreter needs triton and numpy")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["pytorch", pytest.param("triton", marks=needs_interpreter)])
def solution(request, monkeypatch):
    """The shipped solution module; the Triton one with its kernel under the interpreter (not the fallback)."""
    if request.param == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = load(SHIPPED[request.param], f"kj_test_inference_{request.param}")
    if request.param == "triton":
        assert module._interpreting()
    return module


@pytest.fixture
def reference():
    return load(SEED_ENTRY.path, "kj_test_inference_problem").Model


def same(candidate, ref, x):
    """The candidate's output matches the reference's; returns it."""
    out = candidate(x)
    expected = ref(x)
    assert torch.allclose(out, expected, atol=TOLERANCE, rtol=TOLERANCE), (out - expected).abs().max().item()
    return out


def change_in_place(model):
    model.gemm.weight.mul_(1.5).add_(0.1)
    model.gemm.bias.mul_(-2.0)
    model.subtract.add_(0.3)


def test_built_and_changed_under_inference_mode(solution, reference):
    torch.manual_seed(0)
    x = torch.rand(BATCH, INIT[0])
    with torch.inference_mode():
        ref = reference(*INIT)
        model = solution.ModelNew(*INIT)
        model.load_state_dict(ref.state_dict())
        assert model.gemm.weight.is_inference()
        first = same(model, ref, x)
        for m in (ref, model):
            change_in_place(m)
        changed = same(model, ref, x)
        assert not torch.allclose(changed, first, atol=TOLERANCE, rtol=TOLERANCE)  # a stale cache would fail above
        weight = torch.randn(INIT[1], INIT[0])
        for m in (ref, model):
            m.gemm.weight = torch.nn.Parameter(weight.clone())
        same(model, ref, x)
        for m in (ref, model):  # the replaced parameter, changed in place
            m.gemm.weight.mul_(-1.0)
        same(model, ref, x)
    same(model, ref, x)  # called outside inference_mode, parameters still inference tensors


def test_normal_parameters_changed_under_inference_mode(solution, reference):
    """Normal parameters keep their version counter inside inference_mode: the cache still refreshes."""
    torch.manual_seed(1)
    x = torch.rand(BATCH, INIT[0])
    ref = reference(*INIT)
    model = solution.ModelNew(*INIT)
    with torch.inference_mode():
        model.load_state_dict(ref.state_dict())
        assert not model.gemm.weight.is_inference()
        same(model, ref, x)
        with torch.no_grad():
            for m in (ref, model):
                change_in_place(m)
        same(model, ref, x)
    with torch.no_grad():
        for m in (ref, model):
            change_in_place(m)
    same(model, ref, x)


def test_inference_tensors_swapped_for_normal_ones(solution, reference):
    """From inference parameters back to normal ones (and back): never a stale value from the other kind."""
    torch.manual_seed(2)
    x = torch.rand(BATCH, INIT[0])
    ref = reference(*INIT)
    with torch.inference_mode():
        model = solution.ModelNew(*INIT)
        model.load_state_dict(ref.state_dict())
        same(model, ref, x)
    model.subtract = torch.nn.Parameter(ref.subtract.detach().clone())  # now a mix: one normal parameter
    same(model, ref, x)
    normal = solution.ModelNew(*INIT)
    normal.load_state_dict(ref.state_dict())
    for name in ("weight", "bias"):
        setattr(model.gemm, name, getattr(normal.gemm, name))
    same(model, ref, x)  # all normal: cached from here on
    with torch.no_grad():
        for m in (ref, model):
            change_in_place(m)
    same(model, ref, x)
    with torch.inference_mode():
        ref.gemm.bias = torch.nn.Parameter(torch.randn(INIT[1]))
        model.gemm.bias = torch.nn.Parameter(ref.gemm.bias.clone())
        ref.gemm.bias.add_(1.0)
        model.gemm.bias.add_(1.0)
        same(model, ref, x)
