"""The worker's sandbox (issue 13): the candidate can write nothing the judge trusts, nothing it starts
outlives its evaluation, it has no network, and its processes are bounded.

Every attack is a real evaluation of a candidate in tests/candidates/sandbox/ (correct output, plus one
attack at its first call, whose outcome it writes to a folder the test makes writable for it), judged
with the layers this machine allows; each has a control: the same candidate with the layer turned off
(the attack then goes through, or is caught by the fallback), or an honest evaluation. A test needing a
layer this machine refuses is skipped, saying so; the fallback's tests run everywhere.
"""

from __future__ import annotations

import errno
import functools
import json
import marshal
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from conftest import CANDIDATES, SEED, codes

from kerneljudge import builder, cache, judgeimports, report, sandbox, store
from kerneljudge.errors import UsageError
from kerneljudge.isolation import WorkerProcess
from kerneljudge.options import Options
from kerneljudge.proc.lifeline import with_parent
from kerneljudge.pipeline import evaluate
from kerneljudge.store import Store

ATTACKS = CANDIDATES / "sandbox" / "attacks.py"
GOOD = CANDIDATES / "isolation" / "good.py"
HERE = sandbox.detect()
SCANS = 100  # /proc scans (0.05 s apart) for a process to be gone: a fixed count, not a time assumption


def needs(*layers: str):
    missing = [name for name in layers if name not in HERE.active]
    return pytest.mark.skipif(bool(missing), reason=f"sandbox layer(s) {missing} not available here: "
                                                    f"{[HERE.inactive.get(m) for m in missing]}")


