"""The judge's side of its torch processes: spawn one, talk to it over the private channel, contain it.

Two roles run the same way: the candidate's worker (`python -m kerneljudge.worker`) and the referee
(`python -m kerneljudge.referee`, which never imports candidate code). A candidate can segfault, hang, exhaust
memory, call exit or print anything. The worker is a fresh
`python -m kerneljudge.worker` in its own session (so the judge can kill its whole process group),
with stdout and stderr captured to a file whose tail is attached to error results and one deadline
for its whole life (the worker limits its own address space on CPU runs: see worker/server.py). Whatever
happens, `call` returns the reply or raises WorkerFailure carrying a finding that names what happened.

The worker runs under the sandbox launcher (kerneljudge/sandbox/): namespaces, a read-only view of the
files with its own folder writable, limits, pids and memory cgroups, whichever this machine allows (its
extensions are built by the judge, on its ask, in a sandboxed builder of their own: extensions.py); when it
ends the launcher kills every descendant it left, and `close` compares the judge's package and the results
store with their snapshot (`breaches`). The referee is not sandboxed (it never runs candidate code) but keeps
its memory out of the worker's reach (PR_SET_DUMPABLE).

The worker never outlives the judge: leaving its context on an exception (an interrupt, SIGTERM turned
into an exception, a judge error) kills its process group at once, and a judge killed outright takes the
worker with it (the worker asks the kernel for SIGKILL when its parent dies, worker/__main__.py). The
kernel ties that signal to the *thread* that started the worker, so workers are started from one
thread that lives as long as the process (spawn.py), not from a pool thread that may end first. Most
are forked by the fork server (spawn.py, proc/zygote.py), which has torch imported already.
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kerneljudge import channel, extensions, findings, judgeimports, protocol, sandbox, spawn, store
from kerneljudge.memtally import MemoryTally
from kerneljudge.proc.lifeline import PARENT, with_parent
from kerneljudge.options import Options, WorkerOptions, default_cache_dir, memory_limit_bytes
from kerneljudge.sandbox.launch import SETUP_FAILED
from kerneljudge.errors import SetupError
from kerneljudge.records import Finding

TAIL_CHARS = 3000
KILL_GRACE_S = 5  # for the sandbox launcher to kill and reap the worker's processes before SIGKILL
# for a process's end to be reported after SIGKILL: a spare referee's never was once (the test suite under load on
# the 2-core VM, test_batch's pool closing), and the judge waited for it forever; it is left to its lifeline then
KILL_REAP_S = 30
# the processes the worker's code started, watched for CPU time with no call in flight (stray_cpu_ms): a window,
# the ticks (10 ms each) that are still quiet in one (5% of a core), and how long the threads probe looks again
# at busy ones before they are called so (an honest start-up's few seconds pass; after the timing, one window)
STRAY_WINDOW_S, STRAY_QUIET_TICKS, STRAY_PATIENCE_S = 1.0, 5, 15.0

class WorkerFailure(Exception):
    """The worker could not answer: it timed out, crashed or exited. `finding` says which."""

    def __init__(self, finding: Finding, output_tail: str):
        super().__init__(finding.message)
        self.finding = finding
        self.output_tail = output_tail


@contextmanager
def together(*processes: "WorkerProcess"):
    """The processes of one evaluation, entered and closed as one: on a normal end every channel is closed
    before any process is waited for, so they end at once (a GPU process's end took 0.13 s, one after the
    other at the end of every evaluation); on an exception each is killed (`WorkerProcess.__exit__`)."""
    with ExitStack() as stack:
        for process in processes:
            stack.enter_context(process)
        yield
        for process in processes:
            process.hang_up()


@dataclass(frozen=True)
class Pending:
    """A request sent and not yet answered: its kind, the nonce its reply echoes, and when the memory
    account saw it sent."""

    op: str
    nonce: str
    sent_at: int | None  # None: sent before the process joined an evaluation's memory account
    replied: Callable[[], None] = lambda: None  # what its `admit` asked to be told when the reply is taken


@dataclass
class Frozen:
    """What `WorkerProcess.frozen` saw of the worker's processes: those that kept running when stopped, and
    (after the block) those that used CPU time or appeared while all were stopped."""

    running: list[int] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)


def workers_folder() -> Path:
    """The parent of every worker's folder, this user's: hidden from workers and builders (`_private`). A path
    in the shared temporary folder: one made by anyone else, or open to others, is refused."""
    folder = Path(tempfile.gettempdir()) / f"kj-workers-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    made = os.lstat(folder)
    if not stat.S_ISDIR(made.st_mode) or made.st_uid != os.getuid() or made.st_mode & 0o077:
        raise SetupError(f"{folder} is not a folder of this user's alone (mode {stat.filemode(made.st_mode)}, "
                         f"owner {made.st_uid}): remove it, and the judge makes it again")
    return folder


class WorkerProcess:
    """One worker. Use as a context manager; `call(op, ...)` sends a request and waits for the reply."""

    def __init__(self, options: WorkerOptions, *, clock: Callable[[], float] = time.monotonic,
                 module: str = "kerneljudge.worker"):  # or REFEREE
        self.options = options
        self.module = module
        self.stage: str | None = None  # the pipeline stage its requests serve (set by the pipeline)
        self.clock = clock
        self.process: subprocess.Popen | spawn.Forked | None = None
        self.dead = False
        self.final_tail: str | None = None  # the output's tail, kept when close() removes the log
        self.log_fd: int | None = None  # the log as the judge made it (`start`), read by `output_tail`
        # held while the log is read or closed: a tail read from another thread never reads a number closed meanwhile
        # and reused by another file
        self.log_lock = threading.Lock()
        self.sandbox: sandbox.Layers | None = None  # the worker's sandbox layers (None: the referee)
        self.watch: sandbox.Watch | None = None
        self.cgroup: sandbox.Cgroup | None = None
        self.breaches: list[str] = []  # files of the judge the worker changed (sandbox.Watch)
        # the judge's package was mounted read-only for the worker: a change to it was made by another process
        self.package_read_only = False
        self.oom_kills = 0  # the worker's processes the kernel killed in its memory cgroup (counted when it ends)
        self.memory_limit_bytes: int | None = None  # that cgroup's limit, as applied when the worker started
        self.tally: MemoryTally | None = None  # the evaluation's memory account (memtally.py), when it keeps one
        self.pending: Pending | None = None  # the request sent whose reply is not collected yet (one at most)
        self.first_device: str | None = None  # the device a spare was sent to take before it was taken (a pool's)
        # asked before each request is sent, returns what to call once its reply is taken: where lanes share
        # a device, the lane's hold on its gate (batch/gate.py) for the request's time
        self.admit: Callable[[str], Callable[[], None]] | None = None
        # its processes that kept running, or ran, while another batch lane stopped them for its timing
        self.ran_while_stopped: list[int] = []
        self.stores_held: store.HeldOpen | None = None  # the hidden stores' journals, kept while it lives
        # it answered a request: its sandbox was set up, and an exit with the launcher's setup code is its own
        self.answered = False
        # it was asked to import the candidate: every reply from then on may be the candidate's (`_candidates_own`)
        self.candidate_loaded = False

    def __enter__(self) -> "WorkerProcess":
        if self.process is None:
            self.start()
        self.deadline = self.clock() + self.options.timeout_s  # a pre-started worker's time starts now
        return self

    def __exit__(self, exc_type, *exc_info) -> None:
        if exc_type is not None:  # interrupted, or the judge failed: the worker's request may still run
            self._kill()
        self.close()

    def start(self) -> None:
        judgeimports.load()  # before any candidate code runs: the judge imports nothing after it
        self.workdir = Path(tempfile.mkdtemp(prefix="kj-worker-", dir=workers_folder()))
        self.log_path = self.workdir / "output.log"
        # read back through this descriptor alone: the path is in the worker's own folder, where a candidate swapped
        # the file for a link to a path hidden from it (the judge read the results store into the result's output
        # tail) or for a FIFO (the judge waited on it for ever)
        self.log_fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        to_worker_r, to_worker_w = channel.pair()  # sockets: sealed blobs cross as descriptors
        from_worker_r, from_worker_w = channel.pair()
        env = sandbox.launcher_env(dict(os.environ))
        env["PYTHONUNBUFFERED"] = "1"
        # an idle process's OpenMP threads must not spin (OMP's default) while the other one is timed
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        command = [sys.executable, "-m", self.module, str(to_worker_r), str(from_worker_w), PARENT]
        try:
            if self.role == "worker" and sys.platform.startswith("linux"):
                command = self._sandboxed(command, env)
            with os.fdopen(os.dup(self.log_fd), "wb") as log:
                self.process = spawn.start(command, env=env, cwd=str(self.workdir), log=log,
                                           pass_fds=(to_worker_r, from_worker_w),
                                           fork_server=self.options.fork_server, warm=self.role == "referee")
        except BaseException:
            if self.cgroup is not None:  # made for a process that never started: close() will not see it
                self.cgroup.remove()
                self.cgroup = None
            self._release_stores()
            os.close(self.log_fd)
            self.log_fd = None
            raise
        os.close(to_worker_r)
        os.close(from_worker_w)
        self.write_fd, self.read_fd = to_worker_w, from_worker_r
        os.set_blocking(self.write_fd, False)  # a process that reads nothing cannot hold the judge past its deadline
        self.deadline = self.clock() + self.options.timeout_s

    def _sandboxed(self, command: list[str], env: dict) -> list[str]:
        """The worker's command under the sandbox launcher, in the layers this machine allows; its private
        temporary folder is its own workdir; the package and the store are watched from now on."""
        options = self.options
        sandbox.undumpable()
        self.stores_held = store.HeldOpen(options.stores)  # before the view is made: their journals are there
        self.sandbox = sandbox.detect(tuple(sorted(options.sandbox_off)))
        active = self.sandbox.active
        if sandbox.CGROUP in active or sandbox.MEMORY in active:
            self.cgroup = sandbox.Cgroup.create(
                options.max_processes if sandbox.CGROUP in active else None,
                memory_limit_bytes(options.memory_limit_mb) if sandbox.MEMORY in active else None)
            missing = [layer for layer, made in sandbox.made_layers(self.cgroup).items()
                       if layer in active and made is None]
            if missing:
                self.sandbox = sandbox.Layers(tuple(n for n in active if n not in missing),
                                              {**self.sandbox.inactive, **{n: "could not be made now" for n in missing}})
        # the store only where the worker could write it (without the read-only view: another evaluation
        # recording into the same store meanwhile looks the same, hence a warning, not a failure)
        self.watch = sandbox.Watch([sandbox.package_dir(), *(options.watched if "mount" not in self.sandbox.active
                                                            else ())])
        writable = [self.workdir, *options.writable]
        package = sandbox.package_dir()
        self.package_read_only = "mount" in self.sandbox.active and not any(
            package.is_relative_to(folder) or folder.is_relative_to(package)
            for folder in (Path(f).resolve() for f in writable))
        # what torch, triton and CUDA would write under the (read-only) home goes to the worker's own folder. Triton's
        # cache too, never shared: a worker planted a compiled module under the key of Triton's CUDA driver helper
        # (a key of Triton's own source, the same for every candidate), and a later worker's Triton loaded it
        env.update(TMPDIR=str(self.workdir), CUDA_CACHE_PATH=str(self.workdir / "nv-cache"),
                   TRITON_CACHE_DIR=str(self.workdir / "triton"))
        for folder in options.writable:
            Path(folder).mkdir(parents=True, exist_ok=True)
        return self._launched(command, writable, options.timeout_s, options.max_file_mb)

    def _launched(self, command: list[str], writable: list, seconds: float, file_mb: int) -> list[str]:
        """`command` under the launcher in the worker's layers and cgroups, `writable` its only writable folders,
        the results stores with their journals and the judge's private folders hidden (`_private`)."""
        options = self.options
        stores = [path for kept in options.stores for path in (kept, *store.journal_paths(kept))]
        return sandbox.launch_command(
            command, layers=self.sandbox.active, writable=writable,
            hidden=[*options.hidden, *stores, *self._private()],
            cgroup=self.cgroup, niceness=options.niceness,
            limits=sandbox.limits(seconds, file_mb, options.max_processes, options.max_open_files))

    @contextmanager
    def frozen(self):
        """Every process of the worker stopped (SIGSTOP) for the block and continued after it (its cgroups'
        processes, however they detached; else its session's): the reference is timed meanwhile, and nothing
        of the candidate's may load the host then. Yields a `Frozen`: the processes that kept running (continued
        by another's SIGCONT, or a tracer), and after the block those that used CPU time or appeared while
        stopped (all were stopped, so one of them was continued meanwhile): either is an attempt to run
        anyway. The time stopped is not the worker's. Linux only; elsewhere nothing is stopped."""
        seen = Frozen()
        if self.process is None or self.dead or not sys.platform.startswith("linux"):
            yield seen
            return
        tasks = self.cgroup.tasks if self.cgroup is not None else functools.partial(sandbox.session_tasks,
                                                                                    self.process.pid)
        stopped: list[int] = []
        started = self.clock()
        try:
            seen.running = sandbox.freeze(tasks, stopped)
            before = sandbox.cpu_ticks(stopped) if not seen.running else {}
            yield seen
            if before:
                after = sandbox.cpu_ticks(list(before))
                # a tick of slack: a thread leaving uninterruptible sleep runs a moment before it stops
                seen.ran = sorted({pid for pid, ticks in after.items() if ticks > before[pid] + 1}
                                  | (set(tasks()) - set(before)))
        finally:
            sandbox.thaw(stopped)
            self.extend_deadline(self.clock() - started)

    def stray_cpu_ms(self, patience_s: float) -> float:
        """CPU time the processes the worker's code started (sandbox.stray_ticks: however they detached, and the
        children they reaped) used over STRAY_WINDOW_S with no call in flight, or 0.0 where at most
        STRAY_QUIET_TICKS: candidate code running between the calls. A busy window is followed by another until
        one is quiet or `patience_s` is over, so a start-up that ends (torch.compile's compile workers import
        torch for 5-8 s of CPU) passes, as does a process left idle (a pool waiting for work); a process that
        only rests now and then is busy in every window. With none started there is no wait. Linux only."""
        if self.process is None or self.dead or not sys.platform.startswith("linux"):
            return 0.0
        pid_namespace = self.sandbox is not None and "pid" in self.sandbox.active
        patience_ends = self.clock() + patience_s
        while True:
            before, strays = sandbox.stray_ticks(self.process.pid, pid_namespace)
            if not strays:
                return 0.0
            time.sleep(STRAY_WINDOW_S)
            used = sandbox.stray_ticks(self.process.pid, pid_namespace)[0] - before
            if used <= STRAY_QUIET_TICKS:
                return 0.0
            if self.clock() >= patience_ends:
                return used * 1e3 / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def strays_said(cpu_ms: float) -> str:
        """`stray_cpu_ms`'s figure as a finding says it."""
        return (f"process(es) the candidate started (at import or in a call, however detached) used {cpu_ms:.0f} ms "
                f"of CPU time in {STRAY_WINDOW_S:g} s with no call in flight")

    def extend_deadline(self, seconds: float) -> None:
        """Time the judge kept the worker waiting (for the device's timing lock) is not the worker's time."""
        self.deadline += seconds

    def call(self, request: "protocol.Request", blobs: list | tuple = (), *,
             on_progress: Callable[[dict[str, Any]], None] | None = None,
             limit: tuple[float, str] | None = None) -> dict[str, Any]:
        """Send one request (with tensor blobs); raise WorkerFailure if the process cannot answer. The reply's
        blobs are under `_blobs`. What the judge does for the process meanwhile (its extension builds:
        `_answer`) is told to `on_progress`. `limit`: (seconds, why) this request may
        take at most, within the process's own deadline (past it the process is stopped: `timeout`)."""
        return self.collect(self.submit(request, blobs), on_progress=on_progress, limit=limit)

    def submit(self, request: "protocol.Request", blobs: list | tuple = ()) -> "Pending":
        """Send one request without waiting for its reply (`collect` takes it): how the judge lets the
        referee and the worker work at once where neither needs the other's answer (their start, the
        referee's setup beside the worker's build). A process answers one request at a time: the reply to
        one still in flight is taken (and dropped) first, as when a build failed before the referee's setup
        was collected and the memory report asks the referee next."""
        if self.pending is not None:
            self.collect(self.pending)
        op = self.stage or request.op  # what a failure names: the pipeline's stage, else the request
        if self.dead:  # (a worker said so: a poisoned device, or the candidate's word)
            code = "worker-fault" if self.candidate_loaded else "judge-error"
            raise WorkerFailure(Finding.of(code, f"{op}: the {self.role} is no longer usable", stage=op), "")
        if self.process is not None and self.process.poll() is not None:  # its descendants may not have died yet
            raise WorkerFailure(self._death(op, channel.ChannelClosed("the process had ended")), self.output_tail())
        replied = self.admit(request.op) if self.admit is not None else (lambda: None)
        try:
            pending = Pending(request.op, secrets.token_hex(8), self.tally.sent() if self.tally is not None else None,
                              replied)
            with self._failures(op):
                channel.send(self.write_fd, {**request.to_wire(), "nonce": pending.nonce}, blobs, self.deadline,
                             self.clock)
        except BaseException:
            replied()
            raise
        self.pending = pending
        self.candidate_loaded |= self.role == "worker" and request.op in (protocol.Build.op, protocol.CompileOnly.op)
        return pending

    def collect(self, pending: "Pending", *, on_progress: Callable[[dict[str, Any]], None] | None = None,
                limit: tuple[float, str] | None = None) -> dict[str, Any]:
        """The reply to a submitted request (see `call`, and its `limit`); a failure names the stage it is
        collected in."""
        op = self.stage or pending.op
        if pending is not self.pending:
            raise WorkerFailure(Finding.of("judge-error", f"{op}: the {self.role}'s reply to {pending.op} was taken "
                                           "already", stage=op), "")
        deadline = self.deadline if limit is None else min(self.deadline, self.clock() + limit[0])
        try:
            with self._failures(op, limit if deadline < self.deadline else None):
                reply = self._receive(op, pending.nonce, on_progress, deadline)
        finally:
            pending.replied()
        self.pending = None
        if self.candidate_loaded:
            reply = _candidates_own(reply, op)
        if reply.get("poisoned"):
            self.dead = True
        figures = reply.pop("_memory", None)
        if self.tally is not None and pending.sent_at is not None:
            self.tally.replied(self.role, pending.sent_at, figures)
        return reply

    @contextmanager
    def _failures(self, op: str, limit: tuple[float, str] | None = None):
        """The channel's failures during stage `op` as the WorkerFailure that says what happened (`limit`: the
        request's own, where it ends before the process's deadline)."""
        try:
            yield
        except channel.ChannelTimeout as exc:
            self._kill()
            ran_past = f"its {self.options.timeout_s:g} s limit" if limit is None else \
                f"the {limit[0]:.3g} s limit of one of its requests ({limit[1]})"
            raise WorkerFailure(Finding.of("timeout", f"the {self.role} ran past {ran_past} during stage {op} and "
                                           "was stopped", stage=op), self.output_tail()) from exc
        except channel.ChannelForged as exc:
            self._kill()
            code = "tampering" if self.role == "worker" else "judge-error"
            raise WorkerFailure(Finding.of(code, f"during stage {op} the {self.role} sent a malformed "
                                           f"message ({exc})", stage=op), self.output_tail()) from exc
        except (channel.ChannelClosed, BrokenPipeError) as exc:
            raise WorkerFailure(self._death(op, exc), self.output_tail()) from exc

    def _receive(self, op: str, nonce: str, on_progress, deadline: float) -> dict[str, Any]:
        """The reply to the request `nonce` by `deadline`, answering the process's questions before it (its
        extension builds, whose progress goes to `on_progress`)."""
        while True:
            message = channel.receive(self.read_fd, deadline, self.clock)
            self.answered = True
            if message.get("nonce") != nonce:  # a message the worker's server did not send for this request
                self._kill()
                raise WorkerFailure(Finding.of("tampering", f"during stage {op} the worker's channel carried a "
                                               "message that was not the reply to the judge's request (forged by "
                                               "candidate code)", stage=op), self.output_tail())
            if "ask" not in message:
                return message
            answer = self._answer(message["ask"], deadline, on_progress)
            channel.send(self.write_fd, {"answer": answer, "nonce": nonce}, (), deadline, self.clock)

    def _answer(self, question: Any, deadline: float, on_progress) -> dict[str, Any]:
        """The judge's answer to its worker's question: an extension built (extensions.py) into the cache the
        worker cannot write, in a builder in the worker's sandbox layers and cgroups, within its deadline. The
        question is data the candidate may have forged: whatever goes wrong is the answer's error, never the
        judge's."""
        try:
            if self.role != "worker" or not isinstance(question, dict):
                raise extensions.BuildRefused("the judge answers only its workers' build questions")
            request = extensions.Request.from_wire(question.get("build"))
            progress = (lambda message: on_progress({"message": message})) if on_progress is not None else \
                (lambda message: None)
            return extensions.build(request, self._cache_dir(), self._builder_sandboxed,
                                    seconds_left=lambda: deadline - self.clock(), progress=progress)
        except extensions.BuildRefused as exc:
            return {"error": f"Error building extension: the judge does not build this: {exc}"}
        except Exception as exc:  # noqa: BLE001 - a build the candidate made fail in the judge's hands
            return {"error": f"Error building extension: the judge's build failed: {type(exc).__name__}: {exc}"}

    def _builder_sandboxed(self, command: list[str], staging: Path, seconds: float) -> list[str]:
        """The builder's command in the worker's layers and cgroups (its processes and memory counted with the
        worker's, stopped and killed with them), the staging folder its only writable one."""
        if self.sandbox is None or not self.sandbox.active:
            return command
        return with_parent(self._launched(command, [staging], seconds,
                                          min(self.options.max_file_mb, extensions.BUILDER_FILE_MB)), os.getpid())

    def _cache_dir(self) -> Path:
        return self.options.cache_dir or default_cache_dir()

    def _private(self) -> list[Path]:
        """What neither a worker nor a builder sees (each sees its own folder alone inside them): every worker's
        folder (another lane's output, its Triton kernels; a socket there let a builder hand its worker a
        descriptor), the judge's locks (one held would stall every build of its key, or a device's timing) and
        its builds in progress (extensions.py)."""
        private = [workers_folder(), self._cache_dir() / "locks", self._cache_dir() / "staging"]
        for folder in private[1:]:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError:  # a cache that cannot be made: nothing is built or locked there either
                pass
        return private

    @property
    def role(self) -> str:
        return "referee" if self.module.endswith("referee") else "worker"

    def _death(self, op: str, exc: Exception) -> Finding:
        """Name how the process ended: a signal, an exit code, or a broken channel. The referee runs only the
        problem's code and ours, so its death is the problem's error, never the candidate's."""
        self.dead = True
        if self.role == "referee":
            self._kill()
            return Finding.of("problem-error", f"the referee (which runs the reference, never the candidate) ended "
                              f"during stage {op} with status {self.process.returncode} ({exc})", stage=op)
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._kill()
            return Finding.of("worker-crashed", f"the worker closed its channel during stage {op} ({exc}) and was "
                              "stopped", stage=op)
        if code == SETUP_FAILED and self.sandbox is not None and not self.answered:  # (candidate code runs after)
            return Finding.of("judge-error", f"the worker's sandbox could not be set up: {self.output_tail(500)}",
                              stage=op)
        if code == -signal.SIGKILL and self.cgroup is not None and self.cgroup.oom_kills():
            return Finding.of("out-of-memory", f"during stage {op} the kernel's out-of-memory killer ended the worker: "
                              f"its memory cgroup counted the kill (the limit of the worker's processes together: "
                              f"{self.cgroup.memory_bytes / 2**20:.0f} MiB)", stage=op)
        if code < 0:
            name = signal.Signals(-code).name
            in_cgroup = self.cgroup is not None  # which counted no out-of-memory kill (above)
            hint = {"SIGKILL": " (not by the memory limit: its memory cgroup counted no out-of-memory kill; by candidate "
                               "code or from outside the judge)" if in_cgroup else
                               " (killed from outside, often by the system when memory runs out)",
                    "SIGSEGV": " (a segmentation fault: an invalid memory access in native code)",
                    "SIGABRT": " (abort: a failed assertion or a fatal error in native code)",
                    "SIGBUS": " (a bus error: a misaligned or unmapped memory access)"}.get(name, "")
            return Finding.of("worker-crashed", f"the worker died from {name}{hint} during stage {op}", stage=op,
                              signal=name)
        return Finding.of("candidate-exit", f"the worker exited with code {code} during stage {op} "
                          "(exit, os._exit or a fatal error in candidate code)", stage=op, exit_code=code)

    def output_tail(self, chars: int = TAIL_CHARS) -> str:
        """The end of what the worker (and the candidate) printed (also after close())."""
        if self.final_tail is not None:
            return self.final_tail[-chars:]
        with self.log_lock:
            if self.log_fd is None:
                return ""
            size = os.fstat(self.log_fd).st_size
            return os.pread(self.log_fd, min(chars, size), max(0, size - chars)).decode(errors="replace")

    def kill(self) -> None:
        """Stop the process now (from another thread too: a call waiting on it fails at once)."""
        self._kill()

    def _kill(self) -> None:
        self.dead = True
        if self.process and self.process.poll() is None:
            if self.sandbox is not None:  # the launcher kills the worker and reaps every descendant first
                self._signal(os.kill, signal.SIGTERM)
                try:
                    self.process.wait(timeout=KILL_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
            self._signal(os.killpg, signal.SIGKILL)
            try:
                self.process.wait(timeout=KILL_REAP_S)
            except subprocess.TimeoutExpired:
                print(f"kerneljudge: process {self.process.pid} ({self.role}) was not seen to end {KILL_REAP_S} s "
                      "after SIGKILL; not waiting for it", file=sys.stderr)

    def _signal(self, send, signum: int) -> None:
        try:
            send(self.process.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass

    def hang_up(self) -> None:
        """Close the channel: the process ends once it sees that (`close` then waits for its end)."""
        for name in ("write_fd", "read_fd"):
            fd = getattr(self, name, None)
            if fd is not None:
                setattr(self, name, None)
                try:
                    os.close(fd)
                except OSError:
                    pass

    def close(self) -> None:
        self.hang_up()
        if self.process is not None:
            # it ends when its channel closes, unless it still runs a request whose reply no one collected
            # (the referee's setup, sent during a build that failed): that one is killed
            if self.pending is not None or not self._ended(timeout_s=10):
                self._kill()
            self._kill_leftovers()
        if self.watch is not None:
            self.breaches = self.watch.changes()
            self.watch = None
        if getattr(self, "workdir", None) is not None:
            self.final_tail = self.output_tail()
        with self.log_lock:
            if self.log_fd is not None:
                os.close(self.log_fd)
                self.log_fd = None
        shutil.rmtree(getattr(self, "workdir", ""), ignore_errors=True)
        self._release_stores()

    def _release_stores(self) -> None:
        if self.stores_held is not None:
            self.stores_held.close()
            self.stores_held = None

    def _ended(self, timeout_s: float) -> bool:
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _kill_leftovers(self) -> None:
        """Processes the candidate started in the worker's session die with it (the launcher has reaped
        its descendants already; this is for what a killed launcher left behind)."""
        self._signal(os.killpg, signal.SIGKILL)
        if self.cgroup is not None:
            self.oom_kills, self.memory_limit_bytes = self.cgroup.oom_kills(), self.cgroup.memory_bytes
            self.cgroup.remove()
            self.cgroup = None
        if sys.platform.startswith("linux"):
            sandbox.kill_session(self.process.pid)


def _candidates_own(reply: dict[str, Any], op: str) -> dict[str, Any]:
    """A worker's reply once the candidate's code is loaded in its process, with every fault it claims for the
    judge, the referee, the user or the problem (an `error`, a `usage_error`: a device not there, which ended a
    whole batch; a finding that does not blame the candidate) made the
    candidate's: that code could have written the reply (a red team sent its own, with the pending nonce read from
    the worker's frames) or caused it (an override of `state_dict` that raised in the worker's own code)."""
    found = reply.get("findings")
    claimed = [f for f in found if isinstance(f, dict) and not findings.blames_candidate(str(f.get("code")))] \
        if isinstance(found, list) else []
    if not claimed and not reply.get("error") and not reply.get("usage_error"):
        return reply
    said = "; ".join(f"{f.get('code')}: {f.get('message')}" for f in claimed) or \
        f"error: {reply.get('error') or reply.get('usage_error')}"
    fault = Finding.of("worker-fault", f"during stage {op} the worker, the candidate's code loaded in it, reported a "
                       f"fault not the candidate's ({said[:2000]}): the candidate's code wrote or caused it",
                       stage=op).to_json()
    kept = [f for f in found if f not in claimed] if isinstance(found, list) else []
    return {key: value for key, value in reply.items() if key not in ("error", "usage_error")} | \
        {"findings": [*kept, fault]}


WORKER = "kerneljudge.worker"
REFEREE = "kerneljudge.referee"


def first_ping(options: WorkerOptions, device: str, module: str) -> "protocol.Ping":
    """A process's first request: take `device` (the worker with its share of a GPU's memory)."""
    return protocol.Ping(device, options.memory_limit_mb, options.gpu_memory_share if module == WORKER else None)


class WorkerPool:
    """Pre-started processes for many evaluations in a row (an RL loop, the MCP server, `kerneljudge
    serve`, `api.*(pool=...)` in a script): a spare worker and a spare referee.

    A process executed afresh spends its first seconds importing torch (4.7 s with CUDA's start on an H200
    host); one forked by the fork server (spawn.py) starts in milliseconds, and a spare then saves the
    server's own start. A spare started when the previous evaluation ended (`fill`) is ready by the time
    the next one takes it,
    if anything came in between (an agent thinking, a server waiting for its next client). Spares are
    not started during an evaluation: a process importing torch would compete with its measurements.
    Every evaluation still gets fresh processes: a spare is never one that ran candidate code. Safe to
    share between threads (the MCP server's tools run on worker threads)."""

    def __init__(self, *, spares: int = 1):
        self.spares = spares
        self.ready: dict[str, list[WorkerProcess]] = {WORKER: [], REFEREE: []}
        self._lock = threading.Lock()

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def take(self, options: WorkerOptions, module: str = WORKER, device: str | None = None) -> WorkerProcess:
        """A process of `module` under `options` for `device`, to use as a context manager: a live spare if
        one is waiting (not one that took another device: a CPU run's memory limit would bind a process
        that started CUDA), else one that starts on use."""
        with self._lock:
            process = None
            while self.ready[module] and process is None:
                spare = self.ready[module].pop(0)
                if spare.process.poll() is None and spare.options.launch_key() == options.launch_key() and \
                        spare.first_device in (None, device):
                    process = spare
                else:
                    spare.close()
        if process is None:
            return WorkerProcess(options, module=module)
        process.options = options  # its deadline is set when the evaluation enters it
        return process

    def fill(self, options: WorkerOptions | None = None, device: str | None = None) -> None:
        """Start spares up to the pool's count (after each evaluation, under its options: the sandbox's
        writable folders are fixed when a worker starts; when a server starts, under the defaults). Given
        the `device` the next evaluation will likely use, each spare is sent its first request at once
        (`first_ping`: on a GPU, CUDA's start, a third of a second), answered while it waits to be taken;
        the evaluation's own ping then finds the device taken (WorkerProcess.submit takes the spare's
        answer first). A spare taken for another device takes that one too."""
        options = options or Options().worker_options()
        with self._lock:
            for module, ready in self.ready.items():
                while len(ready) < self.spares:
                    spare = WorkerProcess(options, module=module)
                    spare.start()
                    if device is not None:
                        spare.submit(first_ping(options, device, module))
                        spare.first_device = device
                    ready.append(spare)

    def settle(self, clock: Callable[[], float] = time.monotonic) -> float:
        """Wait until every spare has started (its imports done, answering on its channel), so that none is
        still importing torch while something is measured; a spare that cannot answer is dropped. The
        seconds waited."""
        started = clock()
        for module, ready in self.ready.items():
            with self._lock:
                spares = list(ready)
            for spare in spares:
                with self._lock:  # out of the pool while it is asked: another thread cannot take it meanwhile
                    if spare not in ready:
                        continue
                    ready.remove(spare)
                spare.deadline = spare.clock() + spare.options.timeout_s  # its start's deadline may be long past
                try:
                    spare.call(protocol.Ready())
                except WorkerFailure:
                    spare.close()
                    continue
                with self._lock:
                    ready.append(spare)
        return clock() - started

    def close(self) -> None:
        with self._lock:
            for ready in self.ready.values():
                for spare in ready:
                    spare.close()
                ready.clear()
