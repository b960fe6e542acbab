"""Isolation and builds: a candidate that crashes, hangs, exits, exhausts memory or prints anything is
contained by its worker process and named by one finding; C++ builds are cached by content, locked,
and reported; the private channel frames messages, notices EOF and honours its deadline.

Every evaluation here is real (a worker process per candidate, on the CPU with level2/51's `small`
preset). Cold C++ builds are the slow part (~20 s of one core each with torch's headers): one round, for
the session (conftest.py: `kerneljudge build` of the good, the broken and a shipped candidate at once);
the two evaluations racing on a fresh cache build an extension without torch's headers (~5 s).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import CANDIDATES, SEED, codes, parse_json

from kerneljudge import protocol
from kerneljudge import channel
from kerneljudge.isolation import WorkerFailure, WorkerProcess
from kerneljudge.options import WorkerOptions
from kerneljudge.pipeline import evaluate

ISO = CANDIDATES / "isolation"
#: Host pids written to a file outside the worker's folder: the fallback's containment, without the PID
#: namespace and the read-only view (tests/test_sandbox.py covers those).
FALLBACK = {"KERNELJUDGE_SANDBOX_OFF": "mount,pid"}
CPP = ISO / "cpp_ext.py"
BROKEN = ISO / "cpp_broken.py"
LIGHT = ISO / "cpp_light.py"


def judge(options, name: str, **worker):
    """One real evaluation of tests/candidates/isolation/NAME.py against the seed problem."""
    if worker:
        options = options.replace(worker=worker)
    return evaluate(SEED, ISO / f"{name}.py", options)


def only(result, code: str):
    """The one finding with this code (a Result or its JSON)."""
    found = [f for f in (result["findings"] if isinstance(result, dict) else [f.to_json() for f in result.findings])
             if f["code"] == code]
    assert len(found) == 1, f"expected one {code} finding, got codes {codes(result)}"
    return found[0]


def line_of(path: Path, text: str) -> int:
    """The 1-based line of `path` that contains `text`."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def alive(pid: int) -> bool:
    """Running (a zombie nobody reaped counts as dead: it runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_dead(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


# --- 1. what a candidate can do to its worker ------------------------------------------------------


def test_segfault_is_a_worker_crash_naming_sigsegv_with_the_output_tail(fast):
    result = judge(fast, "segfault")
    assert result.verdict == "error"
    crash = only(result, "worker-crashed")
    assert "SIGSEGV" in crash["message"] and "segmentation fault" in crash["message"]
    assert crash["stage"] == "check" and crash["details"]["signal"] == "SIGSEGV"
    assert "KJ-MARKER: about to segfault" in result.worker_output_tail  # printed just before the crash
    assert result.exit_code == 2


def test_sigabrt_is_a_worker_crash_naming_sigabrt(fast):
    result = judge(fast, "abort")
    assert result.verdict == "error"
    crash = only(result, "worker-crashed")
    assert "SIGABRT" in crash["message"] and crash["details"]["signal"] == "SIGABRT"
    assert "KJ-MARKER: about to abort" in result.worker_output_tail


def test_os_exit_names_the_exit_code_and_the_candidates_children_die(fast, tmp_path, monkeypatch):
    pidfile = tmp_path / "pids"
    monkeypatch.setenv("KJ_TEST_PIDFILE", str(pidfile))  # the worker inherits the judge's environment
    # host pids and a file outside the worker's folder: without the PID namespace and the read-only view
    # (the fallback's process-group kill and reaper; test_sandbox.py checks the namespace)
    result = judge(fast, "os_exit", sandbox_off=("mount", "pid"))
    assert result.verdict == "error"
    exit_finding = only(result, "candidate-exit")
    assert "code 7" in exit_finding["message"] and exit_finding["details"]["exit_code"] == 7
    assert exit_finding["stage"] == "check"
    assert "KJ-MARKER: about to os._exit" in result.worker_output_tail
    worker_pid, child_pid = map(int, pidfile.read_text().split())
    assert wait_dead([worker_pid, child_pid]) == [], "the worker's process group outlived the evaluation"


def test_sys_exit_is_a_candidate_exit_at_the_candidates_line(fast):
    result = judge(fast, "sys_exit")
    assert result.verdict == "error"
    message = only(result, "candidate-exit")["message"]
    assert "exit(3)" in message
    assert f"sys_exit.py:{line_of(ISO / 'sys_exit.py', 'sys.exit(3)')}" in message


def test_raise_in_forward_is_a_forward_error_with_file_and_line(fast):
    result = judge(fast, "raises")
    assert result.verdict == "error"
    error = only(result, "forward-error")
    assert "ValueError: kj-forward-boom" in error["message"]
    assert f"raises.py:{line_of(ISO / 'raises.py', 'raise ValueError')}" in error["message"]
    assert error["stage"] == "check"
    assert result.trials and not result.trials[0].passed


def test_error_found_inside_the_worker_also_carries_the_output_tail(fast):
    result = judge(fast, "raises")
    assert "KJ-MARKER: about to raise" in (result.worker_output_tail or "")


def test_one_huge_allocation_is_out_of_memory(fast):
    result = judge(fast, "oom_huge")
    assert result.verdict == "error"
    oom = only(result, "out-of-memory")
    assert "ran out of memory" in oom["message"] and "oom_huge.py:" in oom["message"]
    assert "4398046511104 bytes" in oom["message"]  # the allocator's own words are kept
    assert "worker-crashed" not in codes(result)


def test_gradual_growth_hits_the_memory_limit_as_out_of_memory(fast):
    result = judge(fast, "oom_gradual", memory_limit_mb=3000)
    assert result.verdict == "error"
    oom = only(result, "out-of-memory")
    assert f"oom_gradual.py:{line_of(ISO / 'oom_gradual.py', 'blocks.append')}" in oom["message"]
    assert "worker-crashed" not in codes(result) and "timeout" not in codes(result)  # the limit stopped it


def test_hang_is_stopped_at_the_timeout_with_its_whole_process_group(kj, tmp_path):
    pidfile = tmp_path / "pids"
    timeout = 6
    started = time.monotonic()
    rc, out, _ = kj("eval", SEED, str(ISO / "hang.py"), "--device", "cpu", "--json", "--no-timing", "--no-store",
                    "--timeout", str(timeout), env={"KJ_TEST_PIDFILE": str(pidfile), **FALLBACK}, timeout=120)
    wall = time.monotonic() - started
    result = parse_json(out)
    assert rc == 2 and result["verdict"] == "error"
    finding = only(result, "timeout")
    assert f"{timeout} s limit" in finding["message"] and finding["stage"] == "check"
    # stopped at the limit: never before it; after it, by far less than the minute a busy machine could add
    assert timeout - 1 < wall < timeout + 60, f"the hang was contained after {wall:.1f} s"
    assert "KJ-MARKER: spinning" in result["worker_output_tail"]
    assert wait_dead([int(p) for p in pidfile.read_text().split()]) == [], "the hung worker or its child survived"


def test_candidate_output_never_reaches_the_judges_json(kj):
    rc, out, err = kj("eval", SEED, str(ISO / "noisy.py"), "--device", "cpu", "--json", "--no-timing", "--no-store")
    result = parse_json(out)  # the whole of stdout is one JSON object: the judge's
    assert out.lstrip().startswith("{") and out.rstrip().endswith("}")
    assert "KJ-NOISE" not in out and "KJ-NOISE" not in err and '"results": []' not in out
    assert result["verdict"] == "fail" and not result["correct"]  # not the "pass" the candidate printed
    assert "wrong-output" in codes(result)
    assert rc == 1


def test_the_next_evaluation_in_the_same_command_still_runs(kj):
    rc, out, _ = kj("eval", SEED, str(ISO / "segfault.py"), str(ISO / "good.py"), "--device", "cpu", "--json",
                    "--no-timing", "--no-store")
    payload = parse_json(out)
    assert set(payload) == {"results"}
    crashed, good = payload["results"]
    assert crashed["verdict"] == "error" and "SIGSEGV" in only(crashed, "worker-crashed")["message"]
    assert crashed["candidate"]["path"].endswith("segfault.py")
    assert good["verdict"] == "pass" and good["candidate"]["path"].endswith("good.py")
    assert rc == 2  # the worst of the two


def test_a_worker_killed_from_outside_is_named_and_never_reused():
    with WorkerProcess(WorkerOptions(timeout_s=60)) as worker:
        assert worker.call(protocol.Ping("cpu"))["device"]["type"] == "cpu"
        os.kill(worker.process.pid, signal.SIGKILL)
        worker.process.wait(timeout=10)
        with pytest.raises(WorkerFailure) as failed:
            worker.call(protocol.Ping("cpu"))
        assert failed.value.finding.code == "worker-crashed"
        assert "SIGKILL" in failed.value.finding.message and "memory" in failed.value.finding.message
        with pytest.raises(WorkerFailure) as again:
            worker.call(protocol.Ping("cpu"))
        assert again.value.finding.code == "judge-error" and "no longer usable" in again.value.finding.message


# --- 3./4. builds, the build cache and its lock ----------------------------------------------------


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI with a wide console (Rich wraps long lines at 80 columns when not on a terminal)."""
    environment = {**os.environ, "COLUMNS": "1000", **(env or {})}
    return subprocess.run([sys.executable, "-m", "kerneljudge", *args], capture_output=True, text=True,
                          timeout=timeout, env=environment, check=False)


