"""The fork server (spawn.py, proc/zygote.py): the referee and the worker are forked from a process that
has torch imported, and each starts as a freshly executed one would: its own descriptors only (none of
the server's, so candidate code cannot ask it for a process), its own environment, folder and temporary
folder. Where the server cannot run, or is turned off, processes are executed afresh.

The candidate prints what its process holds and fails to import, so the worker's output comes back.
"""

from __future__ import annotations

import json

import pytest
from conftest import CANDIDATES, SEED, codes

from kerneljudge import spawn
from kerneljudge.pipeline import evaluate

REPORTS = CANDIDATES / "forkserver" / "reports_process.py"


def process_report(options) -> dict:
    result = evaluate(SEED, REPORTS, options)
    assert result.verdict == "error" and result.worker_output_tail, codes(result)
    line = next(x for x in result.worker_output_tail.splitlines() if x.startswith("PROCESS "))
    return json.loads(line[len("PROCESS "):])


@pytest.mark.parametrize("fork_server", [True, False])
def test_the_worker_holds_only_its_own_descriptors_and_environment(fast, fork_server):
    seen = process_report(fast.replace(worker={"fork_server": fork_server}))
    assert seen["main"] == ("kerneljudge.proc.zygote" if fork_server else "kerneljudge.worker.__main__")
    sockets = [link for link in seen["fds"].values() if link.startswith("socket:")]
    assert len(sockets) == 2, seen["fds"]  # the channel's two ends; never the fork server's socket
    assert not [link for link in seen["fds"].values() if link.startswith("pipe:")], seen["fds"]
    assert set(seen["fds"]) >= {"0", "1", "2"} and seen["fds"]["0"] == "/dev/null"
    assert seen["fds"]["1"].endswith("output.log") and seen["fds"]["2"] == seen["fds"]["1"]
    assert seen["cwd"] == seen["tmpdir"] == seen["tempdir"]  # the worker's own folder, also for tempfile


def test_without_a_fork_server_processes_start_afresh_and_the_judge_says_so(fast, monkeypatch, capsys):
    def fails(self, env):
        raise spawn.ForkServerFailed("the fork server ended: ImportError: no torch here")

    monkeypatch.setattr(spawn, "_servers", spawn._Servers())
    monkeypatch.setattr(spawn.ForkServer, "__init__", fails)
    seen = process_report(fast)
    assert seen["main"] == "kerneljudge.worker.__main__"
    assert "fork server ended: ImportError: no torch here; processes start afresh" in capsys.readouterr().err
    result = evaluate(SEED, CANDIDATES / "core" / "correct.py", fast)  # and later evaluations run too
    assert result.verdict == "pass", codes(result)