@pytest.fixture
def attack(fast, tmp_path, monkeypatch):
    """run(NAME, options, **worker): a real evaluation of attacks.py making attack NAME, with the layers
    here (less `sandbox_off`); returns the result and the lines the candidate wrote about its outcome."""
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setenv("KJ_TEST_OUT", str(out))

    def run(name: str, options=None, **worker):
        monkeypatch.setenv("KJ_TEST_ATTACK", name)
        result = evaluate(SEED, ATTACKS, (options or fast).replace(worker={"writable": (out,), **worker}))
        said = out / name
        return result, said.read_text().split() if said.exists() else []

    return run


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def with_token(token: str) -> list[int]:
    """Host processes whose command line carries `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if token.encode() in Path(f"/proc/{entry}/cmdline").read_bytes() and running(int(entry)):
                    found.append(int(entry))
            except OSError:
                pass
    return found


def gone(probe) -> list[int]:
    """What `probe()` still finds after at most SCANS scans."""
    left = probe()
    for _ in range(SCANS):
        if not left:
            break
        time.sleep(0.05)
        left = probe()
    return left


# --- the layers, in every result, the report and `kerneljudge doctor` --------------------------------------


def test_every_result_lists_the_layers_and_the_report_says_them(fast):
    result = evaluate(SEED, GOOD, fast)
    assert result.verdict == "pass"
    assert result.sandbox["active"] == list(HERE.active) and result.sandbox["inactive"] == HERE.inactive
    assert {"reaper", "watch", "bytecode"} <= set(result.sandbox["active"])  # never need a permission
    assert result.to_json()["sandbox"] == result.sandbox
    assert report.sandbox_line(result).startswith("sandbox: " + " ".join(HERE.active))


def test_a_layer_turned_off_is_listed_as_off_with_the_reason(fast):
    result = evaluate(SEED, GOOD, fast.replace(worker={"sandbox_off": ("net",)}))
    assert result.verdict == "pass"
    assert "net" not in result.sandbox["active"]
    assert result.sandbox["inactive"]["net"] == "turned off (sandbox_off)"
    assert "(off: " in report.sandbox_line(result) and "net" in report.sandbox_line(result)


def test_an_unknown_layer_is_a_usage_error(fast):
    with pytest.raises(UsageError, match="unknown layer bogus"):
        evaluate(SEED, GOOD, fast.replace(worker={"sandbox_off": ("bogus",)}))


@pytest.mark.parametrize("refused", ["pid", "net", "ipc", "mount"])
def test_a_namespace_the_system_refuses_is_named_alone(monkeypatch, refused):
    """Each namespace is unshared on its own, so a refusal names its layer and the probe drops that one alone
    (one call for all named the first, and a refused IPC namespace took the PID and network ones with it)."""
    from kerneljudge.sandbox import launch, linux

    flags = {"pid": linux.CLONE_NEWPID, "net": linux.CLONE_NEWNET, "ipc": linux.CLONE_NEWIPC,
             "mount": linux.CLONE_NEWNS}
    asked = []

    def unshare(flag: int) -> None:
        asked.append(flag)
        if flag & flags[refused]:
            raise OSError(errno.EPERM, "refused here")

    monkeypatch.setattr(linux, "unshare", unshare)
    layers = {"net", "ipc", "mount"} | ({"pid"} if refused == "pid" else set())
    with pytest.raises(launch.LayerFailed) as failed:
        launch._namespaces(layers)
    assert failed.value.layer == refused
    assert all(bin(flag).count("1") <= 2 for flag in asked)  # (pid comes with its own mount namespace)


def test_doctor_lists_the_layers_of_this_machine(kj):
    rc, stdout, _ = kj("doctor", "--json", env={"KERNELJUDGE_SANDBOX_OFF": "dev"})
    facts = json.loads(stdout)
    assert rc == 0 and "dev" not in facts["active"] and facts["inactive"]["dev"] == "turned off (sandbox_off)"
    assert set(facts["active"]) | set(facts["inactive"]) == set(sandbox.LAYERS + sandbox.JUDGE_SIDE)
    rc, stdout, _ = kj("doctor")
    assert rc == 0 and all(name in stdout for name in sandbox.LAYERS)


# --- 1/3. the judge's package: no planted bytecode, nothing imported after a worker started ---------------


def _plant_paths() -> tuple[Path, Path]:
    package = sandbox.package_dir()
    return package / "__pycache__" / "zz_kj_planted.cpython-311.pyc", package / "zz_kj_planted.txt"


@needs("mount")
def test_the_package_is_read_only_for_the_worker(attack):
    result, said = attack("plant")
    assert said == ["blocked", "30"] * 2  # EROFS: the view is read-only
    assert result.verdict == "pass" and "sandbox-breach" not in codes(result)
    assert not any(p.exists() for p in _plant_paths())


@needs("mount", "user")
@pytest.mark.parametrize("fork_server, off", [(True, ()), (False, ()), (True, ("user",))])
def test_the_worker_holds_no_capability_and_cannot_remount_the_package_writable(attack, fast, fork_server, off):
    """Started by the fork server (no new program: the launcher runs the worker in its own process), the worker
    kept every capability its new user namespace gave it, remounted the package's mount writable and planted a
    file there (a review's trial, twenty-fifth session): the launcher now drops them all, as a new program
    without a bounding set started with none; without the user namespace too (a judge run as root kept root's)."""
    if off and os.geteuid() != 0:
        pytest.skip("without a user namespace, only root can make the read-only view")
    options = fast.replace(worker={"fork_server": fork_server, "sandbox_off": off})
    planted = sandbox.package_dir() / "zz_kj_remounted.txt"
    try:
        result, said = attack("remount", options)
        assert said == ["capeff", "0000000000000000", "remount", "1", "blocked", "30"], said  # EPERM, then EROFS
        assert not planted.exists()
    finally:
        planted.unlink(missing_ok=True)  # (where it got through: the suite's other evaluations watch this package)
    assert result.verdict == "pass" and "sandbox-breach" not in codes(result), \
        [(f.code, f.message) for f in result.findings]


@needs("mount", "user")
@pytest.mark.parametrize("off", [(), ("user",)])
def test_a_worker_with_roots_user_id_cannot_write_the_kernels_settings(attack, fast, off):
    """A judge run as root gives its worker root's user id (in the user namespace, mapped to itself; or without
    it): with no capability left, /proc/sys was still writable by its files' owner (a review's trial, twenty-fifth
    session: core_pattern's handler runs as root on the host). The worker's mount namespace has it read-only."""
    if os.geteuid() != 0:
        pytest.skip("a worker with root's user id needs a judge run as root")
    result, said = attack("sysctl", fast.replace(worker={"sandbox_off": off}))
    assert said == ["blocked", "30"], said  # EROFS
    assert result.verdict == "pass", [(f.code, f.message) for f in result.findings]


@pytest.mark.parametrize("name", ["tail", "fifo"])
def test_the_workers_output_is_read_through_the_judges_own_descriptor(attack, fast, tmp_path, monkeypatch, name):
    """The worker's output log lies in its own folder: a candidate swapped it for a link to a file hidden from it
    (the judge read the file into the result's output tail: the results store, a red-team trial of the twenty-fifth
    session) or for a FIFO (the judge's read waited for ever). The judge reads the log it made, through its own
    descriptor: the crash is an error with the worker's real output, nothing of the hidden file."""
    secret = tmp_path / "secret.txt"
    secret.write_text("kj-secret-bytes")
    monkeypatch.setenv("KJ_TEST_SECRET", str(secret))
    result, _ = attack(name, fast.replace(worker={"hidden": (str(secret),)}))
    assert result.verdict == "error", [(f.code, f.message) for f in result.findings]
    text = json.dumps(result.to_json())
    assert "kj-secret-bytes" not in text


@pytest.mark.parametrize("layers_off", [(), ("pid",)])
def test_a_worker_cannot_pass_its_exit_for_the_sandboxs_setup_failure(attack, fast, layers_off):
    """The launcher exits with its own code (121) when a layer cannot be set up, which the judge reports as its own
    error, not the candidate's. A candidate exited with that code, or wrote digits into the pipe where init (or,
    without `pid`, the launcher) reads the worker's status, through /proc: its exit became a judge error, which
    RL loops drop rather than penalise. Now the code counts as a setup failure only before the worker first
    answered, and neither init nor the launcher can be reached through /proc."""
    options = fast.replace(worker={"sandbox_off": tuple(sorted({*fast.worker.sandbox_off, *layers_off}))})
    result, said = attack("status", options)
    assert said == ["wrote", "0"], said
    exits = [f for f in result.findings if f.code == "candidate-exit"]
    assert exits and exits[0].details.get("exit_code") == 3, [(f.code, f.message) for f in result.findings]
    result, _ = attack("setup", options)
    assert "judge-error" not in codes(result) and "candidate-exit" in codes(result), codes(result)


def test_without_the_read_only_view_planted_files_fail_the_candidate_and_bytecode_is_removed(tmp_path):
    """The judge runs in a process of its own from a copy of the package, so the planted files land in the
    copy: the suite's other evaluations (another test process among pytest-xdist's) watch the package
    itself, and must not see them."""
    package = tmp_path / "src" / "kerneljudge"
    shutil.copytree(sandbox.package_dir(), package, ignore=shutil.ignore_patterns("__pycache__"))
    out = tmp_path / "out"
    out.mkdir()
    script = f"""
import json
from kerneljudge import sandbox
from kerneljudge.options import Options
from kerneljudge.pipeline import evaluate
options = Options(device="cpu", store_path=None, cache_dir=r"{tmp_path / 'cache'}").replace(
    timing={{"enabled": False}}, worker={{"writable": (r"{out}",), "sandbox_off": ("mount",)}})
result = evaluate("{SEED}", r"{ATTACKS}", options)
print(json.dumps({{"package": str(sandbox.package_dir()), "result": result.to_json()}}))
"""
    env = {**os.environ, "PYTHONPATH": str(package.parent), "KJ_TEST_OUT": str(out), "KJ_TEST_ATTACK": "plant"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    judged = json.loads(done.stdout.splitlines()[-1])
    result = judged["result"]
    pyc, text = package / "__pycache__" / "zz_kj_planted.cpython-311.pyc", package / "zz_kj_planted.txt"
    assert judged["package"] == str(package.resolve())  # the copy was judged from, and planted into
    assert (out / "plant").read_text().split() == ["written", "written"]  # the control: the attack itself works
    assert result["verdict"] == "fail" and "sandbox-breach" in codes(result)
    breach = next(f for f in result["findings"] if f["code"] == "sandbox-breach")
    assert str(pyc.resolve()) in breach["details"]["files"] and str(text.resolve()) in breach["details"]["files"]
    assert not pyc.exists() and text.exists()  # planted bytecode is removed before the judge could load it
    assert not any(p.exists() for p in _plant_paths())  # nothing reached the package the suite runs from


TOUCHING_PROBLEM = """
import os
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    try:  # the referee's draw reaches the package; the worker's, read-only, does not
        with open(os.environ["KJ_TEST_TOUCH"], "a") as touched:
            touched.write("x")
    except OSError:
        pass
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""


@needs("mount")
def test_a_package_changed_by_another_process_while_read_only_to_the_worker_is_said_not_failed(tmp_path):
    """The judge's package changed during a run by a process other than the worker (here the referee, running
    the problem's `get_inputs`; an update of the judge in real life), while the worker saw it read-only: the
    honest candidate passes, the change is said (`package-changed`), no `sandbox-breach`. Run from a copy of
    the package, as above."""
    package = tmp_path / "src" / "kerneljudge"
    shutil.copytree(sandbox.package_dir(), package, ignore=shutil.ignore_patterns("__pycache__"))
    problem, honest = tmp_path / "problem.py", tmp_path / "honest.py"
    problem.write_text(TOUCHING_PROBLEM)
    honest.write_text(TOUCHING_PROBLEM.replace("class Model(", "class ModelNew("))
    touched = package / "zz_touched_outside.txt"
    script = f"""
import json
from kerneljudge.options import Options
from kerneljudge.pipeline import evaluate
options = Options(device="cpu", store_path=None, cache_dir=r"{tmp_path / 'cache'}").replace(timing={{"enabled": False}})
print(json.dumps(evaluate(r"{problem}", r"{honest}", options).to_json()))
"""
    env = {**os.environ, "PYTHONPATH": str(package.parent), "KJ_TEST_TOUCH": str(touched)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    assert touched.exists()  # the control: the package did change during the run
    assert result["verdict"] == "pass" and "sandbox-breach" not in codes(result), result["findings"]
    changed = next(f for f in result["findings"] if f["code"] == "package-changed")
    assert str(touched.resolve()) in changed["details"]["files"]


def test_bytecode_another_python_wrote_is_no_breach_and_planted_bytecode_is(tmp_path):
    """A copy of the package imported by another Python process (an MCP server's imports first, as when
    `kerneljudge mcp` starts beside an evaluation on a fresh install) writes its bytecode while a watch is
    on: none of it is a change the worker made, though marshal's bytes for one module came out other than
    this process's compile gives; all of it is removed all the same (Python writes it again). Bytecode with a
    right header and other code is planted: a change, removed."""
    package = tmp_path / "src" / "kerneljudge"
    shutil.copytree(sandbox.package_dir(), package, ignore=shutil.ignore_patterns("__pycache__"))
    watch = sandbox.Watch([package])
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", "import mcp, pydantic; from kerneljudge import mcp_server, report"],
                   env={**env, "PYTHONPATH": str(package.parent)}, check=True, capture_output=True, timeout=120)
    written = list(package.rglob("*.pyc"))
    assert len(written) > 20
    honest = next(package.glob("__pycache__/options.*.pyc"))
    header = honest.read_bytes()[:16]  # the source's time and size, as Python wrote them
    assert watch.changes() == [] and not any(p.exists() for p in written)
    watch = sandbox.Watch([package])
    honest.write_bytes(header + marshal.dumps(compile("print('planted')", str(package / "options.py"), "exec")))
    assert watch.changes() == [str(honest)] and not honest.exists()


def test_the_judge_imports_none_of_its_modules_after_the_first_worker_started(tmp_path):
    """A whole evaluation, recorded in a store and reported, in a fresh judge process; then one more import
    as the control that the check sees a late import."""
    script = f"""
import io, json, sys
from rich.console import Console
from kerneljudge import judgeimports, report
from kerneljudge.options import Options
from kerneljudge.pipeline import evaluate
from kerneljudge.store import Store
from pathlib import Path
options = Options(device="cpu", store_path=Path(r"{tmp_path / 'results.sqlite'}"), cache_dir=Path(r"{tmp_path / 'cache'}"))
result = evaluate("{SEED}", r"{GOOD}", options.replace(timing={{"enabled": False}}))
report.render(result, Console(file=io.StringIO()))
json.dumps(result.to_json())
late = sorted(judgeimports.judge_modules() - judgeimports.loaded_before_first_worker)
import kerneljudge.cli_doctor
control = sorted(judgeimports.judge_modules() - judgeimports.loaded_before_first_worker)
print(json.dumps({{"verdict": result.verdict, "late": late, "control": control}}))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(judgeimports.__file__).parents[1]),
                                                         os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts["verdict"] == "pass"
    assert facts["late"] == []
    assert facts["control"] == ["kerneljudge.cli_doctor"]


# --- 4. trusted state: the store and the caches ------------------------------------------------------------


def _store_attack(attack, fast, tmp_path, monkeypatch, **worker):
    store, cache_dir = tmp_path / "results.sqlite", tmp_path / "cache"
    store.write_bytes(b"")  # exists before the worker starts, as a store that recorded earlier runs
    monkeypatch.setenv("KJ_TEST_STORE", str(store))
    monkeypatch.setenv("KJ_TEST_CACHE", str(cache_dir))
    return attack("store", fast.replace(store_path=store, cache_dir=cache_dir), **worker)


@needs("mount")
def test_the_store_and_the_caches_are_read_only_for_the_worker(attack, fast, tmp_path, monkeypatch):
    result, said = _store_attack(attack, fast, tmp_path, monkeypatch)
    # the store is hidden (a device node on a nodev mount stands in: EACCES), the cache read-only (EROFS)
    assert said == ["blocked", str(errno.EACCES), "blocked", str(errno.EROFS)]
    assert result.verdict == "pass" and "sandbox-breach" not in codes(result)
    assert not (tmp_path / "cache" / "bandwidth" / "planted.json").exists()


def test_without_the_read_only_view_a_changed_store_is_said(attack, fast, tmp_path, monkeypatch):
    """The fallback can only tell: the store changed while the worker ran (another evaluation recording
    into it looks the same, so it is a warning); the cached figure the candidate planted is range-checked
    before any use (test_a_cached_bandwidth_out_of_range_is_measured_again)."""
    result, said = _store_attack(attack, fast, tmp_path, monkeypatch, sandbox_off=("mount",))
    assert said == ["written", "written"]  # the control: the attack itself works
    changed = next(f for f in result.findings if f.code == "store-changed")
    assert changed.severity == "warn" and str(tmp_path / "results.sqlite") in changed.details["files"]


SHORT_TIMING = {"enabled": True, "baselines": False, "budget_ms": 50.0, "min_runs": 5, "min_time_ms": 5.0,
                "warmup_ms": 5.0}


def test_a_cached_bandwidth_out_of_range_is_measured_again(fast, tmp_path):
    """The honest run measures and caches the bandwidth; a planted 1e-6 GB/s (every real time would be
    `impossible-speed`) is measured again, never used, and replaced in the cache."""
    options = fast.replace(cache_dir=tmp_path, timing=SHORT_TIMING)
    first = evaluate(SEED, GOOD, options)
    assert first.timing["floor"]["bandwidth"] == "measured"
    [entry] = (tmp_path / "bandwidth").glob("*.json")
    entry.write_text(json.dumps({"gbps": 1e-6}))
    second = evaluate(SEED, GOOD, options)
    assert second.verdict == "pass", [f.message for f in second.findings if f.severity in ("fail", "error")]
    assert second.timing["floor"]["bandwidth"] == "remeasured" and "impossible-speed" not in codes(second)
    assert second.timing["floor"]["bandwidth_gbps"] > 1e-3
    assert json.loads(entry.read_text())["gbps"] != 1e-6


class FixedReferee:
    """A referee whose copy bandwidth is 10 GB/s by the short measurement and 12 GB/s by the full one."""

    def __init__(self):
        self.asked: list[bool] = []

    def call(self, request):
        self.asked.append(request.quick)
        return {"gbps": 10.0 if request.quick else 12.0}


@pytest.mark.parametrize("cached, used, source", [(None, 12.0, "measured"), (15.0, 15.0, "cached"),
                                                  (6.0, 6.0, "cached"), (25.0, 12.0, "remeasured"),
                                                  (4.0, 12.0, "remeasured"), (1e9, 12.0, "remeasured")])
def test_a_cached_bandwidth_is_used_only_near_this_runs_short_measurement(fast, tmp_path, cached, used, source):
    """Within BANDWIDTH_CACHE_FACTOR (2) of the short measurement (10 GB/s) the cached figure is used;
    beyond it the full measurement (12 GB/s) replaces it. (The decision, with a stand-in referee.)"""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import Judging

    if cached is not None:
        cache.save(tmp_path, "bandwidth", "dev", {"gbps": cached})
    referee = FixedReferee()
    gbps, said = measure._bandwidth(Judging(fast.replace(cache_dir=tmp_path), None, referee, "cpu"), "dev")
    assert (gbps, said) == (used, source)
    assert referee.asked == ([True] if source == "cached" else [True, False])
    assert cache.load(tmp_path, "bandwidth", "dev")["gbps"] == used


def test_a_batch_keeps_the_bandwidth_its_baselines_stage_settled_and_no_timings(fast, tmp_path):
    """In a batch (a DeviceMemo), the device's copy bandwidth is the one its first baselines stage settled, before
    that candidate was loaded (`run_baselines`: tests/test_mutation_kills.py -k kept_baselines): a later candidate's
    timing keeps it without asking the referee. A figure settled in a timing, with its candidate loaded (one slowed
    on purpose lowers it, and raises every later candidate's floor), serves that candidate alone."""
    from kerneljudge.stages import measure
    from kerneljudge.stages.context import DeviceMemo, Judging

    memo, referees = DeviceMemo(), [FixedReferee() for _ in range(2)]
    judged = [Judging(fast.replace(cache_dir=tmp_path), None, referee, "cpu", memo=memo) for referee in referees]
    assert measure._bandwidth(judged[0], "dev") == (12.0, "measured") and memo.bandwidth_gbps == {}
    memo.bandwidth_gbps["dev"] = 20.0  # as the device's first baselines stage settled it
    assert measure._bandwidth(judged[1], "dev") == (20.0, "kept")
    assert [referee.asked for referee in referees] == [[True, False], []]


# (a planted torch.compile time far from this run's eager time: tests/test_mutation_kills.py)


# --- 2. nothing outlives the evaluation ---------------------------------------------------------------------


@needs("pid")
def test_nothing_the_candidate_started_outlives_its_evaluation(attack, monkeypatch):
    token = f"kj-escape-{secrets.token_hex(6)}"
    monkeypatch.setenv("KJ_TEST_TOKEN", token)
    result, pids = attack("escape")
    assert result.verdict == "pass"
    assert len(pids) == 2  # both sleepers ran (the escape happened)
    assert gone(lambda: with_token(token)) == [], "a process the candidate started outlived the evaluation"


def test_without_pid_namespace_and_cgroups_the_reaper_kills_every_descendant(attack, monkeypatch):
    """The fallback: host pids in the pid file; the launcher, a child subreaper, kills the setsid'd
    grandchild and the child that ignores SIGTERM when the worker ends (each cgroup, pids or memory, would
    find them too: both off)."""
    token = f"kj-escape-{secrets.token_hex(6)}"
    monkeypatch.setenv("KJ_TEST_TOKEN", token)
    result, said = attack("escape", sandbox_off=("pid", "cgroup", "memory"))
    assert result.verdict == "pass"
    assert result.sandbox["inactive"]["pid"] == "turned off (sandbox_off)"
    pids = [int(p) for p in said]
    assert len(pids) == 2 and all(p > 1 for p in pids)
    assert gone(lambda: [p for p in pids if running(p)]) == []
    assert gone(lambda: with_token(token)) == []


# --- no network ------------------------------------------------------------------------------------------


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(30)
    return server


def test_a_worker_finds_nothing_an_earlier_worker_left_in_tritons_cache(attack):
    """Each worker has Triton's cache to itself (twenty-sixth session's red team: a worker planted a compiled
    module under the key of Triton's CUDA driver helper, which a later worker's Triton loaded)."""
    for _ in range(2):
        result, said = attack("triton")
        assert result.verdict == "pass" and said == ["fresh", "written"], said


def _segment_left(key: int) -> bool:
    """Whether a System V shared memory segment at `key` is visible here (and, if so, removed)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    found = libc.shmget(key, 0, 0)
    if found >= 0:
        libc.shmctl(found, 0, None)  # IPC_RMID
    return found >= 0


@pytest.mark.parametrize("layer_on", [True, False], ids=["ipc", "without-ipc"])
def test_a_shared_memory_segment_the_worker_leaves_is_gone_with_its_ipc_namespace(attack, monkeypatch, layer_on):
    """A segment made by the worker outlives the process; without the `ipc` layer a later worker (another
    candidate's) would find it at the same key, past every file and mount rule."""
    if layer_on and "ipc" not in HERE.active:
        pytest.skip(f"no ipc layer here: {HERE.inactive.get('ipc')}")
    key = 0x4B4A0000 + secrets.randbelow(0xFFFF)
    monkeypatch.setenv("KJ_TEST_SHM_KEY", str(key))
    result, said = attack("sysv", **({} if layer_on else {"sandbox_off": ("ipc",)}))
    assert result.verdict == "pass" and said[0] == "made", (said, [(f.code, f.message) for f in result.findings])
    assert _segment_left(key) is not layer_on
    assert ("ipc" in result.sandbox["active"]) is layer_on


@needs("net")
def test_the_worker_has_no_network(attack, monkeypatch):
    with _listener() as server:
        monkeypatch.setenv("KJ_TEST_PORT", str(server.getsockname()[1]))
        result, said = attack("network")
    assert result.verdict == "pass"
    assert said == ["blocked", "101"]  # ENETUNREACH: no interface is up


def test_without_the_network_layer_the_same_connection_goes_through(attack, monkeypatch):
    with _listener() as server:
        monkeypatch.setenv("KJ_TEST_PORT", str(server.getsockname()[1]))
        result, said = attack("network", sandbox_off=("net",))
        conn, _ = server.accept()
        with conn:
            assert conn.recv(64) == b"kj-exfiltrated"
    assert said == ["connected"] and result.verdict == "pass"


def _peek(attack, fast, tmp_path, monkeypatch, **worker):
    """The peek attack against a results store holding a record and a judge server's socket (listening)."""
    store, socket_path = tmp_path / "results.sqlite", tmp_path / "server" / "judge.sock"
    Store(store)  # a store as an earlier run left it
    socket_path.parent.mkdir()
    monkeypatch.setenv("KJ_TEST_STORE", str(store))
    monkeypatch.setenv("KERNELJUDGE_SOCKET", str(socket_path))  # where the judge, and so the worker, looks
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(socket_path))
        server.listen(1)
        server.settimeout(30)
        result, said = attack("peek", fast.replace(store_path=store), **worker)
        return result, said, server.accept()[0] if said[-1:] == ["connected"] else None


@needs("mount")
def test_the_worker_sees_neither_the_store_nor_the_judge_servers_socket(attack, fast, tmp_path, monkeypatch):
    """In the worker's view the store (other candidates' sources) and the server's socket (where it could ask
    for evaluations under the user's name) are covered by /dev/null on a nodev mount: nothing to open,
    nothing to connect to."""
    result, said, _ = _peek(attack, fast, tmp_path, monkeypatch)
    assert said == ["blocked", str(errno.EACCES), "blocked", str(errno.ECONNREFUSED)]
    assert result.verdict == "pass", codes(result)


@needs("mount")
def test_the_users_default_store_is_hidden_from_a_run_that_records_elsewhere(attack, fast, tmp_path, monkeypatch):
    """A run with no store (`--no-store`), or with another one, still hides the store the user's runs write by
    default: its records hold other candidates' sources (QA 24 read them from the worker of a `--no-store` run)."""
    monkeypatch.delenv("KERNELJUDGE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    default = tmp_path / "data" / "kerneljudge" / "results.sqlite"
    default.parent.mkdir(parents=True)
    Store(default)
    monkeypatch.setenv("KJ_TEST_STORE", str(default))
    monkeypatch.setenv("KERNELJUDGE_SOCKET", str(tmp_path / "no-server.sock"))
    result, said = attack("peek", fast.replace(store_path=None))
    assert said[:2] == ["blocked", str(errno.ENOENT)], said  # (its folder covered by an empty one)
    assert result.verdict == "pass", codes(result)


@needs("mount")
def test_a_journal_written_after_the_worker_started_is_hidden_too(attack, fast, tmp_path, monkeypatch):
    """Another evaluation records into the run's store while the worker runs. SQLite made the store's WAL file
    anew at that evaluation's open (the last connection's close had deleted it), a path the worker's view could
    not cover when it started, and a red team read other candidates' sources there. The judge holds the store
    open while its worker lives: the WAL file is the one covered at the start, and stays it."""
    path, secret = tmp_path / "results.sqlite", secrets.token_hex(16)
    Store(path)  # as an earlier run left it: no WAL file
    assert not store.journal_paths(path)[0].exists()
    monkeypatch.setenv("KJ_TEST_STORE", str(path))
    monkeypatch.setenv("KJ_TEST_SECRET", secret)
    out = tmp_path / "out"

    def other_evaluation(kept: list) -> None:
        for _ in range(1200):
            if (out / "journal-waiting").exists():
                break
            time.sleep(0.05)
        connection = sqlite3.connect(path, check_same_thread=False)  # open until the worker has looked
        kept.append(connection)
        with connection:
            connection.execute("CREATE TABLE IF NOT EXISTS other (source TEXT)")
            connection.execute("INSERT INTO other VALUES (?)", (secret,))
        (out / "journal-written").touch()

    kept: list = []
    writer = threading.Thread(target=other_evaluation, args=(kept,))
    writer.start()
    try:
        result, said = attack("journal", fast.replace(store_path=path))
    finally:
        writer.join()
        for connection in kept:
            connection.close()
    assert said == ["blocked", str(errno.EACCES)], said
    assert result.verdict == "pass", codes(result)
    with sqlite3.connect(path) as check:  # (the other evaluation's write happened while the worker ran)
        assert check.execute("SELECT source FROM other").fetchall() == [(secret,)]


def test_the_default_stores_folder_is_hidden_and_no_home_directory_is_no_default_store(tmp_path, monkeypatch):
    """The worker's hidden paths hold the default store's folder (a journal made there after the worker started is
    covered too); where there is no home directory (no $HOME, a user without a passwd entry) there is no default
    store to hide, and the worker's options are still made."""
    monkeypatch.delenv("KERNELJUDGE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    hidden = Options(store_path=None, cache_dir=tmp_path / "cache").worker_options().hidden
    assert tmp_path / "data" / "kerneljudge" in hidden, hidden
    monkeypatch.delenv("XDG_DATA_HOME")

    def no_home():
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    hidden = Options(store_path=None, cache_dir=tmp_path / "cache").worker_options().hidden
    assert not any("kerneljudge" in str(path) and "results" in str(path) for path in hidden), hidden


def test_without_the_read_only_view_the_store_and_the_socket_are_reached(attack, fast, tmp_path, monkeypatch):
    """The control: the same attack with the mount layer off reads the store and reaches the server."""
    result, said, conn = _peek(attack, fast, tmp_path, monkeypatch, sandbox_off=("mount",))
    assert said[0] == "read" and int(said[1]) > 0 and said[2] == "connected", said
    with conn:
        assert conn.recv(64) == b"kj-request"


# --- resource limits ---------------------------------------------------------------------------------------


BOUNDED = "cgroup" in HERE.active or ("rlimits" in HERE.active and os.getuid() != 0)


@pytest.mark.skipif(not BOUNDED, reason="no pids cgroup here, and RLIMIT_NPROC does not bind root")
def test_a_fork_bomb_is_bounded_and_its_processes_die(attack):
    """The cap stops the bomb far from the 2000 forks it tries; the evaluation ends (the worker, left without
    a task to spare, may fail its next step, but is never left to the timeout); nothing of it remains."""
    ours = f"kerneljudge-{os.getpid()}-*"  # this test process's cgroups (a spare of another test may hold one)
    before = set(sandbox.Cgroup._base("pids").glob(ours)) if "cgroup" in HERE.active else set()
    result, said = attack("bomb", max_processes=48)
    forks = int(said[0])
    assert 0 < forks < 48
    assert "timeout" not in codes(result)
    if "cgroup" in result.sandbox["active"]:
        assert not set(sandbox.Cgroup._base("pids").glob(ours)) - before, "the cgroup outlived it"


@needs("cgroup", "memory")
def test_without_the_read_only_view_no_cgroup_is_claimed():
    """The cgroups' files belong to the worker's user: without `mount` the worker could lift its own limits,
    so neither cgroup layer is said to be active then."""
    layers = sandbox.detect(("mount",))
    assert "cgroup" not in layers.active and "memory" not in layers.active
    assert "mount" in layers.inactive["cgroup"] and "mount" in layers.inactive["memory"]


@needs("memory")
def test_the_memory_cgroup_kills_a_process_over_its_limit_and_counts_it():
    """The mechanism alone: a process that joins a 256 MiB memory cgroup (as the launcher does) and writes
    512 MiB is killed by the kernel, and the cgroup counts it."""
    group = sandbox.Cgroup.create(None, 256 << 20)
    assert group is not None and group.memory is not None and group.pids is None
    try:
        hog = ("import os, sys; open(os.path.join(sys.argv[1], 'cgroup.procs'), 'w').write(str(os.getpid())); "
               "block = bytearray(b'x') * (512 << 20); print('held')")
        done = subprocess.run([sys.executable, "-c", hog, str(group.memory)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == -9 and "held" not in done.stdout, (done.returncode, done.stderr[-300:])
        assert group.oom_kills() >= 1
    finally:
        group.remove()
    assert not group.memory.exists()


@needs("memory")
def test_children_over_the_memory_limit_together_are_killed_and_said(attack):
    """Each child writes 600 MiB, under the 1500 MiB address-space limit every process has on a CPU run, but
    three of them and the worker together are over the same limit for the worker's processes together:
    the kernel kills some, the evaluation goes on, and the result says so."""
    result, said = attack("hog", memory_limit_mb=1500)
    assert "memory" in result.sandbox["active"]
    assert int(said[0]) < 3  # never all three held their memory at once
    kills = [f for f in result.findings if f.code == "memory-limit"]
    assert kills and kills[0].details["kills"] >= 1 and "1500 MiB" in kills[0].message, codes(result)
    assert result.verdict == "pass"  # the worker itself went on: its outputs are still right
    unbounded, said = attack("hog", memory_limit_mb=1500, sandbox_off=("memory",))  # the control
    assert said == ["3"] and "memory-limit" not in codes(unbounded)


@needs("memory")
def test_a_worker_killed_at_its_memory_limit_is_out_of_memory(attack):
    """Memory written into a memory file is not address space (the per-process limit lets it through) but is
    the cgroup's: the kernel kills the worker, and the result names it (the launcher passes the worker's
    SIGKILL on as its own)."""
    result, said = attack("swell", memory_limit_mb=1500)
    assert said == []  # it never got through
    assert result.verdict == "error" and "out-of-memory" in codes(result), [(f.code, f.message) for f in result.findings]
    assert "1500 MiB" in next(f.message for f in result.findings if f.code == "out-of-memory")


def test_a_worker_s_extension_lands_in_the_build_cache_it_cannot_write(fast, cpp_built):
    """The honest side of the read-only view: a C++ extension a sandboxed worker asks for (`kerneljudge
    build`, into a fresh cache) is built by the judge's builder into the cache (extensions.py), and an
    evaluation's worker loads it from there."""
    cache, done, _ = cpp_built
    assert "cpp_ext.py: built in" in done.stdout, done.stdout + done.stderr
    assert any((cache / "builds").rglob("*.so"))
    result = evaluate(SEED, CANDIDATES / "isolation" / "cpp_ext.py", fast.replace(cache_dir=cache))
    assert result.verdict == "pass", [f.message for f in result.findings]
    assert "mount" not in HERE.active or "mount" in result.sandbox["active"]


@needs("mount")
def test_a_worker_sees_no_other_workers_folder(attack):
    """Every worker's folder is under one parent, hidden from workers (and from the judge's builders), its own
    bound back inside: another lane's output, its Triton kernels, a socket there are out of its sight."""
    from kerneljudge.isolation import workers_folder

    other = Path(tempfile.mkdtemp(prefix="kj-worker-", dir=workers_folder()))
    try:
        (other / "output.log").write_text("another candidate's output")
        result, said = attack("siblings")
    finally:
        shutil.rmtree(other)
    assert result.verdict == "pass", codes(result)
    own, *seen = said
    assert own.startswith("kj-worker-") and seen == [own]


@pytest.mark.parametrize("layer_on", [True, False], ids=["mount", "without-mount"])
def test_neither_a_worker_nor_its_compilers_flags_write_the_build_cache(attack, fast, tmp_path, monkeypatch,
                                                                        layer_on):
    """A worker that could write the build cache could leave a module under the key of a source another
    candidate builds (twenty-sixth session's red team). The cache is read-only to the worker, and its
    extension is built by the judge's builder with only a staging folder writable: a `-wrapper` among its
    flags runs a shell at every compiler step, and its write lands nowhere. The build itself goes on."""
    if layer_on and "mount" not in HERE.active:
        pytest.skip(f"no mount layer here: {HERE.inactive.get('mount')}")
    cache = tmp_path / "cache"
    (cache / "builds").mkdir(parents=True)  # as a cache used before has it
    monkeypatch.setenv("KJ_TEST_CACHE", str(cache))
    result, said = attack("builds", fast.replace(cache_dir=cache), **({} if layer_on else {"sandbox_off": ("mount",)}))
    # built at the first call, after the build stage (so not in result.build), into the cache; the probes then
    # see that its one function never ran in the forward (a decoy: the verdict is a fail, never a build error)
    assert result.verdict == "fail" and not {"compile-error", "import-error"} & set(codes(result)), codes(result)
    assert len(list((cache / "builds").glob("*/kj_sandbox_wrapped/kj_sandbox_wrapped*.so"))) == 1
    planted = {path.name for path in (cache / "builds").iterdir() if path.name.startswith("kj_planted")}
    if layer_on:
        assert said == ["blocked", "30", "built", "1"]  # EROFS
        assert planted == set()
    else:
        assert said == ["written", "built", "1"]
        assert planted == {"kj_planted_by_the_worker", "kj_planted_by_the_compiler"}


# --- the judge's own mount namespace is never touched --------------------------------------------------


@needs("pid")
@pytest.mark.parametrize("off", [("mount", "dev"), ("dev",), ()], ids=["pid-alone", "pid-and-mount", "every-layer"])
def test_the_judges_mounts_are_the_same_after_a_worker_in_any_layers(fast, off):
    """A worker's /proc (pid), /dev (dev) and read-only view (mount) live in a mount namespace of its own:
    the judge's mount table is the same after the evaluation, with `pid` on and `mount` off too (a fresh
    /proc once landed on the judge's own, and every later process found no /proc/self)."""
    before = Path("/proc/self/mountinfo").read_text()
    result = evaluate(SEED, GOOD, fast.replace(worker={"sandbox_off": off}))
    assert result.verdict == "pass" and "pid" in result.sandbox["active"]
    assert Path("/proc/self/mountinfo").read_text() == before
    assert Path("/proc/self/statm").exists()


def test_the_launcher_starts_the_worker_at_its_niceness_whatever_the_layers(tmp_path):
    """Builders run at a lower priority (BUILD_NICENESS) so that a lane timing beside them keeps its cores: the
    launcher sets the priority before the command starts, with no sandbox layer at all, and the command's
    children inherit it; niceness 0 leaves the judge's own."""
    report = ("import os, subprocess, sys; child = subprocess.run([sys.executable, '-S', '-c', "
              "'import os; print(os.nice(0))'], capture_output=True, text=True).stdout.strip(); "
              "print(os.nice(0), child)")

    def started_at(niceness: int) -> list[int]:
        command = with_parent(sandbox.launch_command([sys.executable, "-S", "-c", report], layers=(),
                                                     writable=[tmp_path], limits={}, niceness=niceness), os.getpid())
        done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                              env=sandbox.launcher_env(dict(os.environ)), cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-500:]
        return [int(n) for n in done.stdout.split()]

    own = os.nice(0)
    assert started_at(7) == [own + 7] * 2
    assert started_at(0) == [own, own]


def test_builders_ask_for_the_build_niceness(fast):
    """`build_one` (the batch's and Ray's builders) starts its worker at BUILD_NICENESS; an evaluation's own
    worker keeps the default (0)."""
    asked = []

    def spawn(options):
        asked.append(options.niceness)
        return WorkerProcess(options)

    outcome = builder.build_one(CANDIDATES / "core" / "correct.py", fast, "cpu",
                                spawn=spawn)
    assert outcome.ok and asked == [builder.BUILD_NICENESS] and builder.BUILD_NICENESS > 0  # below the lanes'
    assert fast.worker_options().niceness == 0


# --- the worker stopped while the reference is timed ------------------------------------------------------


def _state_and_cpu(pid: int) -> tuple[str, int] | None:
    """(state, user + system CPU ticks) of a live process, from /proc."""
    fields = sandbox._stat(pid)
    return (fields[0], int(fields[11]) + int(fields[12])) if fields else None


def test_freeze_stops_every_process_of_a_forking_tree_until_thaw():
    """`sandbox.freeze` against processes that spin and fork while they are being stopped: once it returns,
    every process listed is stopped and gets no CPU time, and none appears; `thaw` lets them run again."""
    spinner = ("import os, sys, time\n"
               "for _ in range(40):\n"
               "    if os.fork() == 0:\n"
               "        while True: pass\n"
               "    time.sleep(0.01)\n"
               "while True: pass\n")
    root = subprocess.Popen([sys.executable, "-S", "-c", spinner], start_new_session=True)
    tasks = functools.partial(sandbox.session_tasks, root.pid)
    try:
        for _ in range(SCANS):  # a few children spinning before it starts
            if len(tasks()) >= 4:
                break
            time.sleep(0.05)
        stopped: list[int] = []
        assert sandbox.freeze(tasks, stopped) == []  # none kept running
        before = {pid: _state_and_cpu(pid) for pid in stopped}
        assert len(stopped) >= 4 and set(tasks()) == set(stopped)
        assert all(state == "T" for state, _ in before.values()), before
        time.sleep(0.3)
        assert {pid: _state_and_cpu(pid) for pid in stopped} == before and set(tasks()) == set(stopped)
        sandbox.thaw(stopped)
        idle = lambda: [pid for pid in stopped if (_state_and_cpu(pid) or ("X", 0))[1] <= before[pid][1]]  # noqa: E731
        assert gone(idle) == []  # every one of them ran again
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()


def test_a_frozen_worker_runs_nothing_and_answers_after_it_is_thawed(fast):
    """`WorkerProcess.frozen` (around the reference's timings made while a candidate's worker is up): every
    process of the worker shows stopped meanwhile (its cgroup's, else its session's), and the worker answers
    again after."""
    from kerneljudge import protocol
    from kerneljudge.isolation import WORKER, first_ping

    options = fast.worker_options()
    with WorkerProcess(options) as worker:
        worker.call(first_ping(options, "cpu", WORKER))
        with worker.frozen() as frozen:
            listed = worker.cgroup.tasks() if worker.cgroup is not None else sandbox.session_tasks(worker.process.pid)
            states = {pid: (_state_and_cpu(pid) or ("X", 0))[0] for pid in listed}
        assert frozen.running == [] and frozen.ran == [] and listed and states == {pid: "T" for pid in listed}, states
        assert worker.call(protocol.Ready()) is not None
        assert all((_state_and_cpu(pid) or ("X", 0))[0] != "T" for pid in listed)


def test_processes_that_continue_each_other_are_stopped_again_or_said_to_keep_running():
    """Processes that send each other SIGCONT as soon as they can (a ring) are each stopped again until all are
    stopped at once (a stop sent once each let them all run on: the freeze returned after its wait, every one
    running); where that cannot be done in time, `freeze` names ones still running (the judge then fails the
    candidate: tests/test_mutation_kills.py)."""
    ring = ("import os, signal, sys, time\n"
            "pids = []\n"
            "for _ in range(4):\n"
            "    pid = os.fork()\n"
            "    if pid == 0:\n"
            "        while True:\n"
            "            for other in [int(p) for p in open(sys.argv[1]).read().split()]:\n"
            "                try: os.kill(other, signal.SIGCONT)\n"
            "                except OSError: pass\n"
            "    pids.append(pid)\n"
            "open(sys.argv[1], 'w').write(' '.join(map(str, pids + [os.getpid()])))\n"
            "while True:\n"
            "    for other in pids:\n"
            "        try: os.kill(other, signal.SIGCONT)\n"
            "        except OSError: pass\n")
    with tempfile.NamedTemporaryFile("w", suffix=".pids", delete=False) as listing:
        listing.write("")
    root = subprocess.Popen([sys.executable, "-S", "-c", ring, listing.name], start_new_session=True)
    tasks = functools.partial(sandbox.session_tasks, root.pid)
    try:
        assert gone(lambda: [] if len(Path(listing.name).read_text().split()) == 5 else [True]) == []
        stopped: list[int] = []
        running = sandbox.freeze(tasks, stopped)
        states = {pid: (_state_and_cpu(pid) or ("X", 0))[0] for pid in tasks()}
        # never "all stopped" while one runs: all stopped at once stay stopped (none is left to continue them)
        assert (not running and set(states.values()) == {"T"}) or (running and set(running) <= set(states)), \
            (running, states)
        sandbox.thaw(stopped)
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
        os.unlink(listing.name)


def test_freeze_names_a_process_still_running_at_its_deadline(monkeypatch):
    """A process that never shows stopped (here /proc is read as saying it runs) is named once FREEZE_WAIT_S has
    passed, never taken for stopped."""
    child = subprocess.Popen([sys.executable, "-S", "-c", "import time; time.sleep(60)"])
    try:
        monkeypatch.setattr(sandbox, "_unstopped", lambda pid: {"R"} if pid == child.pid else set())
        stopped: list[int] = []
        assert sandbox.freeze(lambda: [child.pid], stopped) == [child.pid] and stopped == [child.pid]
    finally:
        sandbox.thaw([child.pid])
        child.kill()
        child.wait()


def test_a_process_continued_while_the_worker_is_frozen_is_named_after_the_block(fast):
    """`WorkerProcess.frozen`'s second look, after the block: a process of the worker continued meanwhile (here by
    the test) used CPU time, and one forked meanwhile appeared; either is named in `ran`."""
    spinner = "import os, sys\nif os.fork() == 0:\n    while True: pass\nwhile True: pass\n"
    root = subprocess.Popen([sys.executable, "-S", "-c", spinner], start_new_session=True)
    worker = WorkerProcess(fast.worker_options())
    worker.process, worker.deadline = root, 0.0  # a session of spinning processes in place of a started worker
    try:
        assert gone(lambda: [] if len(sandbox.session_tasks(root.pid)) == 2 else [True]) == []
        with worker.frozen() as frozen:
            assert frozen.running == []
            os.kill(root.pid, signal.SIGCONT)
            time.sleep(0.1)  # 10 clock ticks of spinning
        assert root.pid in frozen.ran
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