@pytest.fixture
def built(cpp_built):
    """`kerneljudge build GOOD BROKEN -j 2` into a fresh cache (conftest.py): the first cold build round."""
    return cpp_built


def test_build_reports_a_fresh_build_and_the_compilers_error_line(built):
    _, done, _ = built
    assert done.returncode == 2, done.stdout + done.stderr  # one of the two failed to compile
    lines = done.stdout.splitlines()
    assert any(line.startswith("ok") and "cpp_ext.py: built in" in line for line in lines), done.stdout
    assert any(line.startswith("error") and "cpp_broken.py" in line and "failed to compile" in line
               for line in lines), done.stdout
    compiler = [line for line in lines if "error:" in line and "kj_undeclared_identifier" in line]
    assert compiler and "main.cpp:" in compiler[0], done.stdout  # file:line:col: error: ... as gcc wrote it
    assert "ninja: build stopped" not in done.stdout


def test_second_build_is_a_cache_hit(built, kj):
    cache_dir, _, cold_s = built
    rc, out, err = kj("build", str(CPP), "--device", "cpu", "--cache-dir", str(cache_dir), "--json")
    assert rc == 0, out + err
    (outcome,) = json.loads(out)
    assert outcome["ok"] and outcome["build"]["cache"] == "hit"
    assert outcome["build"]["build_ms"] < cold_s * 1000 / 4  # loaded, not compiled (load slows both alike)
    assert outcome["build"]["extensions"] == ["kj_isolation_residual_gelu"]
    rc, out, _ = kj("build", str(CPP), "--device", "cpu", "--cache-dir", str(cache_dir), env={"COLUMNS": "1000"})
    assert rc == 0 and "cpp_ext.py: cache hit in" in out
    assert cold_s > 5  # the first round really compiled


