"""The sandbox launcher: `python -m kerneljudge.sandbox.launch CONFIG JUDGE_PID -- COMMAND...` sets up the
layers CONFIG names, then runs COMMAND (the worker) in them. It imports nothing but the standard library,
kerneljudge.sandbox.linux and proc.lifeline, and runs before any candidate code exists. JUDGE_PID is its
parent's (the judge, or the fork server that forked it: proc/zygote.py).

Process layout: the launcher unshares the namespaces, then forks. The child builds the mount view, sets
the limits, drops every capability and executes COMMAND; with `pid` on, it is init of the new PID
namespace and forks once more for the worker (when init exits, the kernel kills every process left in the
namespace). The parent stays,
as a child subreaper (orphans of the worker's descendants come back to it, however they detached), waits
for the worker, then kills what is left of its descendants, scanning /proc until none remains, and exits
with the worker's status (re-raising the signal that killed it), so the judge sees the worker's end.

A layer that fails prints one JSON line naming it on stderr and exits with SETUP_FAILED: the judge's probe
(kerneljudge.sandbox.detect) drops that layer and tries again, so a real launch only asks for layers
known to work here.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

from kerneljudge.proc.lifeline import with_parent
from kerneljudge.sandbox import linux

SETUP_FAILED = 121
REAP_ROUNDS = 200  # /proc scans at the end, each killing every descendant found (a fork bomb is bounded by nproc)
#: Where the worker needs no view of the host's: the kernel's own file systems (a fresh /proc comes with `pid`).
SKIPPED_MOUNTS = ("/proc", "/dev")
#: ... but these of /proc are made read-only in the worker's mount namespace (`_sealed_kernel_settings`)
KERNEL_SETTINGS = ("/proc/sys", "/proc/sysrq-trigger")


class LayerFailed(Exception):
    def __init__(self, layer: str, reason: str):
        super().__init__(f"{layer}: {reason}")
        self.layer, self.reason = layer, reason


def main(argv: list[str], run=None) -> None:
    """`run(command)` starts the worker in the prepared process: by default it executes COMMAND; the fork
    server (kerneljudge/proc/zygote.py) runs it in-process, torch already imported."""
    run = run or _execute
    config = json.loads(argv[1])
    command = argv[argv.index("--") + 1:]
    layers = set(config["layers"])
    _tie_to(int(argv[2]))
    for layer, path in (config.get("cgroups") or {}).items():  # first: every process started from here on is in them
        try:
            _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))  # (on cgroup v2 one folder: joined twice)
        except OSError as exc:
            _fail(LayerFailed(layer, str(exc)))
    try:
        tasks_before = _count_tasks(os.getuid())
        _namespaces(layers)
    except LayerFailed as failed:
        _fail(failed)
    linux.prctl(linux.PR_SET_CHILD_SUBREAPER, 1)
    status_read, status_write = os.pipe()  # not inherited by the worker (closed when it executes)
    child = os.fork()
    if child == 0:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.close(status_read)  # the launcher's end: no process below it holds it (a worker garbled its status there)
        try:
            _inside(layers, config, tasks_before)
        except LayerFailed as failed:
            _fail(failed)
        if "pid" in layers:
            _init(command, status_write, run)
        os.close(status_write)  # (the fork server runs the worker in this process: nothing else closes it)
        run(command)
    os.close(status_write)
    _unreachable()
    os.closerange(3, status_read)  # the worker's channel is the worker's
    os.closerange(status_read + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    signal.signal(signal.SIGTERM, lambda *_: _end(child, status_read, signal.SIGKILL))
    _end(child, status_read, None)


def _execute(command: list[str]) -> None:
    os.execv(command[0], with_parent(command, os.getppid()))


def _init(command: list[str], status_write: int, run) -> None:
    """Init of the PID namespace: start the worker, reap whatever is orphaned onto this process, and when
    the worker ends pass its wait status to the launcher and exit (the kernel then kills every process
    left in the namespace). The worker is not init itself: init ignores the signals it sends itself."""
    worker = os.fork()
    if worker == 0:
        linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
        os.close(status_write)  # init's alone (the fork server runs the worker in this process: nothing closes it)
        run(command)
    _unreachable()
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == worker:
            os.write(status_write, str(status).encode())
            os._exit(0)


def _unreachable() -> None:
    """This process's descriptors out of its worker's reach. Its user's processes may open another's through
    `/proc/PID/fd`, and a pipe's end opened so writes into the pipe: a worker wrote digits into the status
    pipe of its init (or, without `pid`, of the launcher) and its exit status became the sandbox's setup
    failure, a judge error. Not dumpable, a process's entries there are out of reach of a process holding no
    capability (the worker holds none)."""
    linux.prctl(linux.PR_SET_DUMPABLE, 0)


def _tie_to(judge_pid: int) -> None:
    """SIGKILL when the judge's spawning thread ends (and the worker, tied to this process, follows)."""
    linux.prctl(linux.PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != judge_pid:
        os._exit(0)


def _fail(failed: LayerFailed) -> None:
    print(json.dumps({"sandbox_layer_failed": failed.layer, "reason": failed.reason}), file=sys.stderr, flush=True)
    os._exit(SETUP_FAILED)


def _namespaces(layers: set[str]) -> None:
    """The user namespace first (mapping this process's own ids), then the others, one call each."""
    uid, gid = os.getuid(), os.getgid()
    if "user" in layers:
        _try("user", lambda: linux.unshare(linux.CLONE_NEWUSER))
        try:
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
            # no nested user namespace: one would give the worker capabilities over a mount namespace of its own
            _write("/proc/sys/user/max_user_namespaces", "0")
        except OSError as exc:
            raise LayerFailed("user", f"mapping the user's ids: {exc}") from exc
    # `pid` mounts a fresh /proc: in a mount namespace of its own, like `mount` and `dev`, never in the judge's
    # (a /proc of the worker's PID namespace left over the judge's own broke every later process; seen on the H200)
    # one call per namespace (mount and dev share pid's mount namespace where pid is on), so that a refusal names
    # its own layer (the probe drops that one alone)
    done = 0
    for name, flag in (("pid", linux.CLONE_NEWPID | linux.CLONE_NEWNS), ("net", linux.CLONE_NEWNET),
                       ("ipc", linux.CLONE_NEWIPC), ("mount", linux.CLONE_NEWNS), ("dev", linux.CLONE_NEWNS)):
        new = flag & ~done
        if name in layers and new:
            _try(name, lambda: linux.unshare(new))
            done |= new


def _inside(layers: set[str], config: dict, tasks_before: int) -> None:
    """In the worker before it executes: its CPU priority, mount view, /proc, limits, no capabilities, no
    way back."""
    if config.get("niceness"):
        os.nice(config["niceness"])
    if layers & {"mount", "pid", "dev"}:
        _try("mount", lambda: linux.mount(None, "/", None, linux.MS_REC | linux.MS_PRIVATE))
    if "dev" in layers:
        _try("dev", _private_dev)
    if "mount" in layers:
        _try("mount", lambda: _read_only_view(config["writable"], config.get("hidden", [])))
    if "pid" in layers:
        # not read-only: the CUDA driver fails to start (error 304) on a read-only /proc (seen on the H200);
        # what /proc lets a process write is its own state, and the kernel's settings, sealed below
        flags = linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC
        _try("pid", lambda: linux.mount("proc", "/proc", "proc", flags))
    if layers & {"mount", "pid", "dev"}:
        _try("mount" if "mount" in layers else sorted(layers & {"pid", "dev"})[0], _sealed_kernel_settings)
    if "rlimits" in layers:
        _try("rlimits", lambda: _limits(config["limits"], tasks_before))
    if "user" in layers:
        _try("user", linux.drop_capabilities)
    else:
        linux.prctl(linux.PR_SET_NO_NEW_PRIVS, 1)
        linux.clear_capabilities()


def _sealed_kernel_settings() -> None:
    """/proc/sys and /proc/sysrq-trigger read-only in the worker's mount namespace: writes there are checked by
    their files' owner alone, so a worker whose user id is root's (a judge run as root) set the kernel's settings
    (core_pattern's handler runs as root on the host) with no capability at all (a review's trial, twenty-fifth
    session)."""
    for path in KERNEL_SETTINGS:
        if os.path.exists(path):
            _bound_at_itself(path, linux.MS_RDONLY)


def _try(layer: str, step) -> None:
    try:
        step()
    except (OSError, ValueError) as exc:
        raise LayerFailed(layer, str(exc)) from exc


def _write(path: str, text: str) -> None:
    with open(path, "w") as out:
        out.write(text)


def _mounts() -> list[tuple[str, set[str]]]:
    """(mount point, its per-mount options) for every mount this process sees."""
    found = []
    with open("/proc/self/mountinfo") as info:
        for line in info:
            fields = line.split()
            point = fields[4].encode().decode("unicode_escape")
            found.append((point, set(fields[5].split(","))))
    return found


def _flags(options: set[str]) -> int:
    """The flags a remount must keep (the kernel refuses to clear a locked nosuid, nodev or noexec)."""
    return ((linux.MS_NOSUID if "nosuid" in options else 0) | (linux.MS_NODEV if "nodev" in options else 0)
            | (linux.MS_NOEXEC if "noexec" in options else 0))


def _read_only_view(writable: list[str], hidden: list[str]) -> None:
    """Every mount read-only (the installed package, site-packages, the store, the caches, home, /tmp),
    the hidden paths covered (an empty read-only folder over a folder; over anything else /dev/null, on a
    nodev mount, so it does not even open), then
    the writable folders bound read-write at their own paths (the worker's folder; a build's staging folder).
    A writable folder inside a hidden one (the worker's own among every worker's folders, a build's among the
    builds in progress) is held open across the cover and bound back at its path inside it."""
    for point, options in _mounts():
        if _skipped(point) or "ro" in options:
            continue
        try:
            linux.mount(None, point, None, linux.MS_REMOUNT | linux.MS_BIND | linux.MS_RDONLY | _flags(options))
        except OSError:  # a mount hidden under a later one cannot be reached; the check below sees the rest
            pass
    for point, _ in _mounts():
        if not _skipped(point) and not _read_only(point):
            raise OSError(f"{point} stayed writable")
    kept = {folder: os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for folder in writable
            if os.path.isdir(folder) and any(_inside_of(folder, path) for path in hidden)}
    try:
        for path in hidden:
            _cover(path, {folder: fd for folder, fd in kept.items() if _inside_of(folder, path)})
    finally:
        for fd in kept.values():
            os.close(fd)
    for folder in writable:
        if os.path.isdir(folder):
            _bound_at_itself(folder)


def _bound_at_itself(path: str, flags: int = 0) -> None:
    """`path` bound at itself (a mount of its own over what it was part of), remounted with `flags` (none:
    read-write) and the locked ones its mount keeps."""
    linux.mount(path, path, None, linux.MS_BIND | linux.MS_REC)
    options = next(o for p, o in reversed(_mounts()) if p == path)
    linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | flags | _flags(options))


