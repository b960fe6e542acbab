"""The worker's sandbox, seen from the judge: which layers this machine allows, the launcher command that
puts the worker in them, and the checks the judge makes after the worker (see README, "What the judge
trusts").

Layers set up by the launcher (sandbox/launch.py), each dropped where the system refuses it:

    user     a user namespace: the worker holds no capability and cannot create namespaces of its own
    mount    every file system read-only (the judge's package, site-packages, the store, the caches, home,
             /tmp) except the worker's own folder and the build caches, bound read-write at their paths
    dev      a private /dev: null, zero, full, random, urandom, tty and the NVIDIA devices; a private /dev/shm
    pid      a PID namespace with its own /proc: everything the worker starts dies with it
    net      a network namespace: no network, not even loopback
    rlimits  CPU time, file size, open files and processes (the address space on CPU runs: proc/machine.py)

and, wherever the worker runs on Linux (they need no permission): `reaper` (the launcher is a child
subreaper, and kills every descendant left when the worker ends, scanning /proc until none remains; the
judge also kills what is left in the worker's session), `watch` (after the worker, the judge's package and
the results store are compared with a snapshot taken before it started) and `bytecode` (workers write no
bytecode, and the judge imports every module it needs before the first worker: judgeimports.py).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

LAUNCHED = ("user", "mount", "dev", "pid", "net", "rlimits")
JUDGE_SIDE = ("reaper", "watch", "bytecode")
DESCRIPTIONS = {
    "user": "user namespace: the worker holds no capability and cannot create namespaces",
    "mount": "read-only view of every file system but the worker's folder and the build caches",
    "dev": "private /dev: no disks or other hardware, NVIDIA devices kept; private /dev/shm",
    "pid": "PID namespace and its own /proc: all the worker starts dies with it; no other process visible",
    "net": "network namespace: no network, not even loopback",
    "rlimits": "limits on CPU time, file size, open files and processes",
    "reaper": "every descendant left at the end is killed (subreaper, /proc scans of children and session)",
    "watch": "the judge's package and the results store are checked for changes after the worker",
    "bytecode": "workers write no bytecode; the judge imported all its modules before the first worker",
}
PROBE_TIMEOUT_S = 60
SESSION_SCANS = 50  # the judge's own scans for processes left in the worker's session


@dataclass(frozen=True)
class Layers:
    """Which layers hold for a worker, and why the others do not."""

    active: tuple[str, ...]
    inactive: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"active": list(self.active), "inactive": dict(self.inactive), "applies_to": "worker"}


@functools.cache
def detect(off: tuple[str, ...] = ()) -> Layers:
    """The layers this machine allows, minus `off` (WorkerOptions.sandbox_off): probed once per process by
    running the launcher with everything asked, dropping the layer it names as failing, until it starts."""
    if not sys.platform.startswith("linux"):
        return Layers((), {name: "not Linux" for name in LAUNCHED + JUDGE_SIDE})
    inactive = {name: "turned off (sandbox_off)" for name in LAUNCHED if name in off}
    wanted = [name for name in LAUNCHED if name not in off]
    probe_dir = tempfile.mkdtemp(prefix="kj-sandbox-probe-")
    try:
        while True:
            failed, reason = _probe(wanted, probe_dir)
            if failed is None:
                break
            if failed not in wanted:  # the launcher itself cannot run: no layer at all
                inactive.update({name: reason for name in wanted})
                wanted = []
                break
            wanted.remove(failed)
            inactive[failed] = reason
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    if "user" not in wanted and os.getuid() != 0:
        for name in [n for n in wanted if n in ("mount", "dev", "pid", "net")]:
            wanted.remove(name)
            inactive[name] = "needs the user namespace"
    return Layers(tuple(wanted) + JUDGE_SIDE, inactive)


def _probe(layers: list[str], folder: str) -> tuple[str | None, str]:
    """Start the launcher with `layers` and a trivial command: (None, "") when it ran, else the layer it
    names as failing and why."""
    check = ("import os, sys, socket; f = sys.argv[1]; open(os.path.join(f, 'w'), 'w').write('ok'); "
             "ro = os.access('/usr', os.W_OK) and 'mount' in sys.argv[2]; sys.exit(3 if ro else 0)")
    command = launch_command([sys.executable, "-S", "-c", check, folder, ",".join(layers)], layers=layers,
                             writable=[folder], limits=_probe_limits(), judge_pid=os.getpid())
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env=launcher_env(dict(os.environ)), cwd=folder)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "launcher", f"the launcher could not run: {exc}"
    if done.returncode == 0 and Path(folder, "w").exists():
        return None, ""
    for line in done.stderr.splitlines():
        if line.startswith("{") and "sandbox_layer_failed" in line:
            report = json.loads(line)
            return report["sandbox_layer_failed"], report["reason"]
    if done.returncode == 3:
        return "mount", "the read-only view did not hold"
    if "mount" in layers and not Path(folder, "w").exists():
        return "mount", "the worker's folder was not writable in the view"
    return "launcher", f"the launcher exited with {done.returncode}: {done.stderr.strip()[-300:]}"


def _probe_limits() -> dict:
    return {"cpu_s": 60, "file_mb": 64, "open_files": 256, "processes": 64}


def limits(timeout_s: float, max_file_mb: int, max_processes: int, max_open_files: int) -> dict:
    """The launcher's limits: CPU time as a backstop (every core busy for the whole time limit, plus a
    minute: the wall-clock deadline is the real limit), file size, open files, processes beyond the user's."""
    return {"cpu_s": int(timeout_s * (os.cpu_count() or 1)) + 60, "file_mb": max_file_mb,
            "open_files": max_open_files, "processes": max_processes}