def test_eval_after_build_is_a_fast_cache_hit_and_passes(built, fast):
    cache_dir, _, cold_s = built
    result = evaluate(SEED, CPP, fast.replace(cache_dir=cache_dir, probes=False))
    assert result.verdict == "pass", codes(result)
    assert result.build.cache == "hit" and result.build.build_ms < cold_s * 1000 / 4
    assert result.candidate["kinds"] == ["cpp"]


def test_a_new_python_forward_around_the_same_extension_is_a_cache_hit(built, fast, tmp_path):
    """The cache is keyed on what load_inline compiles, not on the candidate file around it."""
    cache_dir, _, cold_s = built
    source = CPP.read_text()
    old_return = "        return x + torch.nn.functional.gelu(z).unsqueeze(1)\n"
    assert old_return in source
    variant = tmp_path / "cpp_ext_new_forward.py"
    variant.write_text(source.replace(old_return, "        return torch.nn.functional.gelu(z)[:, None] + x\n"))
    options = fast.replace(cache_dir=cache_dir, probes=False)
    original, changed = evaluate(SEED, CPP, options), evaluate(SEED, variant, options)
    assert changed.candidate["sha256"] != original.candidate["sha256"]
    assert changed.verdict == "pass", codes(changed)
    assert changed.build.cache == "hit" and changed.build.cache_key == original.build.cache_key
    assert changed.build.extensions == ("kj_isolation_residual_gelu",)
    assert changed.build.build_ms < cold_s * 1000 / 4


