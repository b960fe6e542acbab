"""The worker's sandbox, seen from the judge: which layers this machine allows, the launcher command that
puts the worker in them, and the checks the judge makes after the worker (see README, "What the judge
trusts").

Layers set up by the launcher (sandbox/launch.py), each dropped where the system refuses it:

    user     a user namespace: the worker holds no capability and cannot create namespaces of its own
    mount    every file system read-only (the judge's package, site-packages, the store, the caches, home,
             /tmp) except the worker's own folder, bound read-write at its path (its extensions are built by
             the judge, in these layers, with only a staging folder writable: extensions.py)
    dev      a private /dev: null, zero, full, random, urandom, tty and the NVIDIA devices; a private /dev/shm
    pid      a PID namespace with its own /proc: everything the worker starts dies with it
    net      a network namespace: no network, not even loopback
    ipc      an IPC namespace: System V shared memory, semaphores and message queues of its own, gone with it
    rlimits  CPU time, file size, open files and processes (the address space on CPU runs: proc/machine.py)
    cgroup   a pids cgroup made by the judge: caps the worker's tasks (root too), all killed at the end
    memory   a memory cgroup made by the judge: caps the host memory of all the worker's processes together

and, wherever the worker runs on Linux (they need no permission): `reaper` (the launcher is a child
subreaper, and kills every descendant left when the worker ends, scanning /proc until none remains; the
judge also kills what is left in the worker's session), `watch` (after the worker, the judge's package and
the results store are compared with a snapshot taken before it started) and `bytecode` (workers write no
bytecode, and the judge imports every module it needs before the first worker: judgeimports.py) and
`undumpable` (the judge and the referee forbid other processes of their user to read or write their memory
through /proc or ptrace: without a PID namespace the worker could otherwise reach them).
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
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import kerneljudge
from kerneljudge.proc.lifeline import PARENT, with_parent
from kerneljudge.sandbox import linux

LAUNCHED = ("user", "mount", "dev", "pid", "net", "ipc", "rlimits")
CGROUP = "cgroup"  # made by the judge, joined by the launcher
MEMORY = "memory"  # likewise
LAYERS = LAUNCHED + (CGROUP, MEMORY)  # the layers that can be turned off (WorkerOptions.sandbox_off)
JUDGE_SIDE = ("reaper", "watch", "bytecode", "undumpable")
DESCRIPTIONS = {
    "user": "user namespace: the worker holds no capability and cannot create namespaces",
    "mount": "read-only view of every file system but the worker's folder (its extensions built by the judge)",
    "dev": "private /dev: no disks or other hardware, NVIDIA devices kept; private /dev/shm",
    "pid": "PID namespace and its own /proc: all the worker starts dies with it; no other process visible",
    "net": "network namespace: no network, not even loopback",
    "ipc": "IPC namespace: no System V shared memory, semaphore or message queue shared with another process",
    "rlimits": "limits on CPU time, file size, open files and processes (the process limit binds no root user)",
    "cgroup": "a pids cgroup: a cap on the worker's tasks, and every task in it is killed at the end",
    "memory": "a memory cgroup: the host memory of all the worker's processes together is capped (root too)",
    "reaper": "every descendant left at the end is killed (subreaper, /proc scans of children and session)",
    "watch": "the judge's package and the results store are checked for changes after the worker",
    "bytecode": "workers write no bytecode; the judge imported all its modules before the first worker",
    "undumpable": "the judge's and the referee's memory cannot be read or written by the worker's user (/proc, ptrace)",
}
PROBE_TIMEOUT_S = 60
FREEZE_WAIT_S = 1.0  # `freeze`: how long a worker's processes are given to show stopped (a loaded host)
STOPPED_STATES = ("T", "t", "Z", "X")  # stopped, traced, or ended
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
        return Layers((), {name: "not Linux" for name in LAYERS + JUDGE_SIDE})
    inactive = {name: "turned off (sandbox_off)" for name in LAUNCHED if name in off}
    wanted = [name for name in LAUNCHED if name not in off]
    group = Cgroup.create(None if CGROUP in off else 16, None if MEMORY in off else 1 << 30)  # joined by the probe
    made = made_layers(group)
    for layer, controller in ((CGROUP, "pids"), (MEMORY, "memory")):
        if layer in off:
            inactive[layer] = "turned off (sandbox_off)"
        elif made[layer] is None:
            inactive[layer] = (f"no writable {controller} cgroup (cgroup v1 {controller} hierarchy, or v2 with "
                               f"{controller} delegated)")
        else:
            wanted.append(layer)
    probe_dir = tempfile.mkdtemp(prefix="kj-sandbox-probe-")
    try:
        while True:
            failed, reason = _probe(wanted, probe_dir, group)
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
        if group is not None:
            group.remove()
    if "user" not in wanted and os.getuid() != 0:
        for name in [n for n in wanted if n in ("mount", "dev", "pid", "net", "ipc")]:
            wanted.remove(name)
            inactive[name] = "needs the user namespace"
    if "mount" not in wanted:  # the cgroups' files are the worker's user's: only the read-only /sys keeps them
        for layer in [n for n in (CGROUP, MEMORY) if n in wanted]:
            wanted.remove(layer)
            inactive[layer] = "needs the read-only view (mount): without it the worker could lift its own limits"
    return Layers(tuple(wanted) + JUDGE_SIDE, inactive)


def _probe(layers: list[str], folder: str, group: "Cgroup | None") -> tuple[str | None, str]:
    """Start the launcher with `layers` (joining `group`'s cgroups for the cgroup layers among them) and a
    trivial command, its writable folder inside a hidden one (as a worker's is among every worker's): (None, "")
    when it ran, else the layer it names as failing and why."""
    check = ("import os, sys, socket; f = sys.argv[1]; open(os.path.join(f, 'w'), 'w').write('ok'); "
             "ro = os.access('/usr', os.W_OK) and 'mount' in sys.argv[2]; sys.exit(3 if ro else 0)")
    inner = os.path.join(folder, "inner")
    os.makedirs(inner, exist_ok=True)
    command = with_parent(launch_command([sys.executable, "-S", "-c", check, inner, ",".join(layers)], layers=layers,
                                         writable=[inner], hidden=[folder], limits=_probe_limits(), cgroup=group),
                          os.getpid())
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env=launcher_env(dict(os.environ)), cwd=folder)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "launcher", f"the launcher could not run: {exc}"
    if done.returncode == 0 and Path(inner, "w").exists():
        return None, ""
    for line in done.stderr.splitlines():
        if line.startswith("{") and "sandbox_layer_failed" in line:
            report = json.loads(line)
            return report["sandbox_layer_failed"], report["reason"]
    if done.returncode == 3:
        return "mount", "the read-only view did not hold"
    if "mount" in layers and not Path(inner, "w").exists():
        return "mount", "the worker's folder was not writable in the view"
    return "launcher", f"the launcher exited with {done.returncode}: {done.stderr.strip()[-300:]}"


def _probe_limits() -> dict:
    return {"cpu_s": 60, "file_mb": 64, "open_files": 256, "processes": 64}


def limits(timeout_s: float, max_file_mb: int, max_processes: int, max_open_files: int) -> dict:
    """The launcher's limits: CPU time as a backstop (every core busy for the whole time limit, plus a
    minute: the wall-clock deadline is the real limit), file size, open files, processes beyond the user's."""
    return {"cpu_s": int(timeout_s * (os.cpu_count() or 1)) + 60, "file_mb": max_file_mb,
            "open_files": max_open_files, "processes": max_processes}


