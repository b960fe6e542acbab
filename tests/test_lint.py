"""Tests for the static candidate lint: one positive and one honest control per code."""

import textwrap

import pytest


from kerneljudge.lint import LintHit, lint_source


def lint(source: str, **kwargs) -> list[LintHit]:
    return lint_source(textwrap.dedent(source).lstrip("\n"), **kwargs)


def pairs(source: str, **kwargs) -> set[tuple[str, int]]:
    found = [(hit.code, hit.line) for hit in lint(source, **kwargs)]
    assert len(found) == len(set(found)), "duplicate (code, line) hits"
    return set(found)


def codes(source: str) -> set[str]:
    return {hit.code for hit in lint(source)}


# -- realistic honest candidates: zero hits --------------------------------

HONEST_LOAD_INLINE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

// Elementwise ReLU; launched on the caller's current stream.
__global__ void relu_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

static void launch(const float* x, float* y, int n, cudaStream_t stream) {
    const int threads = 256;
    relu_kernel<<<(n + threads - 1) / threads, threads, 0, stream>>>(x, y, n);
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    auto y = torch::empty_like(x);
    int n = x.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    launch(x.data_ptr<float>(), y.data_ptr<float>(), n, stream);
    relu_kernel<<<dim3((n + 255) / 256), dim3(256), 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

cpp_source = "torch::Tensor relu_cuda(torch::Tensor x);"

relu_ext = load_inline(
    name="relu_ext",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_cuda"],
    verbose=False,
)


class ModelNew(nn.Module):
    """ReLU through a custom CUDA kernel."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return relu_ext.relu_cuda(x.contiguous())
'''

HONEST_TRITON = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, x + y, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        out = torch.empty_like(x)
        n = out.numel()
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        add_kernel[grid](x, y, out, n, BLOCK=1024)
        return out
'''

HONEST_TORCH_CACHE = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Linear layer that caches the transposed weight until it changes."""

    def __init__(self, in_features: int, out_features: int):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features))
        self.bias = nn.Parameter(torch.randn(out_features))
        self._key = None
        self._weight_t = None

    def _transposed(self) -> torch.Tensor:
        key = (self.weight.data_ptr(), self.weight._version)
        if key != self._key:
            self._weight_t = self.weight.t().contiguous()
            self._key = key
        return self._weight_t

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 2:
            raise ValueError("expected a 2-D input")
        return torch.addmm(self.bias, x, self._transposed())
