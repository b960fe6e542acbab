"""Mutation check of the code every verdict depends on (issue #21): does the suite catch a broken judge?

Each named mutation changes one exact snippet of the trust-critical code (the comparison and its
tolerances, each probe, the verdict, the hidden re-check, the timed-output checks, the floor, the
baselines' cache, the isolation limits, the store write, the KernelBench protocol) and names the tests
that should catch it. For each: src/ is copied to a temporary folder, the snippet is replaced there (it
must occur exactly once), and `python -m pytest -q -x TESTS` runs with PYTHONPATH on the mutated copy (the
worker and referee processes the tests start inherit it). The mutant is killed when the tests fail,
survives when they pass. The working tree is never changed.

    python scripts/mutation_check.py            # the baseline (every named test, unmutated), then each mutation
    python scripts/mutation_check.py --list     # the mutations and their tests
    python scripts/mutation_check.py --only compare-bound-10x --only hidden-recheck-always-ok
    python scripts/mutation_check.py --markdown # a table for docs/mutation.md

Results are in docs/mutation.md (date, command, score, each survivor explained).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 300  # per mutation; a mutant that hangs the tests past it counts as killed ("timeout")

KILLS = "tests/test_mutation_kills.py"
INTEGRITY = "tests/test_integrity.py"
REFEREE = "tests/test_referee.py"
ISOLATION = "tests/test_isolation.py"
SANDBOX = "tests/test_sandbox.py"
GPU = "tests/test_gpu.py"  # skipped without CUDA: the poison mutants are killed on the GPU (docs/mutation.md)
PROBES = "tests/test_probes.py"
BLAME = "tests/test_blame.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # under src/kerneljudge/
    original: str
    replacement: str
    tests: tuple[str, ...]  # pytest node ids (or FILE::-k EXPR written as "FILE -k EXPR")
    why: str = ""


def _k(file: str, expression: str) -> str:
    return f"{file} -k {expression}"


MUTATIONS: tuple[Mutation, ...] = (
    # --- referee/compare.py: the comparison and its tolerances ---------------------------------------
    Mutation("compare-bound-10x", "referee/compare.py",
             "distance <= t.abs().mul_(rtol).add_(atol)",
             "distance <= 10 * t.abs().mul_(rtol).add_(atol)",
             (_k(KILLS, "off_by_twice"),), "the bound 10x looser while the reported atol stays"),
    Mutation("compare-rtol-dropped", "referee/compare.py",
             "distance <= t.abs().mul_(rtol).add_(atol)",
             "distance <= atol",
             (_k(KILLS, "off_by_twice"),)),
    Mutation("compare-nan-passes", "referee/compare.py",
             "distance <= t.abs().mul_(rtol).add_(atol)",
             "~(distance > t.abs().mul_(rtol).add_(atol))",
             (_k(KILLS, "one_nan"),), "a NaN difference compares false, so a NaN output would pass"),
    Mutation("compare-verdict-only-always-passes", "referee/compare.py",
             "if verdict_only and all(_misses_count(c, t, atol, rtol) == 0 for c, t in zip(cands, truths)):",
             "if verdict_only:",
             (_k(INTEGRITY, "replay_during_timing"),), "timed outputs and probes' outputs passed unseen"),
    Mutation("compare-float64-fallback-off", "referee/compare.py",
             "not _close(refs[number], t, atol, rtol, find_worst=False)[0]:",
             "False:",
             (_k(KILLS, "misses_the_bound_against_float64"),)),
    Mutation("compare-fallback-for-passing-candidates", "referee/compare.py",
             "if ref64_out is not None and refs is not None and not close[0] and \\\n",
             "if ref64_out is not None and refs is not None and \\\n",
             (_k(KILLS, "exact_where_the_reference_is_imprecise"),),
             "a candidate within float64's bound held to an imprecise reference instead"),
    Mutation("compare-default-tolerance-fp16", "referee/compare.py",
             'default = DEFAULT_TOLERANCE.get(name, DEFAULT_TOLERANCE["float32"])',
             'default = DEFAULT_TOLERANCE["float16"]',
             (_k(KILLS, "off_by_twice and float32"),), "float32 outputs held to the fp16 tolerance"),
    Mutation("compare-kernelbench-allclose-always", "referee/compare.py",
             "passed = all(torch.allclose(o, e, atol=a, rtol=r) for o, e in zip(outs, refs))",
             "passed = True",
             (_k(KILLS, "copies_no_state"),)),
    Mutation("compare-pair-always-agrees", "referee/compare.py",
             'return f"max difference {max(misses):.3g}"', "return None",
             (_k(INTEGRITY, "drifting_with_a_call_counter"),)),
    Mutation("parameter-drift-unsynced", "stages/probe.py",
             "    if fingerprints_agree(made, ours):",
             "    if made:",
             ("tests/test_referee.py -k own_state",), "the worker's entries left behind the reference's"),
    Mutation("construct-state-never-sent", "stages/check.py",
             'if not started.kernelbench and not _same_digest(built.get("digest"), ready["digest"]):', "if False:",
             (_k(REFEREE, "builds_the_references_state"),),
             "ModelNew loaded with the worker's own build of the reference's state where it differs from the referee's"),
    Mutation("bytecode-code-unchecked", "sandbox/__init__.py",
             "    return done.returncode == 0", "    return True", (_k(SANDBOX, "bytecode_another"),),
             "bytecode with a right header and other code taken for an honest compile"),
    Mutation("worker-range-move-ignored", "worker/server.py",
             "return Transform.from_json(request.transform).inputs(inputs) if request.transform else inputs",
             "return inputs", (_k(PROBES, "range_probes_honest"),),
             "the worker calls the candidate on the range probes' inputs unmoved"),
    Mutation("worker-own-copies-off", "worker/server.py",
             "            if name in held and (held[name].dtype != value.dtype if staged else _kind(held[name]) != _kind(value)):",
             "            if False:",
             (_k(REFEREE, "another_dtype"),), "the probes' changes made on ModelNew's float64 entries round otherwise"),
    Mutation("worker-sent-values-not-kept", "worker/server.py",
             "                elif own is None and entry is not None and _kind(entry) != _kind(value):",
             "                elif False:", (_k(REFEREE, "casts_its"),),
             "a ModelNew that cast an entry after construction gets the referee's values sent at every change"),
    Mutation("worker-changes-old-objects", "proc/perturb.py", "        if copy:\n            if id(t)",
             "        if False:\n            if id(t)",
             (_k(INTEGRITY, "replaced_parameter_objects"),),
             "the worker's replacing change made in place on the old objects: a cache of them sees it"),
    Mutation("perturb-in-place-noop", "proc/perturb.py",
             "block.mul_(_uniform(block, generator, 0.5, 1.5))", "block.mul_(1.0)",
             (_k(INTEGRITY, "stale_first_call"), _k(KILLS, "cached_from_a_buffer")),
             "parameters still shift by up to 0.1; buffers no longer change"),
    Mutation("range-plan-entry-not-restored", "referee/ranges.py", "            put_back(state, originals)",
             "            pass", (_k(REFEREE, "put_back_every_state_entry"), _k(PROBES, "tanh_gelu")),
             "a state entry the range plan moved stays moved while the plan tries its next moves"),
    Mutation("referee-changes-in-float64", "referee/session.py",
             "changed = perturb(*entries(self.native()), seed", "changed = perturb(*entries(self.reference.model), seed",
             (_k(REFEREE, "one_precision"),),
             "the probes' changes made on the reference as it is, its buffers float64 where the float64 run left them so"),
    Mutation("referee-integer-buffers-shared", "referee/precision.py",
             "                    else value.clone()\n", "                    else value\n",
             (_k(REFEREE, "one_precision"),),
             "an integer buffer the float64 run changes in place shared with the native runs"),
    Mutation("referee-attributes-shared", "referee/precision.py",
             "                module.__dict__[name] = value", "                pass", (_k(REFEREE, "one_precision"),),
             "a tensor the forward keeps as a plain attribute shared by the native and the float64 runs"),
    Mutation("referee-buffers-shared", "referee/precision.py",
             "                module._buffers[name] = value\n", "                pass\n", (_k(REFEREE, "one_precision"),),
             "a buffer the float64 run reassigns or changes in place left so for the native runs"),
    Mutation("referee-plan-checks-move-state", "referee/plan.py", "            with checks_aside():",
             "            with contextlib.nullcontext():", (_k("tests/test_memory.py", "stateful"),),
             "the float64 plan's separability checks leave the reference's state moved past the candidate's"),
    Mutation("plan-parameter-heavy-whole", "referee/plan.py",
             "            if reserved_bytes >= PARAMETER_HEAVY_FROM_BYTES and", "            if False and", (_k("tests/test_memory.py", "parameter_heavy"),),
             "a parameter-heavy reference's float64 run whole (level2's Gemm rows 3.3x against 3.16x)"),
    Mutation("sandbox-capabilities-kept", "sandbox/linux.py",
             "    _check(_libc.capset(ctypes.byref(header), data), \"capset\")", "    pass",
             (_k(SANDBOX, "cannot_remount_the_package"),), "a fork server's worker keeps its user namespace's "
             "capabilities and remounts the package writable"),
    Mutation("sandbox-root-capabilities-kept", "sandbox/launch.py",
             "        linux.clear_capabilities()\n", "        pass\n",
             (_k(SANDBOX, "cannot_remount_the_package"),), "without the user namespace, a worker started by root "
             "keeps root's capabilities and remounts the package writable"),
    Mutation("range-original-stale", "proc/perturb.py",
             "        if copy is None or stamp is None or stamp != _stamp(entry):", "        if copy is None:",
             (_k(REFEREE, "copied_once_and_again"),), "a range move reuses an original copied before the entry "
             "changed, and puts back the old values"),
    Mutation("sandbox-kernel-settings-writable", "sandbox/launch.py",
             'KERNEL_SETTINGS = ("/proc/sys", "/proc/sysrq-trigger")', "KERNEL_SETTINGS = ()",
             (_k(SANDBOX, "cannot_write_the_kernels_settings"),), "a worker with root's user id writes /proc/sys"),
    Mutation("sandbox-ipc-shared", "sandbox/launch.py",
             '("ipc", linux.CLONE_NEWIPC),', '("ipc", 0),',
             (_k(SANDBOX, "shared_memory_segment"),), "the worker shares the host's System V IPC: a segment it leaves "
             "is found by a later worker"),
    Mutation("triton-cache-shared", "isolation.py",
             'TRITON_CACHE_DIR=str(self.workdir / "triton")', 'TRITON_CACHE_DIR=str(options.cache_dir / "triton")',
             (_k(SANDBOX, "tritons_cache"),), "Triton's cache shared by the workers: one plants a module a later "
             "worker's Triton loads"),
    Mutation("lint-unbounded-in-evaluation", "problemlint/judge.py",
             "protocol.LintProblem(_wire(problem), shrink=True, bounded=True)",
             "protocol.LintProblem(_wire(problem), shrink=True)",
             (_k("tests/test_problemlint.py", "not_linted"),), "an evaluation lints a problem of literal sizes at full "
             "size: the lint's ten outputs set a fresh machine's peak (2.7 GB in native_output)"),
    Mutation("plan-grid-never", "referee/plan.py",
             "    if along_first > chunk_bytes:", "    if False:",
             (_k("tests/test_memory.py", "grid"),),
             "a matrix product cut by one operand alone: every chunk upcasts the other whole (level1/1: 128 MiB)"),
    Mutation("plan-grid-none-fits-dropped", "referee/plan.py",
             "    rows, columns = best[2:] if best is not None else least[1:]",
             "    rows, columns = best[2:] if best is not None else (1, 1)", (_k("tests/test_memory.py", "fewest_chunks"),),
             "no grid fits a small budget: the cut by rows alone, every chunk upcasting all of B, far over it"),
    Mutation("plan-chunk-output-kept", "referee/plan.py",
             "        _place(truth, call(chunk), [",
             "        kept = call(chunk); _place(truth, kept, [",
             (_k("tests/test_memory.py", "let_go_before"),),
             "a chunk's float64 output kept alive beside the next chunk's run"),
    Mutation("plan-floor-whole-footprint", "referee/plan.py",
             "FLOOR_FOOTPRINT_SHARE = 0.5", "FLOOR_FOOTPRINT_SHARE = 2.0",
             (_k("tests/test_memory.py", "half_the_footprint"),),
             "a mid-size problem's float64 run whole (level1/72: 4.67x against 3.62x)"),
    Mutation("referee-float64-buffers-shared", "referee/precision.py",
             "value.to(torch.float64, copy=True) if value.is_floating_point()",
             "value.to(torch.float64) if value.is_floating_point()", (_k(REFEREE, "one_precision"),),
             "a float64 buffer the float64 run changes in place shared with the native runs"),
    Mutation("upcast-in-place-unseen", "referee/upcast.py",
             "            raise ChangedInPlace(", "            return func(*args, **kwargs)\n            raise ChangedInPlace(",
             (_k("tests/test_upcast.py", "in_place"),),
             "a forward changing its parameter in place run in float64 on a copy the next operation never reads"),
    Mutation("probe-replace-unparked", "stages/probe.py",
             '    parked = how != "in-place"', "    parked = False",
             (_k("tests/test_memory.py", "new_objects"),),
             "the referee keeps its parameters on the device while the worker holds two copies of an entry"),
    Mutation("referee-parks-all", "referee/session.py",
             "        if names is not None:\n            changed = {id(state[n])",
             "        if False:\n            changed = {id(state[n])", (_k("tests/test_memory.py", "as_many_parameters"),)),
    Mutation("referee-parked-left", "referee/session.py",
             "            parameter.data = parameter.data.to(device, copy=True)  # (synchronous", "            pass  # (",
             (_k("tests/test_memory.py", "parked"),),
             "the referee's parameters left in host memory after the worker's change"),
    Mutation("upcast-products-whole", "referee/upcast.py",
             "    return t.numel() * 8 > BLOCK_BYTES", "    return False", (_k("tests/test_upcast.py", "block_at_a_time"),),
             "a large weight upcast whole for a product: its float64 copy in the referee beside the worker's weight"),
    Mutation("upcast-dtype-native", "referee/upcast.py",
             "            return torch.float64\n", "            return getter.__get__(args[0])\n",
             (_k("tests/test_upcast.py", "copys_outputs"),),
             "a forward casting to its weight's dtype computes the float64 truth in float32"),
    Mutation("referee-changed-inputs-kept", "referee/session.py",
             "        if _checksums([a for a, alone in zip(inputs, uncopied) if alone]) != before:", "        if False:",
             (_k(REFEREE, "uncopied"),),
             "inputs the reference changed in place kept as the candidate's"),
    Mutation("referee-inputs-kept-unasked", "referee/session.py",
             "        self.kept[seed] = expectation if keep_inputs else dataclasses.replace(expectation, inputs=None)",
             "        self.kept[seed] = expectation", (_k(REFEREE, "uncopied"),),
             "every draw's inputs held by the referee while the worker calls"),
    Mutation("referee-native-let-go-always", "referee/session.py",
             "compare.within(expected, expected64, *compare.tolerance(outline.dtype, *self.tolerance)):", "True:",
             (_k(REFEREE, "within_the_tolerance_of_the_truth_is_let_go"),),
             "a native output let go where it misses the truth: a candidate held to it would be compared with the "
             "truth instead (no `reference-imprecise` fallback)"),
    Mutation("referee-native-on-device", "referee/session.py",
             "NATIVE_IN_HOST_FROM_BYTES = 256 << 20", "NATIVE_IN_HOST_FROM_BYTES = 1 << 62",
             (_k(GPU, "native_output_that_misses"),),
             "a large native output that misses the truth kept on the device: an output more of the judge's peak "
             "(killed only on the GPU)"),
    Mutation("referee-unwritten-without-native", "referee/server.py",
             "reply[\"unwritten\"] = compare.unwritten(received, kept.values)",
             "reply[\"unwritten\"] = compare.unwritten(received, kept.expected)",
             (_k(REFEREE, "within_the_tolerance_of_the_truth_is_let_go"),),
             "the unwritten count breaks where the native output was let go"),
    Mutation("compared-output-held-by-the-worker", "stages/context.py",
             "        if _shared(reply):", "        if False:",
             (_k("tests/test_memory.py", "let_go_before_anything"),),
             "a shared output held by the worker while the referee draws the next trial (a third output at the peak)"),
    Mutation("range-output-held-by-the-worker", "stages/probe.py",
             "        j.let_go(reply, STAGE)  # (a move of the inputs alone", "        (reply, STAGE)  # (a move of the inputs alone",
             (_k("tests/test_memory.py", "no_referee_draw"),),
             "the range probe's output held by the worker through the next range probe's draw"),
    Mutation("repeat-outputs-held-by-the-worker", "stages/probe.py",
             "seen[\"_blobs\"])\n    j.let_go(seen, STAGE)", "seen[\"_blobs\"])\n    (seen, STAGE)",
             (_k("tests/test_memory.py", "no_referee_draw"),),
             "the repeat probe's second output held by the worker through the next probe's draw (level1/7: 3.13x)"),
    Mutation("check-inputs-not-kept", "stages/check.py",
             "                drawn = j.draw(trial_seed, STAGE, keep_inputs=True)",
             "                drawn = j.draw(trial_seed, STAGE)", (_k(INTEGRITY, "test_input_mutation"),),
             "a check's inputs let go before the comparison of the candidate's inputs after its call"),
    Mutation("inputs-always-owned", "proc/inputs.py",
             "    if not isinstance(a, torch.Tensor) or sys.getrefcount(args[index]) > 3 or a._base is not None or a.requires_grad:",
             "    if not isinstance(a, torch.Tensor):", (_k(REFEREE, "uncopied"),),
             "a tensor the problem keeps moved in place by a range probe"),
    # --- referee/server.py and session.py -------------------------------------------------------------
    Mutation("referee-input-mutation-unchecked", "referee/server.py",
             "            return not same_bits(kept, after)", "            return False",
             (_k(INTEGRITY, "test_input_mutation"),)),
    Mutation("kernelbench-seed-not-42", "stages/check.py",
             'init_seed = KERNELBENCH_SEED if kernelbench else derive_seed(seed, "init")',
             'init_seed = derive_seed(seed, "init")',
             (_k(KILLS, "seed_42"),)),
    Mutation("kernelbench-state-copied", "stages/check.py",
             "built = construct(None, derive=not started.kernelbench)", "built = construct(None, derive=True)",
             (_k(KILLS, "copies_no_state"),)),
    Mutation("kernelbench-rule-strict", "stages/check.py",
             'reply, STAGE, rule="kernelbench")', 'reply, STAGE, rule="strict")',
             (_k(KILLS, "kernelbench"), _k(INTEGRITY, "kernelbench")),
             "the strict rule against the native reference is allclose's bound"),
    # --- stages/check.py: the strict trials -------------------------------------------------------------
    Mutation("check-poison-off", "stages/check.py",
             "poison=True, return_inputs=True)", "poison=False, return_inputs=True)",
             (_k(KILLS, "half_written"), _k(GPU, "unwritten"))),
    Mutation("check-inputs-not-returned", "stages/check.py",
             "poison=True, return_inputs=True)", "poison=True, return_inputs=False)",
             (_k(INTEGRITY, "test_input_mutation"),)),
    # --- stages/probe.py: each probe returns nothing ---------------------------------------------------
    *(Mutation(f"probe-{name}-silent", "stages/probe.py", f'Probe("{name}", {function})',
               f'Probe("{name}", lambda j: [])', tests)
      for name, function, tests in (
          ("op-trace", "probe_op_trace", (_k(INTEGRITY, "decoy_triton"),)),
          ("aliasing", "probe_aliasing", (_k(INTEGRITY, "output_alias_of_a_module_buffer"),)),
          ("threads", "probe_threads", (_k(INTEGRITY, "thread_left_running"),)),
          ("repeat", "probe_repeat", (_k(INTEGRITY, "drifting_with_a_call_counter or buffer_reused"),)),
          ("unwritten-output", "probe_unwritten_output", (_k(INTEGRITY, "half_written"), _k(KILLS, "half_written"),
                                                          _k(GPU, "unwritten"))),
          ("refilled-inputs", "probe_refilled_inputs", (_k(INTEGRITY, "memo_by_address"),)),
          ("parameters", "probe_parameters", (_k(INTEGRITY, "stale_after_in_place"),)),
          ("ranges", "probe_ranges", (_k(PROBES, "tanh_gelu"),)),
      )),
    # --- issue 14: each parameter alone, kernels where they run, timed calls watched ----------------------
    Mutation("parameters-never-alone", "stages/probe.py",
             'alone = alone_sample(names, _seed(j, "alone"))', "alone = []",
             (_k(PROBES, "partial_cache_key"),)),
    Mutation("native-calls-uncounted", "worker/optrace.py",
             "name = self.functions.get(id(arg))", "name = None",
             (_k(PROBES, "counted_however"),)),
    Mutation("timed-threads-unwatched", "worker/watch.py",
             "if threading.active_count() != self.count_before:", "if False:",
             (_k(PROBES, "while_timed"),)),
    # --- stages/measure.py: timed-output checks, cross-check, floor, baselines' cache ---------------------
    Mutation("timed-checks-off", "stages/measure.py",
             "(position is not None and schedule.wants(position))", "False",
             (_k(KILLS, "beyond_the_guaranteed"),), "only the last calls' check when the budget ends early left"),
    Mutation("timed-reuse-unchecked", "stages/measure.py",
             "        _reused_while_timed(j, i)\n", "",
             (_k(REFEREE, "overwritten_within"),), "a claimed overwrite skipped the check, as before"),
    Mutation("timed-refill-reseeds", "proc/timed.py",
             "        with generators_kept(self.device):  # the refill's seeding is not the candidate's to see\n"
             "            return make_inputs(self.problem, seed, self.device)",
             "        return make_inputs(self.problem, seed, self.device)",
             (_k(REFEREE, "generators_as"),), "a timed call's refill seen in the generators, as before"),
    Mutation("watched-refill-before-flush", "proc/timed.py",
             "        self._flusher()\n        if self._watched_values is not None:\n"
             "            i, values = self._watched_values\n            self._watched_values = None\n"
             "            refill(self.sets[i % len(self.sets)], values, self._copy)\n",
             "        if self._watched_values is not None:\n"
             "            i, values = self._watched_values\n            self._watched_values = None\n"
             "            refill(self.sets[i % len(self.sets)], values, self._copy)\n        self._flusher()\n",
             (_k(REFEREE, "watched_calls_values_are_written"),),
             "a watched call's new values written before its flush (side work waiting for them runs beside it)"),
    Mutation("watched-samples-kept", "stages/measure.py", "            return [None] * count\n",
             "            return samples\n", (_k(REFEREE, "watched_calls_are_refilled"),),
             "a watched batch's times (its watched calls' inputs warm in the L2) samples"),
    Mutation("timed-checks-first-span-only", "stages/measure.py",
             "chance = min(CHECKED_FRACTION_AT_MOST, self.per_span / (end - start))",
             "chance = min(CHECKED_FRACTION_AT_MOST, self.per_span / (end - start)) if start == 0 else 0.0",
             (_k(INTEGRITY, "first_few_hundred"),), "checks spent on the first calls, as before the schedule"),
    Mutation("timed-mismatch-ignored", "stages/measure.py",
             "    if not trial.passed:\n        how = ", "    if False:\n        how = ",
             (_k(INTEGRITY, "replay_during_timing"),)),
    Mutation("timed-inputs-never-refilled", "stages/measure.py",
             "        if k in used:  # this set's values were seen", "        if False:  # this set's values were seen",
             (_k(INTEGRITY, "replay_during_timing or memo_by_sampled"),)),
    Mutation("timing-skew-unguarded", "stages/measure.py",
             "SKEWED_FRACTION = 0.75", "SKEWED_FRACTION = 0.0",
             (_k(REFEREE, "one_call_is_reported"),), "a batch's work done at one call timed as a fraction"),
    Mutation("timing-skew-fraction-0.95", "stages/measure.py",
             "SKEWED_FRACTION = 0.75", "SKEWED_FRACTION = 0.95",
             (_k(REFEREE, "one_call_is_reported"),), "honest launch-bound candidates reported as batch means"),
    Mutation("timing-skew-no-allowance", "stages/measure.py",
             "SKEW_ALLOWANCE_MS = 0.05", "SKEW_ALLOWANCE_MS = 0.0",
             (_k(REFEREE, "one_call_is_reported"),), "honest tiny kernels' first-call latency called skew"),
    Mutation("kept-baseline-worker-running", "isolation.py",
             "            seen.running = sandbox.freeze(tasks, stopped)", "            seen.running = []",
             (_k(SANDBOX, "frozen_worker"),), "the candidate's processes load the host while the reference is timed"),
    Mutation("frozen-cpu-time-unread", "sandbox/__init__.py",
             "            ticks[pid] = int(fields[11]) + int(fields[12])", "            ticks[pid] = 0",
             (_k(SANDBOX, "continued_while_the_worker_is_frozen"),), "a process continued while stopped not seen"),
    Mutation("kept-baseline-ran-while-stopped-ignored", "stages/measure.py",
             "    if frozen.ran:\n", "    if False:\n",
             (_k(KILLS, "keeps_running_while_stopped"),), "a worker process continued while stopped, its run kept"),
    Mutation("kept-baseline-resisting-worker-ignored", "stages/measure.py",
             "        if frozen.running:\n", "        if False:\n",
             (_k(KILLS, "keeps_running_while_stopped"),), "a worker process continued by another timed beside"),
    Mutation("freeze-gives-up-silently", "sandbox/__init__.py",
             "            return [pid for pid in running if _unstopped(pid) - {\"D\"}]", "            return []",
             (_k(SANDBOX, "still_running_at_its_deadline"),), "a process still running taken for stopped"),
    Mutation("kept-baseline-never-forgotten", "stages/measure.py",
             "            del j.baselines[problem_key]", "            pass",
             (_k(KILLS, "lanes_kept_baselines"),), "a disagreeing lane baseline kept for every later candidate"),
    Mutation("held-timed-outputs-never-compared", "stages/measure.py",
             "    for check in j.held_checks:", "    for check in []:",
             (_k(INTEGRITY, "replay_during_timing"),), "timed outputs held for after the timing never compared"),
    Mutation("timing-skew-allowance-unshared", "stages/measure.py",
             "SKEW_ALLOWANCE_SHARE = 0.4", "SKEW_ALLOWANCE_SHARE = 1.0",
             (_k(REFEREE, "one_call_is_reported"),), "a tiny batch's whole work hidden in the allowance"),
    Mutation("timing-unavailable-from-worker", "stages/measure.py",
             "        if process is not j.referee:  # only the reference may be untimeable",
             "        if False:  # only the reference may be untimeable",
             (_k(REFEREE, "cannot_be_timed"),), "a forged 'unavailable' from the worker crashed the judge"),
    Mutation("impossible-fraction-0", "stages/measure.py",
             "IMPOSSIBLE_FRACTION = 0.5", "IMPOSSIBLE_FRACTION = 0.0",
             (_k(INTEGRITY, "impossible_speed_floor"),)),
    Mutation("cross-check-tolerance-huge", "stages/measure.py",
             "SLACK_TOLERANCE_MS = 0.02", "SLACK_TOLERANCE_MS = 1e9",
             (_k(REFEREE, "do_not_add_up"),)),
    Mutation("confirm-decided-on-the-first-rounds", "stages/measure.py",
             "for rounds in (CONFIRM_ROUNDS, CONFIRM_MORE_ROUNDS):", "for rounds in (CONFIRM_ROUNDS,):",
             (_k(REFEREE, "honest_only_while_the_judge_confirms"),)),
    Mutation("timed-check-default-tolerance", "stages/context.py",
             "check.atol, check.rtol, rule, keep, verdict_only, held)",
             "*((None, None) if rule == \"timed\" else (check.atol, check.rtol)), rule, keep, verdict_only, held)",
             (_k(KILLS, "beyond_the_guaranteed"),), "the timed checks ignore --atol/--rtol"),
    Mutation("compile-cache-always-trusted", "stages/measure.py",
             "if _within(entry.get(\"eager_median_ms\"), now, COMPILE_CACHE_FACTOR) and \\\n"
             "                _within(compiled.get(\"median_ms\"), now, COMPILE_EAGER_FACTOR):",
             "if compiled:",
             (_k(KILLS, "cached_compile_time"),)),
    Mutation("lane-baselines-reused-unchecked", "stages/measure.py",
             "    agrees = short_ms is not None and _agrees(short_ms, then_ms)",
             "    agrees = short_ms is not None",
             (_k(KILLS, "kept_baselines"),), "a batch lane's baselines kept whatever this run measures"),
    Mutation("kept-check-pools-disagreeing-slacks", "stages/measure.py",
             "    if agrees and missing > 0 and j.baselines.get(problem_key) is memo:",
             "    if missing > 0 and j.baselines.get(problem_key) is memo:",
             (_k(KILLS, "kept_baselines"),), "the cross-check's reference pools the full run's batches where a "
             "disagreeing run says they are of other conditions"),
    Mutation("kept-check-tops-up-from-newer-figures", "stages/measure.py",
             "    if agrees and missing > 0 and j.baselines.get(problem_key) is memo:",
             "    if agrees and missing > 0:",
             (_k(KILLS, "kept_baselines"),), "a short run topped up with the batches of figures other than those it "
             "was compared with"),
    Mutation("baselines-bandwidth-under-another-key", "pipeline.py",
             "measure.run_baselines(judging, problem_key, device_key, run.clock_ms)",
             "measure.run_baselines(judging, problem_key, problem_key, run.clock_ms)",
             (_k("tests/test_batch.py", "baselines_once"),), "the bandwidth a batch's baselines stage settled kept "
             "under a key no timing looks up: each settles its own, with its candidate loaded"),
    Mutation("bandwidth-settled-in-a-timing-kept", "stages/measure.py",
             "    return _bandwidth_settled(j, device_key, STAGE)",
             "    return j.memo.bandwidth_gbps.setdefault(device_key, _bandwidth_settled(j, device_key, STAGE)[0]), "
             "\"kept\"",
             (_k(SANDBOX, "bandwidth_its_baselines"),), "a bandwidth settled with a candidate loaded (one slowed on "
             "purpose) kept for the device's later candidates"),
    Mutation("gate-requests-unheld", "batch/gate.py",
             "        if self.held is not None:\n            return _nothing", "        if True:\n            return _nothing",
             ("tests/test_batch.py -k requests_in_flight", "tests/test_pool.py -k stops_its_neighbours"),
             "a batch lane's requests run beside another lane's timing on the device"),
    Mutation("lane-neighbours-run-beside-a-timing", "batch/local.py",
             '                if process.role == "worker" and process.process is not None and not process.dead and \\\n',
             "                if False and \\\n", ("tests/test_pool.py -k stops_its_neighbours",),
             "the device's other lanes' workers run on while a lane times"),
    Mutation("lane-neighbour-running-untold", "batch/local.py",
             "                process.ran_while_stopped.extend(seen.running or seen.ran)", "                pass",
             ("tests/test_pool.py -k stops_its_neighbours",),
             "a neighbour's worker that ran while stopped for a lane's timing is not told to its evaluation"),
    Mutation("worker-ran-while-stopped-ignored", "pipeline.py", "    if worker.ran_while_stopped:", "    if False:",
             ("tests/test_pool.py -k ran_while",), "a worker that ran while stopped for another's timing passes"),
    Mutation("gate-request-waits-for-itself", "batch/gate.py",
             "        if self.requests:\n            self.gate.share_more()",
             "        if False:\n            self.gate.share_more()",
             ("tests/test_batch.py -k request_in_flight_sends",),
             "a lane's request waits for a timing that waits for that lane's earlier request: both wait for ever"),
    # --- the verdict, the hidden re-check, the store ----------------------------------------------------
    Mutation("verdict-ignores-fail-findings", "records.py",
             "if not trials or not all(t.passed for t in trials) or any(f.severity == \"fail\" for f in findings):",
             "if not trials or not all(t.passed for t in trials):",
             (_k(INTEGRITY, "test_input_mutation"),)),
    Mutation("hidden-recheck-always-ok", "pipeline.py",
             "ok = bool(trials) and passed == len(trials) and not failing", "ok = True",
             (_k(KILLS, "hidden_recheck"),)),
    Mutation("store-write-skipped", "pipeline.py",
             "    if options.store_path is not None:\n        _record(", "    if False:\n        _record(",
             ("tests/test_mcp.py::test_benchmark_and_submit",)),
    # --- worker/server.py: what the worker reports -------------------------------------------------------
    Mutation("worker-inputs-reported-as-sent", "worker/server.py",
             'called = self._call(args, "ModelNew.forward", "check")',
             'called = self._call(clone_args(args), "ModelNew.forward", "check")',
             (_k(INTEGRITY, "test_input_mutation"),), "the inputs as they were before the call"),
    Mutation("worker-alias-report-off", "worker/server.py",
             "        if request.alias:\n", "        if False:\n",
             (_k(INTEGRITY, "output_alias_of_a_module_buffer"),)),
    Mutation("builds-writable-to-worker", "isolation.py",
             "        writable = [self.workdir, *options.writable]\n",
             "        writable = [self.workdir, *options.writable, *([options.cache_dir / \"builds\"] if options.cache_dir\n"
             "                                                       else [])]\n",
             (_k(SANDBOX, "compilers_flags_write_the_build_cache"),),
             "the build cache writable to the worker: a module left under another candidate's key"),
    Mutation("workers-folders-visible", "isolation.py",
             "        private = [workers_folder(), self._cache_dir() / \"locks\", self._cache_dir() / \"staging\"]",
             "        private = [self._cache_dir() / \"locks\", self._cache_dir() / \"staging\"]",
             (_k(SANDBOX, "sees_no_other_workers_folder"),),
             "every worker's folder visible to the others (and to the builders: a socket there)"),
    Mutation("stores-not-held", "isolation.py",
             "        self.stores_held = store.HeldOpen(options.stores)",
             "        self.stores_held = store.HeldOpen(())",
             (_k(SANDBOX, "journal_written_after_the_worker_started"),),
             "the hidden stores not held open: another evaluation's WAL file, made after the worker started, read"),
    Mutation("setup-code-after-answer", "isolation.py",
             "if code == SETUP_FAILED and self.sandbox is not None and not self.answered:",
             "if code == SETUP_FAILED and self.sandbox is not None:",
             (_k(SANDBOX, "cannot_pass_its_exit_for_the_sandboxs_setup_failure"),),
             "a worker's exit with the launcher's setup code read as the sandbox's failure: a judge error"),
    Mutation("status-pipe-reachable", "sandbox/launch.py",
             "    linux.prctl(linux.PR_SET_DUMPABLE, 0)\n", "    pass\n",
             (_k(SANDBOX, "cannot_pass_its_exit_for_the_sandboxs_setup_failure"),),
             "init and the launcher dumpable: the worker writes its status pipe through /proc"),
    Mutation("worker-faults-believed", "isolation.py",
             "        if self.candidate_loaded:\n            reply = _candidates_own(reply, op)\n", "",
             (_k(BLAME, "is_the_candidates"),),
             "a worker's reply believed when it puts the fault on the judge, the referee or the problem"),
    Mutation("probes-call-state-dict", "worker/server.py",
             "        now = _entries(session.candidate) if",
             "        now = session.candidate.state_dict(keep_vars=True) if",
             (_k(BLAME, "without_calling"),),
             "the candidate's state_dict called before each parameter change: a stale cache dropped only then passes"),
    Mutation("replace-through-modules", "worker/server.py",
             "    for owner in _submodules(module):", "    for owner in module.modules():",
             (_k(BLAME, "without_calling"),),
             "the swap of new parameter objects through the candidate's own modules()"),
    Mutation("unreadable-text-raises", "proc/failures.py", "    said = _text(exc)\n", "    said = str(exc)\n",
             (_k(BLAME, "cannot_be_read"),), "an exception whose __str__ raises ends the worker's report of it"),
    Mutation("build-reply-believed", "pipeline.py",
             "run.build = Build(**protocol.build_info(reply[\"build\"]))", "run.build = Build(**reply[\"build\"])",
             (_k(BLAME, "forged_build"),), "the worker's build reply read unchecked: a forged one ends the judge"),
    Mutation("structure-after-unpack", "referee/server.py",
             "                    if mismatch is None:\n",
             "                    if True:\n", (_k(BLAME, "from_its_description"),),
             "an output of the wrong structure unpacked before its shape is looked at: the referee's memory"),
    Mutation("journal-lines-not-renamed", "batch/runner.py", "        named = {**line, **export.naming(job)}\n",
             "        named = line\n", (_k("tests/test_batch.py", "names_each_job_anew"),),
             "a resumed batch's skipped job given the journal's line as it was named: a copy's result lost"),
    Mutation("turns-times-ignored", "stages/measure.py",
             "    if turns is not None and turns.median_ms - stats.median_ms > slack[\"paired_tolerance_ms\"]:",
             "    if False:", (_k(REFEREE, "replaced_by_the_turns"),),
             "a candidate cleared in the turns keeps the first times it gave, false outside them"),
    Mutation("turns-times-always", "stages/measure.py",
             "    if turns is not None and turns.median_ms - stats.median_ms > slack[\"paired_tolerance_ms\"]:",
             "    if turns is not None:",
             (_k(REFEREE, "never_shorten_the_report"),),
             "the turns' times reported however short: their outputs are unchecked, a candidate idles there"),
    Mutation("probes-change-construction-entries", "worker/server.py",
             "        session.held = {**session.held, **{name: t for name, t in now.items() if name in session.held}}",
             "        session.held = dict(session.held)", (_k(BLAME, "registered_anew"),),
             "the probes change the entries of ModelNew's construction: a weight registered anew is called stale"),
    Mutation("timed-batch-warning-believed", "stages/measure.py",
             "            if self.process.role == \"worker\" and not any(f.blocking for f in self.findings):",
             "            if False:", (_k(BLAME, "time-batch-reply0"),),
             "a timed batch answered with a warning alone ends the turns, the first times kept"),
    Mutation("usage-error-believed", "isolation.py",
             "    if not claimed and not reply.get(\"error\") and not reply.get(\"usage_error\"):",
             "    if not claimed and not reply.get(\"error\"):", (_k(BLAME, "forward-reply2"),),
             "a worker's `usage_error` believed after the candidate is loaded: an evaluation, a batch, ended"),
    Mutation("probe-field-errors-escape", "stages/probe.py",
             "    except (protocol.Untrusted, TypeError, ValueError, KeyError, AttributeError) as exc:",
             "    except protocol.Untrusted as exc:", (_k(BLAME, "observe"),),
             "a probe's reply missing a field ends the judge"),
    Mutation("blob-allocated-up-front", "channel.py",
             "    buffer, done = bytearray(min(size, FIRST_BUFFER_BYTES)), 0",
             "    buffer, done = bytearray(size), 0", (_k(BLAME, "never_sent"),),
             "a blob's announced size allocated before its bytes come"),
    Mutation("builder-writes-every-build", "isolation.py",
             "return with_parent(self._launched(command, [staging], seconds,",
             "return with_parent(self._launched(command, [staging, self._cache_dir() / \"builds\"], seconds,",
             (_k(SANDBOX, "compilers_flags_write_the_build_cache"),),
             "the builder (running the candidate's compiler flags) able to write every key's build"),
    Mutation("worker-poison-off", "worker/server.py",
             "        if request.poison:\n", "        if False:\n",
             (_k(KILLS, "half_written"), _k(GPU, "unwritten"))),
    Mutation("worker-guard-silent", "worker/server.py",
             "        if tampered:\n", "        if False:\n",
             (_k(INTEGRITY, "tampering_at_import"),)),
    Mutation("guard-standard-library-unwatched", "worker/guard.py",
             '            [(module.__name__, module) for module in _standard_modules_used()]',
             '            []', (_k(INTEGRITY, "work_done_late"),), "work done where the worker copies an output"),
    Mutation("guard-hooks-unseen", "worker/guard.py",
             "        return sorted(changed | self.audited | self._hooked(deep))",
             "        return sorted(changed)", (_k(INTEGRITY, "hook_that_runs_code"),)),
    Mutation("guard-device-context-counted", "worker/guard.py",
             "sum(not isinstance(function_at(i), device_context)", "sum(True or isinstance(function_at(i), device_context)",
             (_k(INTEGRITY, "default_device_set_at_import"),)),
    Mutation("guard-checked-after-only", "worker/server.py",
             "before = [] if op == protocol.TimeBatch.op else self.guard.tampered(deep=False)",
             "before = []", (_k(INTEGRITY, "undone_at_its_first_use"),)),
    # --- isolation: the limits and the channel -----------------------------------------------------------
    # (the memory limit is left unmutated: without it the test's candidate would take the machine's memory)
    # --- the sandbox (issue 13) -------------------------------------------------------------------------
    Mutation("sandbox-breach-ignored", "pipeline.py",
             "        if files:\n            shown", "        if False:\n            shown",
             (_k(SANDBOX, "planted_files_fail"),), "a changed judge package no longer fails the candidate"),
    Mutation("package-change-always-breach", "isolation.py",
             "        self.package_read_only = \"mount\" in", "        self.package_read_only = \"none\" in",
             (_k(SANDBOX, "package_changed_by_another"),), "an update of the judge during a run fails the candidate"),
    Mutation("sandbox-reaper-off", "sandbox/launch.py",
             "        left = children_of(os.getpid())\n", "        left = []\n",
             (_k(SANDBOX, "reaper_kills_every_descendant"),), "the launcher leaves the worker's descendants"),
    Mutation("launcher-sigkill-handler", "sandbox/launch.py",
             "    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled (setting them raises)\n"
             "        signal.signal(signum, signal.SIG_DFL)\n",
             "    signal.signal(signum, signal.SIG_DFL)\n",
             (_k(SANDBOX, "memory_limit_is_out_of_memory"),), "a worker's SIGKILL is not passed on"),
    Mutation("builders-at-full-priority", "builder.py",
             "BUILD_NICENESS = 10", "BUILD_NICENESS = 0",
             (_k(SANDBOX, "niceness"),), "batch builds take the cores a lane times on"),
    Mutation("plan-rows-taken-before-the-shape", "referee/plan.py",
             "              if s.size > 1 and all(t.dim() > s.out_dim and t.shape[s.out_dim] == s.size for t in outs)]",
             "              if s.size > 1]",
             ("tests/test_memory.py -k upcasts_least",), "A.T @ B ends in problem-error (a device assert on a GPU)"),
    Mutation("plan-split-cost-ignored", "referee/plan.py",
             "    return sorted(usable, key=lambda s: sum(memory.tensor_bytes([a]) for a, d in zip(inputs, s.dims) if d is None))",
             "    return usable", ("tests/test_memory.py -k upcasts_least",),
             "A @ B cut by A's rows: every chunk upcasts the whole of B"),
    Mutation("plan-chunks-unchecked", "referee/plan.py",
             "    return next((cuts for cuts in options if _chunks_agree(native, inputs, expected, cuts)), ())",
             "    return options[0]", ("tests/test_memory.py -k never_cut",),
             "a cut that passed its sample by chance used: x / x.abs().max() cut in four, its truth wrong"),
    Mutation("plan-chunks-written-as-rows", "referee/plan.py",
             "            whole = whole.narrow(dim, begin, count)",
             "            whole = whole.narrow(0, begin, count)", ("tests/test_memory.py -k upcasts_least",),
             "a float64 truth cut by columns written back as rows"),
    Mutation("plan-loss-never-reduced", "referee/plan.py",
             '        return [Split(along_batch, 0, batch, reduce) for reduce in ("mean", "sum") if batch > 1]',
             "        return []", ("tests/test_memory.py -k loss_over_the_batch",),
             "a loss over the batch never cut: its float64 run whole (level1/99: 3.2x) or none"),
    Mutation("plan-loss-mean-unweighted", "referee/plan.py",
             '    weights = [count / total if split.reduce == "mean" else 1.0 for count, _ in pieces]',
             '    weights = [1 / len(pieces) if split.reduce == "mean" else 1.0 for count, _ in pieces]',
             ("tests/test_memory.py -k loss_over_the_batch",),
             "a mean loss's chunks of unequal lengths weighed alike"),
    Mutation("ranges-outside-values-binned", "referee/ranges.py",
             "            index = torch.where(inside, index, BINS)", "            index = index",
             (_k("tests/test_probes.py", "coverage_counts"),),
             "an argument outside an op's curved range counted in its end bins: the default draw covers all of it"),
    Mutation("ranges-overflow-unseen", "referee/ranges.py",
             "    finite, squares = read[0] == 1.0, read[1]", "    finite, squares = True, read[1]",
             (_k("tests/test_probes.py", "root_mean"),),
             "a move that makes the reference overflow kept among the plan's candidates, its output's size infinite"),
    Mutation("ranges-gpu-counts-shifted", "referee/ranges.py",
             "    return (index.unsqueeze(0) == torch.arange(BINS, device=index.device).unsqueeze(1)).sum(1)",
             "    return (index.unsqueeze(0) == torch.arange(1, BINS + 1, device=index.device).unsqueeze(1)).sum(1)",
             (_k("tests/test_probes.py", "counting"),),
             "on a GPU each bin counted as the next: the values outside the range counted in the last"),
    Mutation("ranges-targets-one-after-another", "referee/ranges.py",
             "    return [per_target[k] for k in range(len(SCALES) + len(SHIFTS)) for per_target in moves]",
             "    return [move for per_target in moves for move in per_target]",
             ("tests/test_probes.py -k budget",), "a range plan cut short by its budget never moves a parameter"),
    Mutation("ranges-budget-before-each-target", "referee/ranges.py",
             "        if tried >= first_round and clock_ms() - started > budget_ms:",
             "        if clock_ms() - started > budget_ms:", ("tests/test_probes.py -k budget",),
             "level2/51 at full size on a CPU: only its input moved, a tanh GELU passes"),
    Mutation("plan-loss-index-left-whole", "referee/plan.py",
             "        if any(along_batch[j] is None and not inputs[j].is_floating_point() for j in tensors):",
             "        if False:", ("tests/test_memory.py -k tell_a_mean",),
             "a mean over rows an index input picks, cut: a device-side assert on a GPU"),
    Mutation("plan-loss-zero-decides", "referee/plan.py",
             "                if want is not None and not any(bool(w.abs() > SEPARABLE_TOLERANCE) for w in want):",
             "                if False:", ("tests/test_memory.py -k tell_a_mean",),
             "a sum over inputs under its hinge taken for a mean: a wrong truth on every later draw"),
    Mutation("plan-loss-draws-unchecked", "referee/plan.py",
             "        if reduced is None or not _near(reduced, _outputs(expected, scalars=True)):",
             "        if reduced is None:", ("tests/test_memory.py -k every_draw",),
             "a reduction right on the first draw kept on one where it is wrong"),
    Mutation("ranges-rows-never-moved", "referee/ranges.py",
             "    if rows is not None:\n        chosen_if_covered(rows)",
             "    if False:\n        chosen_if_covered(rows)", ("tests/test_probes.py -k part_of_the_batch",),
             "a loss without its last row, or on 7 rows in 8, passes"),
    Mutation("wire-neg-bit-as-bytes", "proc/tensorwire.py",
             "    t = t.resolve_conj().resolve_neg()", "    pass", (_k("tests/test_qa_regressions.py", "negative_view"),),
             "a negative view's bytes read as its values: -relu(x) passes level1/19"),
    Mutation("wire-uncarried-output-packed", "proc/tensorwire.py",
             "        if exact and not storageless and crossable(t):", "        if exact and not storageless:",
             (_k("tests/test_qa_regressions.py", "does_not_carry"),),
             "a float8 output is a judge-error, a 17-dimension one tampering"),
    Mutation("wire-uncopyable-copied", "proc/tensorwire.py",
             "                if not failures.is_out_of_memory(error):", "                if True:",
             (_k("tests/test_qa_regressions.py", "too_large_to_copy"),),
             "an expanded output of 2**40 elements is the judge's own fault (its copy's allocation raises)"),
    Mutation("threads-earlier-unseen", "worker/server.py",
             "                      earlier=[name for name in running_candidate_code(self._source()) if name not in started],",
             "                      earlier=[],",
             (_k("tests/test_qa_regressions.py", "earlier_call_running"),),
             "a thread the first call started, running the candidate's code for good, passes"),
    Mutation("strays-unseen", "isolation.py",
             "            if not strays:", "            if True:",
             (_k("tests/test_qa_regressions.py", "detached_process_busy"),
              _k("tests/test_qa_regressions.py", "probes_never_saw")),
             "a process detached twice at the first call, busy between the calls, passes"),
    Mutation("strays-window-each-alone", "sandbox/__init__.py",
             "    return own + reaped, len(strays)", "    return own, len(strays)",
             (_k("tests/test_qa_regressions.py", "relay"),),
             "a relay of short-lived children, each reaped by an idle parent, passes"),
    Mutation("torchs-own-ops-counted", "worker/optrace.py",
             "    if not where.startswith(_TORCH_DIR):", "    if True:",
             (_k("tests/test_qa_regressions.py", "torch_defines"),),
             "importing torch._inductor's config makes an honest candidate a reference-fallback"),
    Mutation("unconfirmed-unsaid", "stages/measure.py",
             "    if excess is None or tolerance is None or excess > tolerance or excess < UNCONFIRMED_SHARE * median_ms:",
             "    if True:",
             (_k("tests/test_qa_regressions.py", "within_the_machines_noise"),),
             "a claim shaved below the cross-check's tolerance is reported with no word of it"),
    Mutation("batch-broken-file-unkeyed", "batch/discover.py",
             '        sha256, kinds = file_sha256(solution) or "unreadable:" + str(solution), ()',
             '        sha256, kinds = "unreadable:" + str(solution), ()',
             (_k("tests/test_qa_regressions.py", "judged_again"),),
             "a broken file fixed after a batch's run is skipped as done when it runs again"),
    Mutation("ranges-small-inputs-off", "referee/ranges.py",
             "        chosen_if_covered(SMALL_INPUTS)", "        pass",
             (_k("tests/test_qa_regressions.py", "without_its_epsilon"),),
             "an RMSNorm without its eps passes every other move"),
    Mutation("worker-inputs-by-object", "worker/server.py",
             "        after = [view if not isinstance(arg, torch.Tensor) or same_place(arg, view) else REPOINTED",
             "        after = [arg for arg, view in zip(args, views)] or [view if same_place(arg, view) else REPOINTED",
             (_k(INTEGRITY, "repointed"),), "an input overwritten, then its tensor pointed at a copy (`x.set_`), passes"),
    Mutation("worker-repointed-unseen", "worker/server.py",
             "        after = [view if not isinstance(arg, torch.Tensor) or same_place(arg, view) else REPOINTED",
             "        after = [view for view in views] or [view if same_place(arg, view) else REPOINTED",
             (_k(INTEGRITY, "pointed_at_the_output"),), "an input tensor pointed at the output (`x.set_(y)`) passes"),
    Mutation("guard-torch-unwatched", "worker/guard.py",
             '            namespaces += [("torch", torch), ("torch.Tensor", torch.Tensor)]',
             '            namespaces += [("torch.Tensor", torch.Tensor)]', (_k(INTEGRITY, "draws_the_inputs"),),
             "a candidate wrapping torch.rand sees every input drawn, outside the timing"),
    Mutation("guard-problem-module-unwatched", "worker/server.py",
             '            self.guard.watch("the problem module", problem_module)', "            pass",
             (_k(INTEGRITY, "draws_the_inputs"),), "a candidate wrapping the problem's get_inputs works outside the timing"),
    Mutation("build-constants-of-any-value", "worker/build.py",
             "              if k in own and type(own[k]) is type(written[k]) and own[k] == written[k]}",
             "              if k in own and type(own[k]) is type(written[k])}",
             (_k("tests/test_qa_regressions.py", "own_constant"),), "a candidate's own `dim = 1` set to the run's size"),
    Mutation("sandbox-default-store-shown", "options.py",
             "            folder = (_home_store_path().parent,)",
             "            folder = ()", (_k(SANDBOX, "users_default_store"),),
             "a --no-store run's worker reads the user's default store (other candidates' sources)"),
    Mutation("tally-ignores-overlapping-spans", "memtally.py",
             "                    if other.start >= span.end:", "                    if True:",
             ("tests/test_memory.py -k beside_what_the_other_holds",),
             "the judge's peak misses a request the referee answered during the worker's timed batches"),
    Mutation("isolation-timeout-ignored", "isolation.py",
             "message = channel.receive(self.read_fd, deadline, self.clock)",
             "message = channel.receive(self.read_fd, deadline + 1e9, self.clock)",
             (_k(ISOLATION, "hang_is_stopped"), _k(INTEGRITY, "hanging_only_while_timed"))),
    Mutation("timing-batch-unbounded", "stages/measure.py",
             "        if self.reference_ms is None:\n            return None",
             "        if True:\n            return None", (_k(INTEGRITY, "hanging_only_while_timed"),)),
    Mutation("probe-data-swap-off", "stages/probe.py",
             '    if alone:  # one entry, drawn in secret', '    if False:  # one entry, drawn in secret',
             (_k("tests/test_probes.py", "data_is_swapped"),)),
    Mutation("timed-inputs-unchecked", "stages/measure.py",
             "protocol.ExportOutput(i, inputs=inputs)", "protocol.ExportOutput(i)",
             (_k(INTEGRITY, "inputs_only_while_timed"),)),
    Mutation("range-overflow-shift-off", "referee/ranges.py",
             "    for i in sorted(centered_inputs):", "    for i in sorted(centered_inputs)[:0]:",
             (_k("tests/test_probes.py", "softmax_that_overflows"),)),
    Mutation("isolation-nonce-unchecked", "isolation.py",
             'if message.get("nonce") != nonce:', "if False:",
             (_k(INTEGRITY, "forged_replies_on_the_result_channel"),)),
    Mutation("protocol-numbers-unchecked", "protocol.py",
             "    return [number(v, name, low=low, high=high) for v in values]", "    return list(values)",
             (_k(REFEREE, "forged_timing_numbers"),)),
    Mutation("probe-range-plan-not-kept", "stages/probe.py",
             "    kept = plans.get(key) if plans is not None else None", "    kept = None",
             (_k("tests/test_batch.py", "kept_range_plan_serves"),),
             "every candidate of a batch plans its range probes afresh (dozens of reference runs each)"),
    Mutation("pipeline-memo-key-without-problem", "pipeline.py",
             "cache.key(problem.sha256, problem.constants, options.protocol, device_key)",
             "cache.key(options.protocol, device_key)",
             (_k("tests/test_batch.py", "kept_range_plan_serves"),),
             "a lane's range plan kept across problems: another problem's moves (a softmax's shift unmade)"),
    Mutation("probe-kept-rows-not-redrawn", "referee/ranges.py",
             "    transforms = [Transform(t.target, t.scale, t.shift, rows_seed(seed)) if t.rows else t for t in transforms]",
             "    transforms = list(transforms)", (_k("tests/test_batch.py", "kept_range_plan_serves"),),
             "a kept plan's rows move shifts the first candidate's secret rows for every later one"),
    Mutation("ranges-kept-plan-unchecked", "referee/ranges.py",
             "    if short:\n        return None, short", "    if False:\n        return None, short",
             (_k(REFEREE, "put_back_every_state_entry"), _k("tests/test_batch.py", "kept_range_plan_serves")),
             "a kept range plan taken for a draw its moves cover less of (a tanh GELU passed 6 candidates in 30)"),
    Mutation("referee-kept-check-failure-uncaught", "referee/server.py",
             "            except Exception as exc:  # noqa: BLE001 - the problem's forward, on moved entries: planned again",
             "            except RuntimeError as exc:  # noqa: BLE001 - the problem's forward, on moved entries: planned again",
             (_k("tests/test_batch.py", "refuses_on_a_draw"),),
             "a reference raising a ValueError on a kept plan's moves errs the candidate instead of a new plan"),
    Mutation("probe-short-plan-offered-again", "stages/probe.py",
             "        plans[key] = None", "        pass", (_k("tests/test_batch.py", "kept_range_plan_serves"),),
             "a problem's kept plan checked again at every later candidate after it fell short on one"),
    Mutation("probe-plan-reusable-ignored", "stages/probe.py",
             'reply.get("reusable") is True', "True", (_k("tests/test_batch.py", "sampled_its_targets"),),
             "a plan whose targets a candidate's secret seed sampled kept for the problem's other candidates"),
    Mutation("lane-fill-during-warm-up", "batch/local.py",
             "        if not self.tracked.stopped and not (warming is not None and warming.is_alive()):",
             "        if not self.tracked.stopped:", (_k("tests/test_pool.py", "warm_up_keeps"),),
             "an evaluation's end starts a second pair of spares beside the pair the warm-up holds"),
    Mutation("gate-closing-unnamed", "batch/gate.py",
             "            self.gate.unshare(CLOSING)", "            self.gate.unshare()",
             (_k("tests/test_batch.py", "names_what_each_timing"),),
             "a lane's processes ending named a request: the timings' waits for them put elsewhere"),
)


def apply(mutation: Mutation, src: Path) -> None:
    """Write the mutated file into the copy `src` (the snippet must occur exactly once)."""
    path = src / "kerneljudge" / mutation.file
    text = path.read_text()
    count = text.count(mutation.original)
    if count != 1:
        raise SystemExit(f"{mutation.name}: the snippet occurs {count} times in {mutation.file}, not once")
    path.write_text(text.replace(mutation.original, mutation.replacement))


def pytest_args(tests: tuple[str, ...]) -> list[list[str]]:
    """One pytest invocation per entry ("FILE -k EXPR" or a node id)."""
    return [entry.split(" ", 2)[:1] + (["-k", entry.split(" -k ", 1)[1]] if " -k " in entry else [])
            for entry in tests]


def run_tests(tests: tuple[str, ...], src: Path, deadline_s: float) -> tuple[str, float]:
    """'passed', 'failed' or 'timeout', and the seconds it took; stops at the first failing invocation."""
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": str(src), "PYTHONDONTWRITEBYTECODE": "1"}
    for args in pytest_args(tests):
        left = deadline_s - (time.monotonic() - started)
        command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *args]
        try:
            done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=max(left, 1), start_new_session=True)
        except subprocess.TimeoutExpired:
            return "timeout", time.monotonic() - started
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            if done.returncode not in (1,):  # 1: tests failed; anything else is a collection or usage error
                print(f"    pytest exit {done.returncode}: {' | '.join(tail)}", file=sys.stderr)
            return "failed", time.monotonic() - started
    return "passed", time.monotonic() - started


def check_mutation(mutation: Mutation) -> tuple[str, float]:
    with tempfile.TemporaryDirectory(prefix="kj-mutant-") as folder:
        src = Path(folder) / "src"
        shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        apply(mutation, src)
        outcome, seconds = run_tests(mutation.tests, src, TIMEOUT_S)
    return {"passed": "survived", "failed": "killed", "timeout": "killed (timeout)"}[outcome], seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and their tests, run nothing")
    parser.add_argument("--only", action="append", default=[], metavar="NAME", help="run only this mutation (repeatable)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unmutated run of the named tests")
    parser.add_argument("--markdown", action="store_true", help="end with a markdown table of the results")
    args = parser.parse_args(argv)
    names = [m.name for m in MUTATIONS]
    assert len(set(names)) == len(names), "mutation names must be unique"
    unknown = [n for n in args.only if n not in names]
    if unknown:
        parser.error(f"unknown mutation(s): {', '.join(unknown)} (see --list)")
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only]
    for m in chosen:  # every snippet must apply before anything runs
        text = (ROOT / "src" / "kerneljudge" / m.file).read_text()
        if text.count(m.original) != 1:
            parser.error(f"{m.name}: the snippet occurs {text.count(m.original)} times in {m.file}, not once")
    if args.list:
        for m in chosen:
            print(f"{m.name:40} {m.file:22} {'; '.join(m.tests)}")
        return 0
    if not args.no_baseline:
        tests = tuple(dict.fromkeys(t for m in chosen for t in m.tests))
        outcome, seconds = run_tests(tests, ROOT / "src", TIMEOUT_S * 4)
        print(f"baseline (unmutated, {len(tests)} selections): {outcome} in {seconds:.0f} s", flush=True)
        if outcome != "passed":
            print("the named tests must pass on the unmutated code first", file=sys.stderr)
            return 2
    results = []
    for m in chosen:
        outcome, seconds = check_mutation(m)
        results.append((m, outcome, seconds))
        print(f"{outcome:17} {seconds:6.1f} s  {m.name}", flush=True)
    killed = sum(outcome.startswith("killed") for _, outcome, _ in results)
    print(f"score: {killed} / {len(results)} killed "
          f"({100 * killed / max(len(results), 1):.0f}%) in {sum(s for _, _, s in results):.0f} s")
    survivors = [m.name for m, outcome, _ in results if outcome == "survived"]
    if survivors:
        print("survived: " + ", ".join(survivors))
    if args.markdown:
        print("\n| mutation | file | outcome | s | tests |\n| --- | --- | --- | --- | --- |")
        for m, outcome, seconds in results:
            print(f"| `{m.name}` | `{m.file}` | {outcome} | {seconds:.0f} | {'; '.join(m.tests)} |")
    return 0 if not survivors else 1


if __name__ == "__main__":
    sys.exit(main())