def test_the_build_key_is_what_load_inline_and_load_compile(tmp_path):
    """The judge keys a worker's call on what it compiles: sources, functions, flags, name and the toolchain
    change the key; where it is built, or verbose, do not; a `load` source file by its content, as the worker
    read and sent it (the judge reads no file a worker names)."""
    from torch.utils.cpp_extension import load, load_inline

    from kerneljudge.extensions import Request
    from kerneljudge.worker.build import JudgeBuilds

    def key(function=load_inline, *positional, arch=None, **kwargs):
        asked = []
        builds = JudgeBuilds(lambda question: asked.append(question) or {"error": "not built here"}, arch)
        with pytest.raises(RuntimeError, match="not built here"):
            builds.wrap(function)(*positional, **kwargs)
        return Request.from_wire(asked[0]["build"]).key()

    args = {"name": "kj_k", "cpp_sources": ["int f();"], "functions": ["f"], "extra_cflags": ["-O1"]}
    assert key(**args) == key(**args, verbose=True, build_directory="/elsewhere")
    assert key(load_inline, "kj_k", ["int f();"], functions=["f"], extra_cflags=["-O1"]) == key(**args)
    for change in ({"cpp_sources": ["int g();"]}, {"functions": ["g"]}, {"extra_cflags": ["-O2"]},
                   {"name": "kj_other"}, {"extra_include_paths": ["/opt/include"]}, {"with_cuda": True}):
        assert key(**{**args, **change}) != key(**args), change
    assert key(**args, arch="9.0") != key(**args)

    source = tmp_path / "ext.cpp"
    source.write_text("int f();")
    first = key(load, "kj_l", [str(source)])
    source.write_text("int g();")  # `load` reads its sources from files: their content is the key
    assert key(load, "kj_l", [str(source)]) != first


@pytest.mark.parametrize("question, why", [
    ({"function": "system", "arguments": {"name": "kj_k"}}, "not a load_inline or load call"),
    ({"function": "load_inline", "arguments": {"name": "../kj_k"}}, "Python identifier"),
    ({"function": "load_inline", "arguments": {"cpp_sources": ["int f();"]}}, "Python identifier"),
    ({"function": "load", "arguments": {"name": "kj_l", "sources": [["../../x.cpp", "int f();"]]}}, "plain file names"),
    ({"function": "load", "arguments": {"name": "kj_l", "sources": ["/etc/passwd"]}}, "plain file names"),
    ({"function": "load_inline", "arguments": {"name": "kj_k"}, "arch": 9}, "architecture"),
])
def test_the_judge_builds_only_a_named_call_with_plain_file_names(question, why):
    """A worker's question is data it may have forged: the name and the file names become paths in the cache,
    and the judge reads no file a worker names (a compile error would quote it)."""
    from kerneljudge.extensions import BuildRefused, Request

    with pytest.raises(BuildRefused, match=why):
        Request.from_wire(question)


def test_extensions_load_as_torchs_own_load_inline_and_load_would(fast, tmp_path):
    """cpp_variants.py: one name built twice from two sources (the second loaded as kj_same_v1), a header on an
    include path relative to the candidate's folder, a `load` of a file whose header sits beside it, named `tmp`.
    The cache keeps each module alone: no worker reads another candidate's sources there."""
    cache = tmp_path / "variants-cache"
    result = evaluate(SEED, ISO / "cpp_variants.py", fast.replace(cache_dir=cache, probes=False))
    assert result.verdict == "pass", codes(result)
    assert result.build.cache == "miss" and result.build.extensions == ("kj_same", "kj_same_v1", "tmp")
    kept = sorted(path.relative_to(cache / "builds").parts[1:] for path in (cache / "builds").rglob("*")
                  if path.is_file())
    assert kept == sorted([("kj.complete",)] * 3 + [("kj_same", "kj_same.so"), ("kj_same_v1", "kj_same_v1.so"),
                                                     ("tmp", "tmp.so")])


