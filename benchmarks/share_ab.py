"""The CUDA IPC crossing (proc/deviceshare) against host memory, one evaluation after the other, same process.

For each case: the verdict, how outputs crossed (`memory.outputs_cross`), wall time and per-stage times,
with `worker.device_share` on and off, alternating (on, off, on, off) so a drift of the machine shows.

    PYTHONPATH=src python benchmarks/share_ab.py [--kernelbench .kb/kernelbench] [--problems level2/1_,...]

Cases: the built-in level2/51 with its shipped CUDA solution (timing on, default budget), and each named
KernelBench problem's honest candidate (the reference renamed) in quick mode (no timing), at full size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_sweep import honest_candidate, problems  # noqa: E402

from kerneljudge import api, suite  # noqa: E402
from kerneljudge.options import Options  # noqa: E402


def run(problem, solution, options: Options, share: bool) -> dict:
    start = time.perf_counter()
    result = api.evaluate(problem, solution, options.replace(worker={"device_share": share}))
    wall_s = time.perf_counter() - start
    return {"share": share, "verdict": result.verdict, "outputs_cross": (result.memory or {}).get("outputs_cross"),
            "wall_s": round(wall_s, 2), "stage_s": {k: round(v / 1000, 2) for k, v in (result.stage_ms or {}).items()},
            "codes": sorted({f.code for f in result.findings if f.severity in ("fail", "error")})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kernelbench", type=Path, default=None)
    parser.add_argument("--problems", default="level2/1_")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    base = Options(device="cuda", store_path=None)
    cases = [("level2/51 @cuda (timed)", "level2/51", suite.shipped_solutions(suite.find_builtin("level2/51").name)["cuda"],
              base)]
    folder = Path(tempfile.mkdtemp(prefix="kj-share-"))
    if args.kernelbench:
        for path in problems([1, 2, 3], None, args.problems, args.kernelbench):
            cases.append((f"{path.parent.name}/{path.stem} (quick)", str(path), honest_candidate(path, folder),
                          base.replace(timing={"enabled": False})))
    rows = []
    for name, problem, solution, options in cases:
        for _ in range(args.rounds):
            for share in (True, False):
                row = {"case": name, **run(problem, solution, options, share)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    if args.save:
        args.save.write_text("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    main()