'''


@pytest.mark.parametrize("source", [HONEST_LOAD_INLINE, HONEST_TRITON, HONEST_TORCH_CACHE])
def test_honest_candidates_have_no_hits(source):
    assert lint(source) == []


# -- API --------------------------------------------------------------------


def test_syntax_error_is_raised():
    with pytest.raises(SyntaxError):
        lint_source("def broken(:\n")


def test_hits_are_sorted_unique_and_name_their_line():
    hits = lint(
        """
        import time
        import threading
        t0 = time.perf_counter(); t1 = time.perf_counter()
        """
    )
    assert [(h.code, h.line) for h in hits] == [("lint-threading", 2), ("lint-timing", 3)]
    assert hits[1].message.startswith("line 3: `time.perf_counter()` reads a clock;")


# -- lint-fallback ------------------------------------------------------------


@pytest.mark.parametrize(
    "clause", ["except:", "except Exception:", "except BaseException:", "except RuntimeError as e:"]
)
def test_fallback_handlers_are_flagged(clause):
    source = f"""
        import torch
        def forward(x):
            try:
                return ext.fast(x)
            {clause}
                return torch.relu(x)
        """
    hits = lint(source)
    assert [(h.code, h.line) for h in hits] == [("lint-fallback", 5)]
    assert "`" + clause.rstrip(":").replace(" as e", "") in hits[0].message


def test_fallback_module_level_extension_build_and_suppress():
    assert pairs(
        """
        import contextlib
        try:
            import my_ext
        except Exception:
            my_ext = None
        def forward(x):
            with contextlib.suppress(RuntimeError):
                return my_ext.run(x)
            return x * 2
        """
    ) == {("lint-fallback", 4), ("lint-fallback", 7)}


def test_fallback_controls_reraise_and_optional_import():
    assert "lint-fallback" not in codes(
        """
        try:
            import triton
            import triton.language as tl
            HAS_TRITON = True
        except (ImportError, ModuleNotFoundError):
            HAS_TRITON = False

        def forward(x):
            try:
                return ext.fast(x)
            except RuntimeError as e:
                raise RuntimeError("kernel failed") from e

        def check(x):
            try:
                return ext.fast(x)
            except Exception:
                log(x)
                raise
            finally:
                cleanup()

        def lookup(d, k):
            try:
                v = d[k]
            except KeyError:
                v = None
            return v
        """
    )


def test_fallback_handler_with_escape_is_not_a_reraise():
    assert pairs(
        """
        def forward(x):
            try:
                return ext.fast(x)
            except Exception:
                if x.numel() == 0:
                    return x
                raise
        """
    ) == {("lint-fallback", 4)}


# -- lint-reference-use -----------------------------------------------------


def test_reference_subclass_and_calls():
    assert pairs(
        """
        import torch.nn as nn
        class ModelNew(Model):
            pass
        class Other(nn.Module):
            def forward(self, x):
                return Model.forward(self, x) + Model()(x)
        """
    ) == {("lint-reference-use", 2), ("lint-reference-use", 6)}


def test_reference_import_aliased_and_custom_names():
    assert pairs(
        """
        from problem import Model as Ref
        import sys
        class ModelNew(Ref):
            pass
        ref = sys.modules["__main__"].Reference
        """,
        reference_names=frozenset({"Model", "Reference"}),
    ) == {("lint-reference-use", 1), ("lint-reference-use", 3), ("lint-reference-use", 5)}


def test_reference_dynamic_code():
    assert pairs(
        """
        import importlib
        from importlib import import_module
        src = "def f(x): return x"
        exec(src)
        g = eval("lambda x: x")
        code = compile(src, "<s>", "exec")
        m = __import__("problem")
        """
    ) == {("lint-reference-use", n) for n in (1, 2, 4, 5, 6, 7)}


def test_reference_controls():
    assert "lint-reference-use" not in codes(
        """
        import re
        import torch
        import torch.nn as nn
        pattern = re.compile("x+")
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.fn = torch.compile(torch.relu)
            def forward(self, x):
                self.eval()
                return self.fn(x)
        """
    )


# -- lint-monkeypatch ---------------------------------------------------------


def test_monkeypatch_assignments_with_aliases():
    assert pairs(
        """
        import torch
        import torch as T
        import time
        from torch import Tensor
        torch.allclose = lambda *a, **k: True
        time.perf_counter = lambda: 0.0
        torch.cuda.Event.elapsed_time = lambda self, other: 0.01
        T.cuda.synchronize = lambda: None
        Tensor.__eq__ = lambda a, b: True
        def patch():
            import numpy as np
            np.testing.assert_allclose = print
            setattr(torch, "equal", lambda a, b: True)
            delattr(T.Tensor, "sum")
            del torch.testing
        """
    ) == {("lint-monkeypatch", n) for n in (5, 6, 7, 8, 9, 12, 13, 14, 15)}


def test_monkeypatch_importing_the_judge():
    assert pairs(
        """
        import kerneljudge
        from kerneljudge.compare import tolerances
        """
    ) == {("lint-monkeypatch", 1), ("lint-monkeypatch", 2)}


def test_monkeypatch_controls():
    assert "lint-monkeypatch" not in codes(
        """
        import torch.nn as nn
        from time import perf_counter
        perf_counter = None
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 2.0
                setattr(self, "bias", None)
                delattr(self, "bias")
        """
    )


# -- lint-threading -----------------------------------------------------------


def test_threading_modules_and_calls():
    assert pairs(
        """
        import threading
        from concurrent import futures
        import multiprocessing as mp
        from os import system
        import os
        def forward(x):
            threading.Thread(target=print).start()
            os.fork()
            return x
        src = '''
        void f() { std::thread t(work); pthread_create(&tid, 0, run, 0); }
        '''
        """
    ) == {("lint-threading", n) for n in (1, 2, 3, 4, 7, 8, 11)}


def test_threading_controls():
    assert "lint-threading" not in codes(
        """
        import os
        import torch
        signal = torch.ones(3)
        path = os.path.join("a", "b")
        src = "__global__ void k(float* x) { int thread = threadIdx.x; __syncthreads(); }"
        """
    )


# -- lint-stream --------------------------------------------------------------


def test_stream_python_api():
    assert pairs(
        """
        import torch
        from torch.cuda import ExternalStream
        import torch as T
        s = torch.cuda.Stream()
        with T.cuda.stream(s):
            pass
        torch.cuda.set_stream(s)
        t = torch.Stream()
        """
    ) == {("lint-stream", n) for n in (2, 4, 5, 7, 8)}


def test_stream_in_cuda_sources():
    assert pairs(
        '''
        src = """
        torch::Tensor f(torch::Tensor x, int64_t raw) {
            cudaStream_t s;
            cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
            auto pool = at::cuda::getStreamFromPool();
            k<<<1, 32>>>(x.data_ptr<float>());
            k<<<grid, block, 0, (cudaStream_t)raw>>>(x.data_ptr<float>());
            return x;
        }
        """
        '''
    ) == {("lint-stream", 4), ("lint-stream", 5), ("lint-stream", 7)}


def test_stream_controls():
    assert "lint-stream" not in codes(
        '''
        import torch
        stream = torch.cuda.current_stream()
        torch.cuda.synchronize()
        src = """
        // We never call cudaStreamCreate here.
        void f(float* x) {
            k<<<g, b, 0, at::cuda::getCurrentCUDAStream()>>>(x);
            k<<<g, b, smem, 0>>>(x);
            k<<<g, b, 0, nullptr>>>(x);
        }
        """
        def forward(x):
            """Does not use cudaStreamCreate."""
            return x
        '''
    )


# -- lint-seed-or-env ---------------------------------------------------------


def test_seed_env_and_judge_state():
    assert pairs(
        """
        import os, sys, gc, random
        import torch
        import numpy as np
        from inspect import currentframe
        seed = torch.initial_seed()
        state = torch.cuda.get_rng_state()
        flag = os.environ.get("KJ_MODE") or os.getenv("X")
        args = sys.argv
        caller = sys._getframe(1)
        objs = gc.get_objects()
        r = random.getstate(), np.random.get_state(), torch.random.get_rng_state()
        maps = open("/proc/self/maps").read()
        src = 'const char* m = getenv("MODE");'
        """
    ) == {("lint-seed-or-env", n) for n in range(4, 14)}


def test_seed_env_controls():
    assert "lint-seed-or-env" not in codes(
        """
        import os
        import random
        import torch
        torch.manual_seed(0)
        path = os.path.dirname(__file__)
        x = random.random()
        note = "results in /tmp/proc"
        """
    )


# -- lint-timing --------------------------------------------------------------


def test_timing_clocks_and_timing_events():
    assert pairs(
        """
        import time
        import torch
        from time import monotonic_ns as now
        a = time.perf_counter()
        b = time.time()
        c = now()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(True)
        generic = torch.Event(enable_timing=True)
        """
    ) == {("lint-timing", n) for n in (4, 5, 6, 7, 8, 9)}


def test_timing_controls():
    assert "lint-timing" not in codes(
        """
        import time
        import torch
        done = torch.cuda.Event()
        other = torch.cuda.Event(enable_timing=False)
        device_event = torch.Event("cuda")
        torch.cuda.synchronize()
        time.sleep(0)
        clock = time.perf_counter
        """
    )