def _unstarted_worker(cache_dir: Path) -> WorkerProcess:
    worker = WorkerProcess(WorkerOptions(cache_dir=cache_dir))
    worker.sandbox = None  # never started: its builder runs unsandboxed
    return worker


@pytest.mark.parametrize("question", [
    {"build": {"function": "load_inline", "arguments": {"name": "kj_k"}, "source_paths": 5}},
    {"build": {"function": "load", "arguments": {"name": "kj_l", "sources": [["a.cpp", ""]]}, "headers": 5}},
    {"build": {"function": "load_inline", "arguments": {"name": "kj_k"}, "arch": "9.0\x00"}},
    {"build": {"function": "load_inline", "arguments": {"name": "kj_k"}, "headers": [["a.h", ""]]}},
    {"build": {"function": "load", "arguments": {"name": "kj_l", "sources": [["a.h", ""]]}, "headers": [["a.h", ""]]}},
    {"progress": "not a build"},
    "not even a dict",
])
def test_a_forged_build_question_is_answered_with_an_error(tmp_path, question):
    """The question is data the candidate may have forged (any object in the worker can ask): a refusal comes
    back as the answer's error, never as an exception in the judge (in a batch it would end the batch)."""
    answer = _unstarted_worker(tmp_path / "cache")._answer(question, time.monotonic() + 60, None)
    assert set(answer) == {"error"} and "the judge does not build this" in answer["error"], answer


def test_a_build_the_judge_cannot_make_is_an_error_answer_too(tmp_path):
    """Whatever fails in the judge's hands (here the cache is a file, so nothing can be made in it) is the
    worker's build error."""
    (tmp_path / "cache").write_text("not a folder")
    question = {"build": {"function": "load_inline", "arguments": {"name": "kj_k", "cpp_sources": ["int f();"]}}}
    answer = _unstarted_worker(tmp_path / "cache")._answer(question, time.monotonic() + 60, None)
    assert set(answer) == {"error"} and "the judge's build failed" in answer["error"], answer


def test_the_builders_output_is_read_head_and_tail_and_its_time_is_bounded(tmp_path):
    """A builder that floods its output (its module's constructors run there) is read back 20 kB at most, the
    start of torch's message kept; one that outlives the worker's time is stopped."""
    from kerneljudge import extensions

    request = extensions.Request.from_wire({"function": "load_inline", "arguments": {"name": "kj_k"}})
    flood = ("import sys; sys.stdout.write(\"Error building extension 'kj_k': first\\n\" + 'x' * 50_000_000); "
             "sys.exit(3)")
    (tmp_path / "a").mkdir()
    error = extensions.run_builder(request, tmp_path / "a", 60, lambda command, staging, seconds: [
        sys.executable, "-c", flood])
    assert error.startswith("Error building extension 'kj_k': the build process ended with status 3: "
                            "Error building extension 'kj_k': first")
    assert len(error) < extensions.ERROR_HEAD_CHARS + extensions.ERROR_TAIL_CHARS + 200
    (tmp_path / "b").mkdir()
    started = time.monotonic()
    child = tmp_path / "child.pid"  # a compiler the builder started (outside the sandbox's PID namespace here)
    error = extensions.run_builder(request, tmp_path / "b", 1, lambda command, staging, seconds: [
        sys.executable, "-c", f"import subprocess, time; open({str(child)!r}, 'w').write(str(subprocess.Popen("
        f"['sleep', '60']).pid)); time.sleep(60)"])
    assert "ran past the 1 s left" in error and time.monotonic() - started < 30
    pid = int(child.read_text())
    for _ in range(100):  # SIGKILL sent: gone (or a zombie) within a few scans
        if not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the builder's child {pid} outlived it")


