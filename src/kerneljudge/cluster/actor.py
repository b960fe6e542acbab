"""The judge actor (one per GPU) and the build task (any CPU), as plain code that Ray wraps.

The actor is a judge process: it runs `pipeline.evaluate` exactly as `kerneljudge eval` does, starting a
worker and a referee per candidate (a spare kept started, as `serve` does) and never importing torch or
candidate code. It returns the Result as JSON, with the node it ran on added to the device section
(the GPU model is already there, from the worker); it records nothing (the driver owns the store).
A candidate that kills this process (its worker's parent) takes only this actor down: Ray restarts it
and the driver reschedules the candidate (backend.py).
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Any

from kerneljudge import protocol
from kerneljudge.batch.keys import hardware
from kerneljudge.builder import build_one
from kerneljudge.cluster.task import JudgeTask, restore_paths
from kerneljudge.isolation import WorkerPool, WorkerProcess
from kerneljudge.options import Options
from kerneljudge.pipeline import evaluate, resolve_device
from kerneljudge.stages.context import DeviceMemo


def node_info() -> dict[str, Any]:
    """Where this process runs: the Ray node's id and address, the host name, the GPU ids Ray gave it, and
    this judge's pid (to find its log)."""
    import ray

    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "hostname": socket.gethostname(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid()}


class JudgeActor:
    """One judge on one GPU (Ray sets CUDA_VISIBLE_DEVICES for it; its workers inherit it)."""

    def __init__(self):
        self.node = node_info()
        self.pool = WorkerPool()
        self.memo = DeviceMemo()  # this GPU's baselines and range plans per problem, made once (stages/context.py)

    def ready(self, device: str) -> dict[str, Any]:
        """Answers once the actor is up (after a restart too): where it runs, and the hardware name the
        resume keys use (batch/keys.py, read from this node's files)."""
        return {**self.node, "hardware": hardware(resolve_device(device).split(":")[0])}

    def capability(self, options: dict[str, Any]) -> str | None:
        """This GPU's architecture ("9.0"), asked of a worker: what CPU nodes build CUDA candidates for."""
        options = Options.from_json(options)
        with WorkerProcess(options.worker) as worker:
            hello = worker.call(protocol.Ping(resolve_device(options.device)))
        return (hello.get("device") or {}).get("capability")

    def judge(self, task: dict[str, Any]) -> dict[str, Any]:
        """Run the pipeline on one JudgeTask (as JSON); return the Result's JSON, paths as the driver's."""
        task = JudgeTask.from_json(task)
        options = Options.from_json(task.options).replace(store_path=None)
        if task.builtin:
            options = options.replace(problems_root=None)  # the driver's checkout need not exist here
        with tempfile.TemporaryDirectory(prefix="kj-ray-") as folder:
            folder = Path(folder).resolve()
            problem, replacements = task.problem_ref, {}
            if task.problem_file is not None:
                relative, source, driver_path = task.problem_file
                shipped = folder / "problem" / relative
                shipped.parent.mkdir(parents=True, exist_ok=True)
                shipped.write_text(source)
                replacements[str(shipped)] = driver_path
                if task.ref_is_path:
                    problem = str(shipped)
                else:
                    options = options.replace(problems_root=folder / "problem")
            solution = Path(task.solution_path)
            if task.solution_source is not None:
                solution = folder / "solution" / solution.name
                solution.parent.mkdir()
                solution.write_text(task.solution_source)
                replacements[str(solution)] = task.solution_path
            result = evaluate(problem, solution, options, verb=task.verb, pool=self.pool,
                              memo=self.memo)
        data = restore_paths(result.to_json(), replacements)
        data["device"] = {**data.get("device", {}), "node": self.node}
        return data


def build_task(path: str, source: str, options: dict[str, Any]) -> dict[str, Any]:
    """Compile one candidate (the driver's `path`, shipped as `source`) into this node's build cache, as a
    CPU worker building for `options.arch` (as the local backend's builders do); the BuildOutcome's JSON,
    its paths the driver's."""
    options = Options.from_json(options)
    with tempfile.TemporaryDirectory(prefix="kj-ray-build-") as folder:
        shipped = Path(folder).resolve() / Path(path).name
        shipped.write_text(source)
        outcome = build_one(shipped, options, "cpu").to_json()
    return restore_paths(outcome, {str(shipped): path}) | {"node": node_info()}
