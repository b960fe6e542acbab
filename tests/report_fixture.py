"""A results store with hand-computed metrics, shared by the report tests.

Run "r1" (speedups against eager; compile is half of each):

| problem   | samples                                   |
| level1/1  | pass 2.0x (40% of light)                  |
| level1/2  | pass 1.0x (80% of light): a tie at p = 1  |
| level1/3  | fail wrong-output                         |
| level2/1  | pass 1e3x (90%), pass 1e-3x, error compile-error |
| level2/2  | pass, not timed                           |

Run "r2" is r1 changed: level1/3 passes (1.5x, a new pass), level1/1 fails (a regression), level1/2 is
timed faster with intervals apart, level2/1's one sample passes at 10x.
"""

from __future__ import annotations

import hashlib

from kerneljudge.records import Finding, Result
from kerneljudge.store import Store

NAMES = {"level1/1": "level1/1_Square_matrix_multiplication_", "level1/2": "level1/2_Standard_matrix_multiplication_",
         "level1/3": "level1/3_Batched_matrix_multiplication", "level2/1": "level2/1_Conv2D_ReLU_BiasAdd",
         "level2/2": "level2/2_ConvTranspose2d_BiasAdd_Clamp_Scaling_Clamp_Divide"}


def hand_result(key: str, verdict: str = "pass", speedup: float | None = None, *, light: float | None = None,
                codes: tuple[str, ...] = (), mean_ms: float = 1.0, sem_ms: float = 0.01, tag: str = "") -> tuple[Result, str]:
    """A Result as the pipeline would record it, and the candidate source it stands for."""
    source = f"# candidate for {key} {verdict} {speedup} {tag}\n"
    timing = None
    if speedup is not None:
        timing = {"candidate": {"median_ms": mean_ms, "mean_ms": mean_ms, "sem_ms": sem_ms},
                  "speedup": {"eager": speedup, "compile": speedup / 2},
                  "floor": {"floor_ms": 0.5, "percent_of_light": light}}
    findings = tuple(Finding.of(code, f"{code} happened", stage="check") for code in codes)
    result = Result(verdict=verdict, findings=findings, trials=(), problem={"name": NAMES[key]},
                    candidate={"path": f"/tmp/{key.replace('/', '_')}.py",
                               "sha256": hashlib.sha256(source.encode()).hexdigest()},
                    device={"type": "cuda", "name": "NVIDIA H200"}, versions={}, protocol="strict", timing=timing)
    return result, source


RUN_1 = [("level1/1", "pass", 2.0, {"light": 40.0}), ("level1/2", "pass", 1.0, {"light": 80.0}),
         ("level1/3", "fail", None, {"codes": ("wrong-output",)}),
         ("level2/1", "pass", 1e3, {"light": 90.0}), ("level2/1", "pass", 1e-3, {}),
         ("level2/1", "error", None, {"codes": ("compile-error",)}), ("level2/2", "pass", None, {})]
RUN_2 = [("level1/1", "fail", None, {"codes": ("wrong-output",)}),
         ("level1/2", "pass", 2.0, {"light": 90.0, "mean_ms": 0.5}),
         ("level1/3", "pass", 1.5, {}), ("level2/1", "pass", 10.0, {}), ("level2/2", "pass", None, {})]


def fill(store: Store, run_id: str, rows) -> list[int]:
    ids = []
    for key, verdict, speedup, extra in rows:
        result, source = hand_result(key, verdict, speedup, tag=f"{run_id}-{len(ids)}", **extra)
        ids.append(store.record(result, verb="evaluate", source=source, run_id=run_id))
    return ids


def fixture_store(path) -> Store:
    store = Store(path)
    fill(store, "r1", RUN_1)
    fill(store, "r2", RUN_2)
    return store