def test_a_link_the_builder_leaves_on_the_way_to_its_module_is_not_followed(tmp_path):
    """The builder can write its staging folder: a link at out/ to a folder hidden from workers, holding a file
    where the module would be, must not be copied into the cache (a final review's trial)."""
    from kerneljudge import extensions

    hidden = tmp_path / "hidden"
    (hidden / "kj_k").mkdir(parents=True)
    (hidden / "kj_k" / "kj_k.so").write_text("the results store")
    swap = f"import os; os.rmdir('../out'); os.symlink({str(hidden)!r}, '../out')"
    request = extensions.Request.from_wire({"function": "load_inline", "arguments": {"name": "kj_k"}})
    answer = extensions.build(request, tmp_path / "cache", lambda command, staging, seconds: [
        sys.executable, "-c", swap], seconds_left=lambda: 60)
    assert "left no module" in answer["error"]
    assert not (tmp_path / "cache" / "builds" / answer["key"]).exists()


def test_cache_info_clear_and_the_environment_variable(built, tmp_path):
    cache_dir = tmp_path / "cache"
    shutil.copytree(built[0], cache_dir)  # a copy: the other tests keep their cache whatever the order
    done = cli("cache", "info", "--json", "--cache-dir", str(cache_dir))
    info = json.loads(done.stdout)
    assert done.returncode == 0 and info["path"] == str(cache_dir)
    # the fixture's two built (the broken one's build leaves nothing), and whatever tests added to the session's cache
    assert info["sections"]["builds"]["entries"] >= 2
    assert info["sections"]["builds"]["bytes"] > 10_000  # the compiled .so is in there

    from_env = cli("cache", "info", "--json", env={"KERNELJUDGE_CACHE_DIR": str(cache_dir)})
    assert json.loads(from_env.stdout) == info

    cleared = cli("cache", "clear", "builds", env={"KERNELJUDGE_CACHE_DIR": str(cache_dir)})
    assert cleared.returncode == 0 and "removed: builds" in cleared.stdout
    after = json.loads(cli("cache", "info", "--json", "--cache-dir", str(cache_dir)).stdout)
    assert after["sections"]["builds"] == {"entries": 0, "bytes": 0}
    assert not (cache_dir / "builds").exists()


def test_two_evaluations_of_a_new_source_at_once_build_it_once(tmp_path, fast):
    """A cold build that takes seconds (cpp_light.py: pybind11 without torch's headers) raced by two judges
    (two threads of this process, each with its own worker process, as a batch's lanes judge)."""
    options = fast.replace(cache_dir=tmp_path / "race-cache", probes=False)
    with ThreadPoolExecutor(2) as judges:
        results = list(judges.map(lambda _: evaluate(SEED, LIGHT, options), range(2)))
    assert [r.verdict for r in results] == ["pass", "pass"], [codes(r) for r in results]
    builds = sorted((r.build for r in results), key=lambda b: b.cache)
    assert [b.cache for b in builds] == ["hit", "miss"]  # the lock: one built, the other waited and loaded
    hit, miss = builds
    assert hit.cache_key == miss.cache_key
    assert hit.build_ms < miss.build_ms / 4  # the wait for the other's build is not counted

    later = evaluate(SEED, LIGHT, options)
    assert later.verdict == "pass" and later.build.cache == "hit" and later.build.build_ms < miss.build_ms / 4


# --- 5. the channel ---------------------------------------------------------------------------------


@pytest.fixture(params=["pipe", "socket pair"])
def pipe(request):
    """One direction of a channel: a pipe (bytes only) or, as the judge makes them, a Unix socket pair."""
    read_fd, write_fd = os.pipe() if request.param == "pipe" else channel.pair()[::-1]
    fds = {"r": read_fd, "w": write_fd}
    yield fds
    for fd in fds.values():
        try:
            os.close(fd)
        except OSError:
            pass


def test_channel_messages_keep_their_boundaries(pipe):
    messages = [{"op": "ping", "n": 1}, {"findings": [], "poisoned": False, "x": [1.5, None, "é"]}, {}]
    for message in messages:
        channel.send(pipe["w"], message)
    assert [channel.receive(pipe["r"], time.monotonic() + 5) for _ in messages] == [
        {**m, "_blobs": []} for m in messages]


