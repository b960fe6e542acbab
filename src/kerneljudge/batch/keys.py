"""Resume keys: a job is done when a result with its key is in the run's journal.

The key is a hash of what decides a result: the problem's content and the sizes it runs at, the
candidate's content, the options that change a judgement (not where files go), and the hardware. The
hardware is named without CUDA or torch (the judge imports neither): the GPU model from the driver's
files, else the CPU model; two GPUs of one model share results.
"""

from __future__ import annotations

import platform
from pathlib import Path

from kerneljudge import cache
from kerneljudge.options import Options
from kerneljudge.records import Problem

#: Options fields that say where things are, not how a candidate is judged.
NOT_JUDGED = ("cache_dir", "store_path", "problems_root", "device")


def hardware(device_type: str, proc: Path = Path("/proc")) -> str:
    """`cuda:<GPU model>` or `cpu:<CPU model>`, from the kernel's and the NVIDIA driver's files."""
    if device_type == "cuda":
        for info in sorted((proc / "driver" / "nvidia" / "gpus").glob("*/information")):
            for line in info.read_text(errors="replace").splitlines():
                if line.startswith("Model:"):
                    return "cuda:" + line.split(":", 1)[1].strip()
        return "cuda"
    try:
        for line in (proc / "cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return "cpu:" + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu:" + (platform.processor() or platform.machine())


def judged_options(options: Options) -> dict:
    """The options that change a judgement, as JSON."""
    data = options.to_json()
    for name in NOT_JUDGED:
        data.pop(name, None)
    return data


def job_key(problem: Problem, candidate_sha256: str, options: Options, hardware_name: str, verb: str) -> str:
    return cache.key("batch-job", problem.sha256, problem.constants, candidate_sha256, judged_options(options),
                     hardware_name, verb)