def _inside_of(folder: str, path: str) -> bool:
    return os.path.realpath(folder).startswith(os.path.realpath(path).rstrip("/") + "/")


def _cover(path: str, kept: dict[str, int]) -> None:
    """Put an empty read-only folder, or /dev/null (read-only, nodev: it does not open), over `path` (when it
    exists); the `kept` folders inside it (held open: path -> descriptor) bound back at their paths there."""
    read_only = linux.MS_RDONLY | linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC
    if os.path.isdir(path) and kept:
        linux.mount("tmpfs", path, "tmpfs", linux.MS_NOSUID | linux.MS_NODEV | linux.MS_NOEXEC, "size=64k,mode=0755")
        try:
            for folder, fd in kept.items():
                os.makedirs(folder, exist_ok=True)
                linux.mount(f"/proc/self/fd/{fd}", folder, None, linux.MS_BIND | linux.MS_REC)
            linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | read_only)
        except OSError as exc:  # no bind from a descriptor here: the folder stays seen, said in the worker's log
            linux.detach(path)
            print(json.dumps({"sandbox_note": f"{path} left visible: its own folder could not be bound back inside "
                                              f"it ({exc})"}), file=sys.stderr, flush=True)
    elif os.path.isdir(path):
        linux.mount("tmpfs", path, "tmpfs", read_only, "size=4k,mode=0555")
    elif os.path.lexists(path):
        linux.mount("/dev/null", path, None, linux.MS_BIND)
        linux.mount(None, path, None, linux.MS_REMOUNT | linux.MS_BIND | read_only)


