"""`kerneljudge serve`: the verbs evaluate through a running server, fall back when they must, and the
server outlives bad candidates, stops cleanly and never answers for a different environment."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import CANDIDATES, SEED, codes, parse_json

from kerneljudge import daemon

GOOD = CANDIDATES / "core" / "correct.py"
SEGFAULT = CANDIDATES / "isolation" / "segfault.py"


def start_server(socket_path: Path, log_path: Path, cwd: Path) -> subprocess.Popen:
    """`kerneljudge serve` in another working folder (its workers' folders under it too); returns once
    it answers."""
    (cwd / "tmp").mkdir(exist_ok=True)
    with open(log_path, "w") as log:
        server = subprocess.Popen([sys.executable, "-m", "kerneljudge", "serve", "--socket", str(socket_path)],
                                  stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                                  env={**os.environ, "TMPDIR": str(cwd / "tmp"),
                                       "KJ_TEST_PIDFILE": str(cwd / "hang.pids"),  # hang.py says it spins
                                       "KERNELJUDGE_SANDBOX_OFF": "mount"})  # ... in a file outside its folder
    deadline = time.monotonic() + 60
    while daemon.server_status(socket_path) is None:
        assert server.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "the server did not come up"
        time.sleep(0.1)
    return server


def serving(tmp_path: Path):
    folder = tmp_path / "run"
    folder.mkdir()
    socket_path = tmp_path / "sock" / "judge.sock"
    process = start_server(socket_path, tmp_path / "serve.log", folder)
    yield process, socket_path, tmp_path / "serve.log", folder
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One server for the tests that only ask it to evaluate (each counts its own evaluations): it
    outlives every candidate they send it."""
    yield from serving(tmp_path_factory.mktemp("server"))


@pytest.fixture
def own_server(tmp_path):
    """A server for one test only (it stops it)."""
    yield from serving(tmp_path)


def evaluations(socket_path: Path) -> int:
    return daemon.server_status(socket_path)["evaluations"]


def test_verbs_evaluate_through_the_server_and_it_outlives_a_crash(kj, server):
    process, socket_path, log, _ = server
    env = {"KERNELJUDGE_SOCKET": str(socket_path)}
    before, logged = evaluations(socket_path), log.read_text().count("check ")
    relative = os.path.relpath(GOOD)  # the server runs in another folder: the client makes paths absolute
    rc, out, err = kj("check", SEED, relative, "--device", "cpu", "--json", env=env)
    assert rc == 0 and parse_json(out)["verdict"] == "pass", err
    rc, out, _ = kj("check", SEED, str(SEGFAULT), "--device", "cpu", "--json", env=env)
    assert rc == 2 and "worker-crashed" in codes(parse_json(out))
    rc, out, err = kj("check", SEED, str(GOOD), "--device", "cpu", env=env)  # the human report
    assert rc == 0 and "PASS" in out and "evaluated by `kerneljudge serve`" in err, (out[-3000:], err[-2000:])
    assert evaluations(socket_path) == before + 3
    assert log.read_text().count("check ") == logged + 3
    # a usage error comes back as the same message a local evaluation gives
    rc, out, err = kj("check", SEED, str(GOOD), "--device", "cpu", "--preset", "nope", env=env)
    _, _, local_err = kj("check", SEED, str(GOOD), "--device", "cpu", "--preset", "nope", "--no-server",
                         env=env)
    assert rc == 2 and "nope" in err and err == local_err
    # --no-server evaluates here
    rc, out, _ = kj("check", SEED, str(GOOD), "--device", "cpu", "--json", "--no-server", env=env)
    assert rc == 0 and evaluations(socket_path) == before + 3


def test_a_client_with_another_environment_evaluates_itself(kj, server):
    _, socket_path, _, _ = server
    before = evaluations(socket_path)
    rc, out, err = kj("check", SEED, str(GOOD), "--device", "cpu", "--json",
                      env={"KERNELJUDGE_SOCKET": str(socket_path), "CUDA_VISIBLE_DEVICES": "7"})
    assert rc == 0 and parse_json(out)["verdict"] == "pass"
    assert "another $CUDA_VISIBLE_DEVICES" in err and "evaluating in this process" in err
    assert evaluations(socket_path) == before


def test_the_server_stops_cleanly_and_a_stale_socket_is_harmless(kj, own_server, tmp_path):
    killed, socket_path, _, _ = own_server
    killed.kill()
    killed.wait()
    assert socket_path.exists()  # left behind by a server that died
    rc, out, _ = kj("check", SEED, str(GOOD), "--device", "cpu", "--json",
                    env={"KERNELJUDGE_SOCKET": str(socket_path)})
    assert rc == 0 and parse_json(out)["verdict"] == "pass"  # evaluated here
    again = start_server(socket_path, tmp_path / "again.log", tmp_path)  # replaces the stale socket
    try:
        rc, _, err = kj("serve", "--socket", str(socket_path))
        assert rc == 2 and "already listens" in err
        again.send_signal(signal.SIGTERM)
        assert again.wait(timeout=30) == 0 and not socket_path.exists()
    finally:
        if again.poll() is None:
            again.kill()
            again.wait()


def test_a_socket_folder_open_to_others_is_never_used(kj, tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    socket_path = folder / "judge.sock"
    rc, _, err = kj("serve", "--socket", str(socket_path))
    assert rc == 2 and "closed to others" in err
    forged = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # anyone could have put a listener there
    forged.bind(str(socket_path))
    forged.listen()
    with forged:
        rc, out, err = kj("check", SEED, str(GOOD), "--device", "cpu", "--json",
                          env={"KERNELJUDGE_SOCKET": str(socket_path)})
    assert rc == 0 and parse_json(out)["verdict"] == "pass"  # evaluated here, not by whoever listens
    assert "closed to others" in err


def test_paths_mean_what_they_mean_to_the_client(kj, server):
    """A relative path the client does not have is missing, even when the server's folder has one."""
    _, socket_path, _, server_folder = server
    (server_folder / "only_there.py").write_text(GOOD.read_text())
    env = {"KERNELJUDGE_SOCKET": str(socket_path)}
    before = evaluations(socket_path)
    rc, out, _ = kj("check", SEED, "only_there.py", "--device", "cpu", "--json", env=env)
    _, local, _ = kj("check", SEED, "only_there.py", "--device", "cpu", "--json", "--no-server", env=env)
    served = parse_json(out)
    assert rc == 2 and "candidate-invalid" in codes(served) and codes(served) == codes(parse_json(local))
    message = next(f["message"] for f in served["findings"] if f["code"] == "candidate-invalid")
    assert str(Path.cwd() / "only_there.py") in message and evaluations(socket_path) == before + 1


def test_bad_requests_and_a_busy_server(kj, server, tmp_path):
    _, socket_path, log, folder = server
    before = evaluations(socket_path)
    for raw in (b"\x00\x00\x00\x02[]", b"\x00\x00\x00\x05{nope", b"\x00\x00"):  # not an object, not JSON, cut
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.connect(str(socket_path))
            client.sendall(raw)
            client.shutdown(socket.SHUT_WR)
            client.recv(1024)
    assert evaluations(socket_path) == before  # still serving
    env = {**os.environ, "KERNELJUDGE_SOCKET": str(socket_path), "KERNELJUDGE_STORE": str(tmp_path / "r.sqlite"),
           "KERNELJUDGE_SANDBOX_OFF": "mount"}  # the client's options: hang.py writes outside its folder
    slow = subprocess.Popen([sys.executable, "-m", "kerneljudge", "check", SEED, str(CANDIDATES / "isolation" / "hang.py"),
                             "--device", "cpu", "--timeout", "5", "--json"], env=env, stdout=subprocess.PIPE, text=True)
    spinning, deadline = folder / "hang.pids", time.monotonic() + 60
    while not spinning.exists():  # the server is running it once its worker spins (a fixed sleep races a busy machine)
        assert slow.poll() is None and time.monotonic() < deadline, "the server never ran hang.py"
        time.sleep(0.05)
    rc, out, err = kj("check", SEED, str(GOOD), "--device", "cpu", "--json", env={"KERNELJUDGE_SOCKET": str(socket_path)})
    assert rc == 0 and parse_json(out)["verdict"] == "pass" and "waiting for the judge server" in err
    assert codes(parse_json(slow.communicate(timeout=60)[0])) >= {"timeout"}
    assert evaluations(socket_path) == before + 2


def test_serve_never_replaces_a_file_that_is_not_a_socket(kj, tmp_path):
    folder = tmp_path / "private"
    folder.mkdir(mode=0o700)
    notes = folder / "notes.txt"
    notes.write_text("mine")
    rc, _, err = kj("serve", "--socket", str(notes))
    assert rc == 2 and "not a socket" in err and notes.read_text() == "mine"
