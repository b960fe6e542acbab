"""The side-stream-while-timed attack (tests/candidates/gpu/side_stream_when_timed.py) judged on a GPU, every
finding printed in full (the GPU test's assertion message cuts them short).

    PYTHONPATH=src python benchmarks/side_stream_check.py [candidate.py ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kerneljudge import api
from kerneljudge.options import Options

ROOT = Path(__file__).resolve().parent.parent
SEED = "level2/51"  # at full size on a GPU, as in tests/test_gpu.py
#: the GPU test's timing: a fixed count of calls, no baselines
SHORT_TIMING = {"enabled": True, "baselines": False, "min_runs": 200, "max_runs": 200,
                "target_rel_sem": 0.0, "min_time_ms": 0.0, "budget_ms": 1e7}


def main(paths: list[str]) -> None:
    options = Options(device="cuda", store_path=None).replace(timing=SHORT_TIMING)
    for path in paths or [str(ROOT / "tests" / "candidates" / "gpu" / "side_stream_when_timed.py")]:
        result = api.evaluate(SEED, Path(path), options).to_json()
        print(f"{Path(path).name}: {result['verdict']}")
        for finding in result["findings"]:
            print(f"  {finding['severity']:5} {finding['code']} [{finding.get('stage')}]: {finding['message']}")
            if finding.get("details"):
                print(f"        details: {json.dumps(finding['details'])[:600]}")
        timing = result.get("timing") or {}
        print("  timing:", json.dumps({k: v for k, v in timing.items() if k != "baselines"})[:1500])


if __name__ == "__main__":
    main(sys.argv[1:])
