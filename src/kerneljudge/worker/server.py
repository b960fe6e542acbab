"""Dispatching the judge's requests to the worker's stages; each reply is plain data.

Requests: build (import problem and candidate), check (construct and trials), probe, time. A reply
always carries `findings` (dicts) and `poisoned`; stage data is under the stage's own key. Long stages
send progress messages before their reply (`progress`), carrying the request's nonce as the reply does.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Callable

import torch

from kerneljudge.records import Finding
from kerneljudge.worker import build, check, kernelbench, machine, probes, timing_stage
from kerneljudge.worker.failures import classify
from kerneljudge.worker.guard import Guard
from kerneljudge.worker.session import Session


class Server:
    """Answers the judge's requests in order, for one candidate: build, then check, probe and time on
    the Session that build created. Each reply is data; a tampering finding is added to any reply after
    which the guard sees something changed."""

    PROGRESS_EVERY_MS = 250.0  # the least time between two throttled progress messages

    def __init__(self, guard: Guard, send: Callable[[dict[str, Any]], None] = lambda message: None):
        self.guard = guard
        self.send = send  # writes one message to the judge
        self.session: Session | None = None
        self.reported_tampering: set[str] = set()
        self.nonce: str | None = None
        self.last_progress_ms = float("-inf")

    def progress(self, message: str, done: int | None = None, total: int | None = None, *,
                 throttle: bool = False) -> None:
        """Tell the judge what the current request is doing (shown on a terminal); `throttle`d messages
        (counts in a loop) are sent at most every PROGRESS_EVERY_MS, so a measurement is not slowed."""
        now = self.guard.wall_ms()
        if throttle and now - self.last_progress_ms < self.PROGRESS_EVERY_MS:
            return
        self.last_progress_ms = now
        self.send({"progress": {"message": message, "done": done, "total": total}, "nonce": self.nonce})

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        self.nonce = request.get("nonce")
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            return _reply([Finding.of("judge-error", f"the worker got an unknown request {op!r}", stage="worker")])
        try:
            reply = handler(request)
        except Exception as exc:  # noqa: BLE001 - a bug of ours must come back as data, not kill the channel
            detail = "".join(traceback.format_exception(exc)[-6:])
            return _reply([Finding.of("judge-error", f"{op}: {type(exc).__name__}: {exc}\n{detail}", stage=op)])
        tampered = [name for name in self.guard.tampered() if name not in self.reported_tampering]
        self.reported_tampering.update(tampered)
        if tampered:
            reply["findings"].append(Finding.of(
                "tampering", f"candidate code replaced {', '.join(tampered[:8])}", stage=op, names=tampered).to_json())
        return reply

    def op_ping(self, request: dict[str, Any]) -> dict[str, Any]:
        """Worker started: confirm the device, limit memory on CPU runs, say which versions it sees."""
        device = torch.device(request["device"])
        if device.type == "cuda":
            if not torch.cuda.is_available():
                return _reply([], error=f"device {device} requested, but torch {torch.__version__} in the worker "
                              "sees no CUDA GPU")
            if (device.index or 0) >= torch.cuda.device_count():
                return _reply([], error=f"device {device}: only {torch.cuda.device_count()} GPU(s) visible")
            torch.cuda.set_device(device.index or 0)
        else:
            machine.limit_memory(request.get("memory_limit_mb"))
        return _reply([], device=machine.describe_device(device), versions=machine.versions())

    def op_compile(self, request: dict[str, Any]) -> dict[str, Any]:
        """`kerneljudge build`: import (so compile) a candidate under the build cache, nothing else."""
        candidate = request["candidate"]
        machine.interpret_triton(torch.device(request["device"]), candidate["kinds"])
        _, info, failure = build.import_candidate(
            candidate["path"], candidate["sha256"], candidate["kinds"], cache_dir=Path(request["cache_dir"]),
            device=request["device"], arch=request.get("arch"), clock_ms=self.guard.wall_ms, progress=self.progress)
        return _reply([failure.finding] if failure else [], poisoned=bool(failure and failure.poisoned),
                      build=info.to_json())

    def op_build(self, request: dict[str, Any]) -> dict[str, Any]:
        device = torch.device(request["device"])
        machine.interpret_triton(device, request["candidate"]["kinds"])
        problem = request["problem"]
        candidate = request["candidate"]
        try:
            problem_module = build.import_problem(problem["path"], problem["source"], problem["constants"])
        except Exception as exc:  # noqa: BLE001 - the problem's own code
            return _reply([classify(exc, stage="build", code="problem-error", what="importing the problem").finding])
        constants, notice = build.candidate_constants(candidate["path"], problem["source"], problem["constants"])
        notices = [notice] if notice else []
        module, info, failure = build.import_candidate(
            candidate["path"], candidate["sha256"], candidate["kinds"], cache_dir=Path(request["cache_dir"]),
            device=str(device), arch=request.get("arch"), clock_ms=self.guard.wall_ms, constants=constants,
            progress=self.progress)
        if failure is not None:
            return _reply(notices + [failure.finding], poisoned=failure.poisoned, build=info.to_json())
        model_new, missing = build.find_model_new(module, "build")
        if missing is not None:
            return _reply(notices + [missing], build=info.to_json())
        self.session = Session(self.guard, device, int(request["seed"]),
                               build.Loaded(problem_module, module, model_new))
        return _reply(notices, build=info.to_json())

    def op_check(self, request: dict[str, Any]) -> dict[str, Any]:
        if request.get("protocol") == "kernelbench":
            outcome = kernelbench.run_kernelbench_check(self.session, trials=int(request["trials"]),
                                                        atol=request.get("atol"), rtol=request.get("rtol"))
            return _reply(outcome.findings, poisoned=outcome.poisoned,
                          trials=[t.to_json() for t in outcome.trials])
        outcome = check.run_check(self.session, trials=int(request["trials"]), atol=request.get("atol"),
                                  rtol=request.get("rtol"), label=request.get("label", "trial"))
        return _reply(outcome.findings, poisoned=outcome.poisoned, trials=[t.to_json() for t in outcome.trials])

    def op_time(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            block, found = timing_stage.run_timing(self.session, request["timing"], baselines=request["baselines"],
                                                   bandwidth_gbps=request.get("bandwidth_gbps"), progress=self.progress)
        except BaseException as exc:  # noqa: BLE001 - the candidate is called throughout timing
            failure = classify(exc, stage="timing", code="forward-error", what="ModelNew.forward (while timed)",
                               source_file=self.session.loaded.candidate.__file__)
            return _reply([failure.finding], poisoned=failure.poisoned)
        return _reply(found, timing=block)

    def op_probe(self, request: dict[str, Any]) -> dict[str, Any]:
        found, info, poisoned = probes.run_probes(self.session, atol=request.get("atol"), rtol=request.get("rtol"))
        return _reply(found, poisoned=poisoned, probe_info=info)


def _reply(findings: list[Finding], poisoned: bool = False, **data: Any) -> dict[str, Any]:
    return {"findings": [f.to_json() for f in findings], "poisoned": poisoned, **data}