def launch_command(command: list[str], *, layers, writable, limits: dict, hidden=(),
                   cgroup: "Cgroup | None" = None, niceness: int = 0) -> list[str]:
    """COMMAND run by the launcher in `layers`, in `cgroup` when given, at `niceness` (whatever layers are
    active: a priority, not a protection). The launcher's own PARENT word
    (proc/lifeline.py) is filled by whoever starts it; COMMAND's by the launcher (the worker's parent as the
    worker sees it)."""
    config = {"layers": [name for name in layers if name in LAUNCHED], "writable": [str(Path(w)) for w in writable],
              "hidden": [str(Path(h)) for h in hidden], "limits": limits,
              "cgroups": {layer: str(path) for layer, path in made_layers(cgroup).items() if path and layer in layers},
              "niceness": niceness}
    return [sys.executable, "-m", "kerneljudge.sandbox.launch", json.dumps(config), PARENT, "--", *command]


def launcher_env(env: dict) -> dict:
    """The worker's environment: the judge's package first on the path, no bytecode written."""
    package_root = str(Path(kerneljudge.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def undumpable() -> None:
    """This process's memory out of reach of the other processes of its user (PR_SET_DUMPABLE 0)."""
    linux.prctl(linux.PR_SET_DUMPABLE, 0)


def package_dir() -> Path:
    return Path(kerneljudge.__file__).resolve().parent


class Watch:
    """A snapshot of files the worker must not change (the judge's package, the results store): size,
    time and inode of each, compared after the worker; bytecode planted in the package is removed.
    Bytecode that another Python process wrote meanwhile is no breach when it is exactly what compiling
    its source gives (`honest_bytecode`)."""

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
        """The files added, changed or removed since the snapshot, but bytecode another Python process wrote
        honestly. Every new or changed bytecode file is deleted, honest or not (Python writes it again from
        the source): nothing the worker could have written is left for the next interpreter to load."""
        after = self._scan()
        moved = [p for p in set(self.before) | set(after) if self.before.get(p) != after.get(p)]
        changed = sorted(p for p in moved if not (p in after and p.endswith(".pyc") and honest_bytecode(Path(p))))
        for path in moved:
            if path.endswith(".pyc"):
                Path(path).unlink(missing_ok=True)
        return changed


def honest_bytecode(pyc: Path) -> bool:
    """`pyc` holds what Python writes for its source as it is now: the header (time, size) and the code.
    The code is compared byte for byte first; where the bytes differ it is compared as code, in a
    throwaway interpreter with small limits, given the bytes read here: marshal's bytes depend on the
    writing process's reference counts (an honest compile by another process, an MCP server's, came out
    different for one module in 48), and loading marshal data is not safe against crafted bytes, so the
    judge never loads it itself. Code that compares equal may still differ (its stack size is not
    compared), which is why `Watch.changes` deletes honest bytecode too: this only decides what is said."""
    import importlib.util
    import marshal

    source = pyc.parent.parent / (pyc.name.split(".", 1)[0] + ".py")
    try:
        if importlib.util.cache_from_source(str(source)) != str(pyc):
            return False
        data, stat, written = source.read_bytes(), source.stat(), pyc.read_bytes()
        code = compile(data, str(source), "exec", dont_inherit=True)
    except (OSError, SyntaxError, ValueError, NotImplementedError):
        return False
    header = (importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little") + (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(
        4, "little") + (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little"))
    if written[:16] != header:
        return False
    return written[16:] == marshal.dumps(code) or _same_code_elsewhere(written[16:], source)


# Run as `python -I -S -c SAME_CODE SOURCE` with the bytecode's code on stdin: exit 0 when it equals the
# source's. Its limits (10 s of CPU, 2 GiB of address space) are set before it loads anything.
_SAME_CODE = ("import marshal, resource, sys; resource.setrlimit(resource.RLIMIT_CPU, (10, 10)); "
              "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
              "loaded = marshal.loads(sys.stdin.buffer.read()); source = sys.argv[1]; "
              "sys.exit(0 if loaded == compile(open(source, 'rb').read(), source, 'exec', dont_inherit=True) else 1)")


def _same_code_elsewhere(code_bytes: bytes, source: Path) -> bool:
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _SAME_CODE, str(source)], input=code_bytes,
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def made_layers(cgroup: "Cgroup | None") -> dict[str, Path | None]:
    """The folder behind each cgroup layer (None: not made)."""
    return {CGROUP: cgroup.pids if cgroup else None, MEMORY: cgroup.memory if cgroup else None}


class Cgroup:
    """The worker's cgroups, made by the judge; the launcher joins them before anything else, so every
    process the worker starts is in them, and the worker's read-only view covers /sys, so it cannot move
    itself out. A pids cgroup caps the worker's tasks at `pids.max` (this binds root too, unlike
    RLIMIT_NPROC) and finds them all at the end however they detached. A memory cgroup caps the host memory
    of all of them together (RLIMIT_AS caps each process alone, and not at all on GPU runs, where CUDA maps
    far more address space than it uses): beyond it the kernel kills one of them, and `oom_kills` counts
    it. On cgroup v1 each is a folder of its own hierarchy; on v2 both are one folder."""

    KILL_ROUNDS = 100

    def __init__(self, pids: Path | None, memory: Path | None, memory_bytes: int | None = None):
        """The folders made (None: that controller's hierarchy was not writable) and the memory limit set."""
        self.pids, self.memory, self.memory_bytes = pids, memory, memory_bytes

    @property
    def paths(self) -> list[Path]:
        """Each folder once (on cgroup v2 both controllers are one folder)."""
        return list(dict.fromkeys(p for p in (self.pids, self.memory) if p is not None))

    @classmethod
    def create(cls, max_tasks: int | None, memory_bytes: int | None = None) -> "Cgroup | None":
        """New cgroups under this process's own: pids (with `max_tasks`) and memory (with `memory_bytes`),
        each where its hierarchy is writable; None where neither could be made."""
        name = f"kerneljudge-{os.getpid()}-{os.urandom(4).hex()}"
        wanted = {"pids": max_tasks, "memory": memory_bytes}
        made: dict[str, Path] = {}
        for controller, value in wanted.items():
            base = cls._base(controller) if value is not None else None
            if base is None:
                continue
            cls._remove_stale(base)
            path = base / name
            try:
                path.mkdir(exist_ok=path in made.values())
                for file, text, optional in _limit_files(controller, value, (path / "cgroup.controllers").exists()):
                    try:
                        (path / file).write_text(text)
                    except OSError:
                        if not optional:
                            raise
            except OSError:
                if path not in made.values():
                    _remove_folder(path)
                continue
            made[controller] = path
        return cls(made.get("pids"), made.get("memory"), memory_bytes if "memory" in made else None) if made else None

    @staticmethod
    def _remove_stale(base: Path) -> None:
        """The empty cgroups of judges that died without removing theirs (a judge killed outright)."""
        for folder in base.glob("kerneljudge-*-*"):
            try:
                os.kill(int(folder.name.split("-")[1]), 0)
            except ProcessLookupError:
                _remove_folder(folder)
            except (ValueError, PermissionError):
                pass

    @staticmethod
    def _base(controller: str) -> Path | None:
        """This process's cgroup in a hierarchy with `controller`: cgroup v1's, else v2 with the controller
        enabled for its children."""
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError:
            return None
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                folder = Path("/sys/fs/cgroup") / controller / path.lstrip("/")
                if folder.is_dir():
                    return folder
        for line in lines:
            if line.startswith("0::"):
                folder = Path("/sys/fs/cgroup") / line[3:].lstrip("/")
                try:
                    if controller in (folder / "cgroup.subtree_control").read_text().split():
                        return folder
                except OSError:
                    return None
        return None

    def tasks(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths:
            try:
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return sorted(found)

    def oom_kills(self) -> int:
        """How many of the worker's processes the kernel killed at the memory cgroup's limit."""
        if self.memory is None:
            return 0
        for file in ("memory.events", "memory.oom_control"):  # v2, v1
            try:
                for line in (self.memory / file).read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def kill_all(self) -> None:
        """SIGKILL every process in the cgroups, round after round, until they are empty."""
        for _ in range(self.KILL_ROUNDS):
            if not _kill_all(self.tasks()):
                return
            time.sleep(0.01)

    def remove(self) -> None:
        self.kill_all()
        for path in self.paths:
            _remove_folder(path, rounds=self.KILL_ROUNDS)  # a killed task leaves the cgroup when it is reaped


def _limit_files(controller: str, value: int, unified: bool) -> list[tuple[str, str, bool]]:
    """The files that set a cgroup's limit (name, text, optional), in the order they must be written. The swap
    limits are optional: they exist only where the kernel accounts swap (then: no swap beyond the limit)."""
    if controller == "pids":
        return [("pids.max", str(value), False)]
    if unified:
        return [("memory.max", str(value), False), ("memory.swap.max", "0", True)]
    return [("memory.limit_in_bytes", str(value), False), ("memory.memsw.limit_in_bytes", str(value), True)]


def _remove_folder(path: Path, rounds: int = 1) -> None:
    """rmdir a cgroup, retrying while its last tasks are being reaped; gone already is fine."""
    for _ in range(rounds):
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if rounds > 1:
                time.sleep(0.01)


def kill_session(session_id: int) -> None:
    """SIGKILL every process still in the worker's session, scanning /proc until none is left (the launcher
    reaps its descendants itself; this catches what is left when the launcher was killed first)."""
    for _ in range(SESSION_SCANS):
        if not _kill_all(session_tasks(session_id)):
            return


def session_tasks(session_id: int) -> list[int]:
    """The live processes of a session, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            state = _stat(int(entry))
            # a leader that exited shows "Z" while its other threads run on
            if state is not None and int(state[3]) == session_id and (state[0] not in ("Z", "X")
                                                                       or _unstopped(int(entry))):
                found.append(int(entry))
    return found


def stray_ticks(launcher: int, pid_namespace: bool) -> tuple[int, int]:
    """(CPU ticks, processes): what the processes below the sandbox launcher `launcher` but its own chain to the
    worker (its first child, and with a PID namespace that init's first child: the worker) have used so far, and
    how many there are. What the worker's code started, however it detached: an orphan comes back to the
    launcher, a subreaper, or to the namespace's init, never out from under them. Counted: each such process's
    own time (a process whose main thread exited alone shows Z and runs on in its other threads: kept), and
    the time every process below the launcher, the worker and init included, booked of children it reaped (a
    relay of short-lived children is seen in whoever waits for them). From one /proc scan: the judge's own view,
    nothing the worker reports."""
    table = {}  # pid -> stat fields after the name
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[0] != "X":
                table[int(entry)] = fields
    below, frontier = set(), [launcher]
    while frontier:
        parent = str(frontier.pop())
        children = [pid for pid, fields in table.items() if fields[1] == parent and pid not in below]
        below.update(children)
        frontier.extend(children)
    chain = [launcher]
    for _ in range(2 if pid_namespace else 1):
        first = [pid for pid in below if int(table[pid][1]) == chain[-1]]
        if not first:
            break
        chain.append(min(first, key=lambda pid: int(table[pid][19])))  # the earliest started
    strays = below - set(chain)
    own = sum(int(table[pid][11]) + int(table[pid][12]) for pid in strays)
    reaped = sum(int(table[pid][13]) + int(table[pid][14]) for pid in below | {launcher} if pid in table)
    return own + reaped, len(strays)


def _stat(pid: int, thread: str | None = None) -> list[str] | None:
    """The fields of /proc/PID/stat (or of one thread's, /proc/PID/task/THREAD/stat) after the command's name
    (state first), or None for a process or thread gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        return Path(path).read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def freeze(tasks: Callable[[], list[int]], stopped: list[int], clock: Callable[[], float] = time.monotonic
           ) -> list[int]:
    """SIGSTOP every process `tasks` lists, listing anew and signalling every one again each pass (a stop is
    idempotent), until one pass finds every thread of every process listed stopped (a process forks until its
    stop is delivered: the next list has its child; a leader that exited leaves its other threads, which the
    stop reaches too); `stopped` collects the pids signalled, for `thaw` (kept by the caller, so that an
    interruption still continues them). Processes that continue each other (by SIGCONT, or a tracer's)
    SIGCONT, or a tracer) keep running: those not stopped by FREEZE_WAIT_S, else []."""
    deadline = clock() + FREEZE_WAIT_S
    while True:
        listed = tasks()
        running = [pid for pid in listed if _unstopped(pid)]
        if not running:
            return []
        if clock() > deadline:  # in uninterruptible sleep (a vfork's parent, say), a thread stops as it leaves it
            return [pid for pid in running if _unstopped(pid) - {"D"}]
        for pid in listed:
            try:
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                continue
            if pid not in stopped:
                stopped.append(pid)
        time.sleep(0.0005)


def _unstopped(pid: int) -> set[str]:
    """The states of a process's threads that are neither stopped nor ended (none: a process gone)."""
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    states = {fields[0] for fields in (_stat(pid, tid) for tid in threads) if fields}
    return states - set(STOPPED_STATES)


def cpu_ticks(pids: list[int]) -> dict[int, int]:
    """Each live process's user + system CPU time so far, in clock ticks (all its threads)."""
    ticks = {}
    for pid in pids:
        fields = _stat(pid)
        if fields is not None:
            ticks[pid] = int(fields[11]) + int(fields[12])
    return ticks


def thaw(pids: list[int]) -> None:
    """SIGCONT each of `pids` (`freeze`'s)."""
    _signal_all(pids, signal.SIGCONT)


def _kill_all(pids: list[int]) -> bool:
    """SIGKILL each of `pids`; whether there were any."""
    return _signal_all(pids, signal.SIGKILL)


def _signal_all(pids: list[int], signum: int) -> bool:
    """`signum` to each of `pids` (one gone, or not ours, skipped); whether there were any."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass
    return bool(pids)