def launch_command(command: list[str], *, layers, writable, limits: dict, judge_pid: int) -> list[str]:
    """COMMAND run by the launcher in `layers` (its "{parent}" word becomes the pid of the worker's parent
    as the worker sees it)."""
    config = {"layers": [name for name in layers if name in LAUNCHED], "writable": [str(Path(w)) for w in writable],
              "limits": limits, "judge_pid": judge_pid}
    return [sys.executable, "-m", "kerneljudge.sandbox.launch", json.dumps(config), "--", *command]


def launcher_env(env: dict) -> dict:
    """The worker's environment: the judge's package first on the path, no bytecode written."""
    import kerneljudge

    package_root = str(Path(kerneljudge.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def package_dir() -> Path:
    import kerneljudge

    return Path(kerneljudge.__file__).resolve().parent


class Watch:
    """A snapshot of files the worker must not change (the judge's package, the results store): size,
    time and inode of each, compared after the worker; bytecode planted in the package is removed."""

    def __init__(self, roots: list[Path]):
        self.roots = [Path(r) for r in roots]
        self.before = self._scan()

    def _scan(self) -> dict[str, tuple]:
        found = {}
        for root in self.roots:
            paths = root.rglob("*") if root.is_dir() else [root, *root.parent.glob(root.name + "-*")]
            for path in paths:
                try:
                    st = path.stat()
                except OSError:
                    continue
                if path.is_file():
                    found[str(path)] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return found

    def changes(self) -> list[str]:
        """The files added, changed or removed since the snapshot; planted bytecode is deleted."""
        after = self._scan()
        changed = sorted(p for p in set(self.before) | set(after) if self.before.get(p) != after.get(p))
        for path in changed:
            if path.endswith(".pyc") and path not in self.before:
                Path(path).unlink(missing_ok=True)
        return changed


def kill_session(session_id: int) -> None:
    """SIGKILL every process still in the worker's session, scanning /proc until none is left (the launcher
    reaps its descendants itself; this catches what is left when the launcher was killed first)."""
    for _ in range(SESSION_SCANS):
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue
                if fields[0] not in ("Z", "X") and int(fields[3]) == session_id:
                    found.append(int(entry))
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
