"""The catalog of finding codes: what each means, how bad it is, and how an honest author fixes it.

A finding is data (`records.Finding`): a stable code, a severity, a concrete message and the fix-it
text from this catalog. Codes never change meaning; `kerneljudge explain CODE` prints an entry.
Severity "error" means the candidate could not be judged at all (it blocks the run: verdict "error");
"fail" gives verdict "fail"; "warn" and "info" do not change the verdict. The same name is used in the
JSON, the human report, the agents' brief and `explain`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "fail", "warn", "info"]


@dataclass(frozen=True)
class Spec:
    code: str
    severity: Severity
    title: str
    fix: str
    catalog_row: int | None = None  # row of shared/reference/integrity-catalog.md this guards against

    @property
    def blocking(self) -> bool:
        """The candidate could not be judged: the run stops here and the verdict is "error"."""
        return self.severity == "error"


def _specs() -> dict[str, Spec]:
    entries = [
        # --- could not judge (verdict "error") -------------------------------------------------------
        Spec("problem-invalid", "error", "The problem file is missing or malformed",
             "Give a KernelBench-format file: class Model, get_inputs(), get_init_inputs(), int size constants."),
        Spec("problem-error", "error", "The reference problem raised while running",
             "Run the problem file on its own: Model(*get_init_inputs())(*get_inputs()) must work at these sizes."),
        Spec("candidate-invalid", "error", "The candidate file is missing or is not valid Python",
             "Fix the file path or the syntax error at the line shown."),
        Spec("import-error", "error", "Importing the candidate raised",
             "Make the module import cleanly on its own; it cannot see the problem file's names."),
        Spec("compile-error", "error", "Building the candidate's extension failed",
             "Fix the compiler errors shown (file:line); build it alone with `kerneljudge build SOLUTION`."),
        Spec("missing-modelnew", "error", "The candidate defines no ModelNew class",
             "Define `class ModelNew(nn.Module)` with the reference Model's constructor and forward signatures."),
        Spec("constructor-error", "error", "ModelNew(*get_init_inputs()) raised",
             "Accept exactly the reference's constructor arguments (see get_init_inputs())."),
        Spec("state-dict-mismatch", "error", "The reference's parameters do not fit ModelNew",
             "Create the same parameters and buffers as Model, with the same names and shapes; extra ones are allowed."),
        Spec("forward-error", "error", "ModelNew.forward raised",
             "Fix the exception shown; forward gets the same arguments as the reference's forward."),
        Spec("candidate-exit", "error", "The candidate called exit",
             "Do not call sys.exit/os._exit/quit in a candidate."),
        Spec("timeout", "error", "The worker ran past its time limit",
             "Look for an endless loop or a hang (a deadlocked kernel, waiting on input); raise --timeout for slow builds."),
        Spec("out-of-memory", "error", "The candidate ran out of memory",
             "Allocate what the function needs, not more; check sizes computed from the inputs. On a GPU the "
             "candidate may use --gpu-memory-share of its memory (default half)."),
        Spec("worker-crashed", "error", "The worker process died",
             "The candidate crashed the process (signal or exit code shown): look for out-of-bounds access in native code."),
        Spec("cuda-error", "error", "A CUDA error poisoned the device context",
             "Run the kernel under compute-sanitizer to find the bad access; check launch bounds and indexing."),
        Spec("judge-error", "error", "The judge itself failed",
             "This is a bug in kerneljudge: please report it with the message shown."),
        Spec("worker-fault", "error", "The worker failed serving the judge, the candidate's code loaded in it",
             "Candidate code shares the worker's process: do not override the nn.Module methods the judge calls "
             "(state_dict, load_state_dict, modules) with ones that fail, return tensor subclasses whose methods "
             "fail, raise exceptions that cannot be printed, or write into the worker's channel. With a plain "
             "candidate this may be a bug in kerneljudge: please report it with the message shown."),
        # issue 17: ray
        Spec("judge-lost", "error", "The judge process died each time it judged this candidate",
             "The candidate killed the process judging it (or its node failed each time): do not signal or "
             "kill your parent process. A Ray run tries 3 times before it records this."),
        # --- wrong answers (verdict "fail") ----------------------------------------------------------
        Spec("wrong-output", "fail", "Output values differ from the reference beyond tolerance",
             "Compare against the reference on the trial shown; check indexing, reductions and accumulation precision.",
             catalog_row=14),
        Spec("output-shape", "fail", "Output shape differs from the reference",
             "Return a tensor of exactly the reference output's shape (no squeezing or broadcasting left to the caller)."),
        Spec("output-dtype", "fail", "Output dtype differs from the reference",
             "Return the reference's dtype; compute in a lower precision only if the result stays within tolerance."),
        Spec("output-device", "fail", "Output is on another device than the reference's",
             "Return the output on the inputs' device."),
        Spec("output-none", "fail", "forward returned None",
             "Return the output tensor from forward."),
        Spec("output-type", "fail", "Output is not a plain torch.Tensor with real storage",
             "Return a plain torch.Tensor computed by the call (no subclass, proxy or lazily computed object).",
             catalog_row=9),
        Spec("output-nonfinite", "fail", "Output has NaN or Inf where the reference is finite",
             "Look for unwritten output elements, division by zero or overflow in a lower precision."),
        Spec("input-mutation", "fail", "The candidate changed its input tensors",
             "Never write into the inputs; allocate the output (torch.empty_like) and write there.", catalog_row=2),
        Spec("output-alias", "fail", "The output shares memory with an input or a parameter",
             "Return a newly allocated tensor, not an input, a parameter or a view of one.", catalog_row=3),
        Spec("stale-parameters", "fail", "Output does not follow a change of the parameters",
             "Use every parameter in forward as the reference does, and recompute derived values when one "
             "changes: key a cache on each parameter's (id, _version, data_ptr, device, dtype) and refresh when "
             "it differs.", catalog_row=1),
        Spec("stale-inputs", "fail", "Output is stale after the same input buffers received new values",
             "Do not memoise outputs by input address, id() or a partial hash: compute from the values every call.",
             catalog_row=4),
        Spec("unwritten-output", "fail", "Output elements were never written by the call",
             "Write every output element; torch.empty returns memory holding whatever was there before.",
             catalog_row=6),
        Spec("nondeterministic", "fail", "Two calls on the same inputs disagree",
             "Look for reads of uninitialised memory or races (run compute-sanitizer --tool racecheck/initcheck).",
             catalog_row=15),
        Spec("thread-spawn", "fail", "The candidate left a thread or process running after the call",
             "Do all work inside the call, on the calling thread and the current CUDA stream (a helper thread that "
             "waits, blocked, until a call hands it work is allowed).", catalog_row=8),
        Spec("side-stream", "fail", "Work ran on a CUDA stream other than the caller's",
             "Launch on torch.cuda.current_stream() (at::cuda::getCurrentCUDAStream() in C++), or join your "
             "streams back with wait_stream before returning.", catalog_row=7),
        Spec("unsynchronized-work", "fail", "The output was not finished when the call's work on the caller's stream was",
             "Order all work on the caller's stream; a side stream must be joined (wait_stream/events) before return.",
             catalog_row=7),
        Spec("tampering", "fail", "The candidate replaced a clock, a synchronisation or a judge function",
             "Do not patch torch, time or kerneljudge, nor leave torch's global settings changed "
             "(torch.set_default_dtype); the judge measures with functions bound before your import.",
             catalog_row=10),
        Spec("decoy-kernel", "fail", "The candidate's own kernels never ran",
             "Call the kernel you define from forward; remove dead kernels, or submit as a plain PyTorch rewrite.",
             catalog_row=13),
        Spec("reference-fallback", "fail", "The candidate computes with the reference's heavy operations instead of its kernels",
             "Compute with your kernel; a try/except that falls back to the reference's ops hides failures.",
             catalog_row=12),
        Spec("timing-tampering", "fail", "The candidate's reported times do not add up with the judge's own clock",
             "Time nothing yourself and leave the judge's events and clocks alone: each batch of timed calls is "
             "also timed from outside your process, and the two must agree.", catalog_row=24),
        Spec("timed-output-mismatch", "fail", "An output checked during timing was wrong",
             "Do the full work on every call; timed calls see different inputs and are checked.", catalog_row=5),
        Spec("impossible-speed", "fail", "Measured time is far below the memory floor",
             "The call moves fewer bytes than reading the inputs and writing the output needs: it is skipping work "
             "(replay, caching or deferred work).", catalog_row=16),
        # issue 14: probes
        Spec("range-mismatch", "fail", "Output is wrong for inputs or parameters moved across their legal range",
             "Compute exactly for any inputs and parameters, not only for the default draw: approximations "
             "(tanh GELU, low-order series, low precision) must hold over the whole range of their argument.",
             catalog_row=30),
        # --- warnings: suspicious, confirmed or not at run time --------------------------------------
        Spec("lint-fallback", "warn", "try/except around the computation",
             "Let errors propagate; a fallback path hides a failing kernel.", catalog_row=12),
        Spec("lint-reference-use", "warn", "The candidate subclasses, imports or calls the reference",
             "Write ModelNew on its own; do not derive from or call Model, and do not exec dynamic code.",
             catalog_row=12),
        Spec("lint-monkeypatch", "warn", "The candidate assigns attributes of torch, time, sys or the judge",
             "Do not patch libraries or the judge.", catalog_row=10),
        Spec("lint-threading", "warn", "The candidate uses threads, processes or signals",
             "Do all work in the call on the calling thread.", catalog_row=8),
        Spec("lint-stream", "warn", "The candidate creates or selects CUDA streams",
             "Use the current stream; join any side stream before returning.", catalog_row=7),
        Spec("lint-seed-or-env", "warn", "The candidate reads seeds, RNG state, the environment or stack frames",
             "A kernel's result must depend only on its inputs and parameters.", catalog_row=11),
        Spec("lint-timing", "warn", "The candidate reads clocks or creates timing events",
             "A kernel has no need for a clock; remove timing code.", catalog_row=10),
        Spec("native-threads", "warn", "The process has more native threads after the call",
             "Do not start native threads (std::thread, OpenMP pools of your own) that outlive the call."),
        Spec("timing-noisy", "warn", "Timing did not reach its precision target within the budget",
             "Raise --budget-ms, or run on a quieter machine; the figures are less certain than usual."),
        Spec("timing-unconfirmed", "warn", "The judge's clock saw more time per call than the claims explain",
             "The speedup shown is the worker's measurement; the message gives the judge's own. Larger sizes "
             "(longer calls against the machine's noise) let the judge check the claims more finely."),
        Spec("timing-skewed", "warn", "The calls of a timed batch took very different times; their means are reported",
             "Do each call's whole work in that call: work done ahead for later calls is counted with them."),
        Spec("baseline-disagrees", "warn", "The reference's time now disagrees with the baseline a batch lane kept",
             "Nothing to fix in the candidate; the speedup is against the kept baseline, which the lane measures "
             "again before its next candidate of the problem."),
        Spec("reference-ops", "warn", "The candidate still calls the reference's heavy operations",
             "Fine if intended; otherwise move that work into your kernel."),
        # --- information ----------------------------------------------------------------------------
        Spec("pytorch-rewrite", "info", "A pure PyTorch rewrite (no custom kernel)",
             "Allowed: the result is labelled as a PyTorch rewrite."),
        Spec("preset-used", "info", "A size preset or overrides were applied",
             "Verdict and times hold for these sizes; leave out --preset/--set for the problem's own (a "
             "built-in problem on a CPU takes its small preset unless one is chosen)."),
        Spec("candidate-constants", "info", "The candidate's own size constants were set to the run's sizes",
             "Nothing to fix: a module-level constant named like one of the problem's (batch_size) gets the "
             "value --set/--preset gave the problem; read sizes from the inputs to need no such help."),
        Spec("reference-imprecise", "info", "The reference itself misses the tolerance against float64",
             "Nothing to fix in the candidate: it was compared with the reference at its own precision."),
        Spec("no-float64-reference", "info", "The reference cannot run in float64",
             "Nothing to fix: errors are measured against the reference at its own precision."),
        Spec("probe-skipped", "info", "A probe does not apply on this device",
             "Run on a GPU for the GPU-only probes."),
        Spec("baseline-unavailable", "info", "A baseline could not be timed",
             "Nothing to fix in the candidate; the speedup against that baseline is not given."),
        Spec("protocol-difference", "info", "KernelBench's protocol and the strict one disagree",
             "See the strict findings listed: the strict verdict is the trustworthy one."),
        Spec("timing-lock-wait", "info", "Timing waited for another evaluation timing on the same device",
             "Nothing to fix: timings on one device take turns so they do not slow each other down; the wait "
             "is not in any figure."),
        # issue 13: sandbox
        Spec("sandbox-breach", "fail", "The candidate's process changed files of the judge's package",
             "Write only in the worker's own folder (the current directory, $TMPDIR): the judge's package and its "
             "results store are not the candidate's to change.", catalog_row=26),
        Spec("package-changed", "warn", "The judge's package changed on disk while the candidate's process ran",
             "Nothing to fix in the candidate: the package was read-only to it, so another process changed it (an "
             "update or a checkout of the judge during the run); judge again once the judge's files stay put."),
        Spec("memory-limit", "warn", "The kernel killed processes the candidate started, at the worker's memory limit",
             "The worker's processes together may use --memory-limit-mb (default: 75% of RAM); start fewer or "
             "smaller ones."),
        Spec("store-changed", "warn", "The results store changed while the candidate's process ran",
             "Nothing to fix if another evaluation recorded into the same store meanwhile; else the candidate "
             "wrote it (possible only without the sandbox's read-only view: see `kerneljudge doctor`).",
             catalog_row=27),
        # issue 19: problem lint (findings about the problem, from `kerneljudge lint-problem`) --------
        Spec("problem-degenerate", "warn", "The problem being judged is degenerate or redundant",
             "Read `kerneljudge lint-problem PROBLEM`: a passing trivial candidate proves nothing there, and a "
             "huge speedup may be an honest use of the redundancy; fix the problem's sizes, inputs or tolerance.",
             catalog_row=18),
        Spec("problem-trivial-output", "warn", "A trivial output passes the problem's own tolerance",
             "Make the output depend on the work: larger-magnitude outputs, inputs whose values matter, or a "
             "relative tolerance; a kernel that returns this passes without computing anything.", catalog_row=18),
        Spec("problem-insensitive-seed", "warn", "The output barely changes when the inputs are drawn from another seed",
             "Draw inputs whose values reach the output (e.g. torch.randn, not a constant); a hard-coded "
             "output passes otherwise.", catalog_row=18),
        Spec("problem-insensitive-input", "warn", "The output barely depends on one input",
             "Remove the input or make the computation use it; a kernel may ignore it and still pass.",
             catalog_row=18),
        Spec("problem-insensitive-parameter", "warn", "The output barely depends on one parameter",
             "Remove the parameter or change the computation so that it matters; a kernel may ignore it.",
             catalog_row=18),
        Spec("problem-tiny-output", "warn", "The output's magnitude is below the tolerance",
             "Scale the inputs or the computation so the output is well above atol, or compare relatively.",
             catalog_row=18),
        Spec("problem-saturated", "warn", "Almost every output element sits at the output's minimum or maximum",
             "Move the activation's input into its sensitive range (smaller weights, a scale or a shift).",
             catalog_row=18),
        Spec("problem-nonfinite", "warn", "The reference's output holds NaN or Inf",
             "Change the sizes, inputs or the computation so the reference is finite (overflow, log of 0, 0/0)."),
        Spec("problem-nondeterministic", "warn", "Two reference calls on the same inputs disagree",
             "Remove randomness from forward (torch.rand, dropout in training mode) or seed it from the inputs."),
        Spec("problem-redundant-op", "warn", "The reference computes something that does nothing",
             "Remove the operation (a reduction or normalisation over a size-1 dimension, an identity, an "
             "unused result) or change the shapes so it matters; kernels may skip it honestly."),
        Spec("problem-algebraic-collapse", "warn", "The reference's heavy operation collapses algebraically",
             "Expect honest kernels to exploit it (a linear map followed by a mean over its outputs is a "
             "matrix-vector product); change the problem if the heavy operation should be what is measured."),
        Spec("problem-oversized", "warn", "The problem's footprint exceeds the device's memory",
             "Lower the sizes (--set or a preset) so inputs, parameters and outputs fit the device."),
        Spec("problem-launch-bound", "warn", "The reference runs in under about 20 microseconds",
             "Raise the sizes: at this scale launch overhead, not the kernel, decides the time."),
        Spec("problem-unreachable-size", "info", "A size of the problem cannot be changed with --set",
             "Make it a module-level constant (batch_size = 16) that get_inputs() and get_init_inputs() read."),
        Spec("problem-lint-skipped", "info", "The problem could not be linted",
             "Run the problem on its own at the sizes shown; install what it imports."),
        Spec("hidden-recheck", "info", "A hidden re-check with secret seeds ran",
             "Its details are withheld; fix the findings of the open run first."),
        # issue 18: reports (records imported from KernelBench's eval_results.json)
        Spec("kernelbench-verdict", "info", "A verdict imported from KernelBench's eval_results.json",
             "Nothing to fix: judge the same candidate with kerneljudge for the strict verdict; "
             "`kerneljudge report RUN --disagreements` lists where the two differ and why."),
        Spec("kernelbench-incorrect", "fail", "KernelBench found the output incorrect (imported)",
             "See KernelBench's metadata in the record (`kerneljudge show ID`); judge it with kerneljudge "
             "for the elements and trials that differ."),
        Spec("kernelbench-not-compiled", "error", "KernelBench could not compile or load the candidate (imported)",
             "See KernelBench's compilation error in the record (`kerneljudge show ID`)."),
        # issue 16: memory
        Spec("problem-too-large", "error", "The problem itself cannot fit on the device",
             "Judge it at smaller sizes (--set, --preset) or on a device with more memory: the referee and the "
             "worker each hold the parameters, the inputs and the outputs."),
        Spec("timing-from-turns", "info", "The times reported are those measured while the candidate and the "
             "reference took turns",
             "Nothing to fix when the machine was busy while the candidate was timed alone (its batches' wall time "
             "then exceeds the times measured in them); a candidate slower when it takes turns with the reference "
             "gets the turns' times."),
        Spec("stochastic-reference", "info", "The reference draws random numbers in forward",
             "Nothing to fix: the generators are seeded alike before the reference's and the candidate's calls, "
             "so draw the same numbers in the same order (torch.randn with the reference's shapes and device)."),
    ]
    return {spec.code: spec for spec in entries}


CATALOG: dict[str, Spec] = _specs()


def blames_candidate(code: str) -> bool:
    """Whether a finding with `code` puts the fault on the candidate. The others (the problem's, the reference's,
    the judge's, its own limits) only the judge and the referee may give: in a worker's reply, once the candidate's
    code was loaded there, one was written or caused by that code (a forged reply, an override the worker's own
    code called), and RL loops drop such results rather than count them against the candidate."""
    return not code.startswith(("problem-", "judge-", "reference-", "kernelbench-")) and \
        code not in ("stochastic-reference", "timeout")


def spec(code: str) -> Spec:
    """The catalog entry of `code`; an unknown code is a bug in the judge, so it raises KeyError."""
    return CATALOG[code]