def _skipped(point: str) -> bool:
    return any(point == skip or point.startswith(skip + "/") for skip in SKIPPED_MOUNTS)


def _read_only(point: str) -> bool:
    """The mount seen at `point` is read-only (or out of reach: nothing there to write)."""
    try:
        return bool(os.statvfs(point).f_flag & os.ST_RDONLY)
    except OSError:
        return True


def _private_dev() -> None:
    """A fresh /dev holding only the harmless nodes and the NVIDIA devices (no disks, no other hardware),
    with a private /dev/shm."""
    keep = ["null", "zero", "full", "random", "urandom", "tty"]
    keep += sorted(name for name in os.listdir("/dev") if name.startswith("nvidia"))
    handles = {name: os.open(f"/dev/{name}", os.O_PATH) for name in keep if os.path.exists(f"/dev/{name}")}
    linux.mount("tmpfs", "/dev", "tmpfs", linux.MS_NOSUID, "mode=755,size=1m")
    for name, handle in handles.items():
        target = f"/dev/{name}"
        if os.path.isdir(f"/proc/self/fd/{handle}"):
            os.mkdir(target)
        else:
            open(target, "w").close()
        linux.mount(f"/proc/self/fd/{handle}", target, None, linux.MS_BIND | linux.MS_REC)
        os.close(handle)
    os.mkdir("/dev/shm")
    linux.mount("tmpfs", "/dev/shm", "tmpfs", linux.MS_NOSUID | linux.MS_NODEV, "mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"/dev/{name}")


def _limits(limits: dict, tasks_before: int) -> None:
    """CPU time, file size, open files, and processes: the user's tasks now plus a headroom (RLIMIT_NPROC
    counts every task of the user id, threads included, not only the worker's)."""
    for name, value in (("RLIMIT_CPU", limits["cpu_s"]), ("RLIMIT_FSIZE", limits["file_mb"] << 20),
                        ("RLIMIT_NOFILE", limits["open_files"]),
                        ("RLIMIT_NPROC", tasks_before + limits["processes"])):
        kind = getattr(resource, name)
        _, hard = resource.getrlimit(kind)
        value = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(kind, (value, value))


def _count_tasks(uid: int) -> int:
    """Tasks (threads included) of `uid` on this machine."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry}/task"))
            except OSError:
                pass
    return count


def children_of(pid: int) -> list[int]:
    """The processes whose parent is `pid` (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    if int(stat.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    return found


def _end(child: int, status_read: int, signum: int | None) -> None:
    """Wait for the worker (kill it first when `signum`), kill every descendant left, and exit as it did
    (with the worker's status as init of a PID namespace passed it on, else this child's own)."""
    if signum is not None:
        _kill(child, signum)
    status = None
    while status is None:
        try:
            pid, raw = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            status = raw
    passed = os.read(status_read, 64)
    if passed:  # init's word for the worker's status; anything but a number was not init's: status unknown
        status = int(passed) if passed.isdigit() else None
    _reap_all()
    if status is None or os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status) if status is not None else 1)
    signum = os.WTERMSIG(status)
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled (setting them raises)
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)


def _kill(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def _reap_all() -> None:
    """SIGKILL every child (orphans come back here, this process being a subreaper) and reap them, round
    after round, until a scan finds none. With `pid` this finds none: /proc here is then the worker's namespace's
    (numbered apart from this process's pid), which is empty once its init is reaped (the kernel kills every task
    left there and waits for them before that init's end is reported)."""
    for _ in range(REAP_ROUNDS):
        left = children_of(os.getpid())
        if not left:
            break
        for pid in left:
            _kill(pid, signal.SIGKILL)
        for _ in left:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
        time.sleep(0)


if __name__ == "__main__":
    main(sys.argv)