def test_channel_carries_a_message_far_larger_than_the_pipe_buffer(pipe):
    big = {"blob": "x" * (8 * 2**20), "items": list(range(50_000))}
    blobs = [bytes(range(256)) * 40_000, b"", b"\x00\xff"]  # raw bytes after the JSON, boundaries kept
    writer = threading.Thread(target=channel.send, args=(pipe["w"], big, blobs))
    writer.start()
    received = channel.receive(pipe["r"], time.monotonic() + 30)
    writer.join(timeout=30)
    assert received == {**big, "_blobs": blobs}


def test_channel_refuses_malformed_blob_sizes(pipe):
    channel._write_all(pipe["w"], channel._HEADER.pack(22) + b'{"_blobs": [-1, "x"]}\n'[:22])
    with pytest.raises(channel.ChannelClosed):
        channel.receive(pipe["r"], time.monotonic() + 5)


@pytest.mark.parametrize("body", [b"\xff not json", b"[" * 20_000], ids=["not-json", "nested-past-the-parser"])
def test_channel_calls_a_message_that_is_not_json_forged(pipe, body):
    """Raw bytes a candidate writes on its worker's channel are the worker's tampering, never an exception that
    ends the judge (and with it a batch)."""
    channel._write_all(pipe["w"], channel._HEADER.pack(len(body)) + body)
    with pytest.raises(channel.ChannelForged, match="not JSON"):
        channel.receive(pipe["r"], time.monotonic() + 5)


def test_channel_send_to_a_reader_that_reads_nothing_ends_at_its_deadline(pipe):
    """The judge's side is non-blocking: a worker that stops reading (a red team's flood of questions whose
    answers it never read held the judge in a write for ever) meets the worker's deadline instead."""
    os.set_blocking(pipe["w"], False)
    started = time.monotonic()
    with pytest.raises(channel.ChannelTimeout):
        for _ in range(1000):  # far past any pipe's or socket's buffer
            channel.send(pipe["w"], {"answer": {"error": "x" * 10_000}}, (), time.monotonic() + 0.5)
    assert time.monotonic() - started < 30


def test_channel_nonfinite_floats_and_odd_values_cross_as_data(pipe):
    channel.send(pipe["w"], {"nan": float("nan"), "inf": float("inf"), "path": Path("/x")})
    received = channel.receive(pipe["r"], time.monotonic() + 5)
    assert received["nan"] != received["nan"] and received["inf"] == float("inf") and received["path"] == "/x"


def test_channel_eof_is_channel_closed(pipe):
    os.close(pipe.pop("w"))
    with pytest.raises(channel.ChannelClosed):
        channel.receive(pipe["r"], time.monotonic() + 5)


def test_channel_eof_in_the_middle_of_a_message_is_channel_closed(pipe):
    os.write(pipe["w"], (100).to_bytes(4, "big") + b'{"op": "pi')
    os.close(pipe.pop("w"))
    with pytest.raises(channel.ChannelClosed):
        channel.receive(pipe["r"], time.monotonic() + 5)


def test_channel_rejects_a_length_beyond_its_limit(pipe):
    os.write(pipe["w"], (channel.MAX_MESSAGE_BYTES + 1).to_bytes(4, "big"))
    with pytest.raises(channel.ChannelClosed, match="exceeds the channel limit"):
        channel.receive(pipe["r"], time.monotonic() + 5)


def test_channel_deadline_is_channel_timeout(pipe):
    started = time.monotonic()
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(pipe["r"], started + 0.3)
    assert 0.25 < time.monotonic() - started < 30  # ended by the deadline (the upper bound: not by load)


def test_channel_deadline_applies_to_a_message_that_stops_half_way(pipe):
    os.write(pipe["w"], (100).to_bytes(4, "big") + b'{"op"')  # the writer stalls, the pipe stays open
    started = time.monotonic()
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(pipe["r"], started + 0.3)
    assert time.monotonic() - started < 30


def test_channel_deadline_uses_the_given_clock(pipe):
    channel.send(pipe["w"], {"op": "ping"})
    with pytest.raises(channel.ChannelTimeout):  # the deadline has passed on this clock, data or not
        channel.receive(pipe["r"], deadline=10.0, clock=lambda: 11.0)
    assert channel.receive(pipe["r"], deadline=10.0, clock=lambda: 9.0) == {"op": "ping", "_blobs": []}
