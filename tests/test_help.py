"""The command line's help: each verb lists the options of the stages it runs and no others, every option
says what it does, and `history` piped into another program keeps each row on one line."""

from __future__ import annotations

import shutil

import click
import pytest
from click.testing import CliRunner
from conftest import CANDIDATES, SEED, parse_json

from kerneljudge.cli import main

TIMING = {"--budget-ms", "--cuda-graph", "--no-baselines", "--no-timing"}


def commands(group: click.Group = main, prefix: tuple[str, ...] = ()):
    """Every command under the main group, subcommands of subgroups included, as (path, command); those
    imported only when asked for (cli.LAZY_COMMANDS) too."""
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        yield (*prefix, name), command
        if isinstance(command, click.Group):
            yield from commands(command, (*prefix, name))


def option_names(command: click.Command) -> set[str]:
    return {name for p in command.params if isinstance(p, click.Option) for name in p.opts}


def help_text(*path: str) -> str:
    done = CliRunner().invoke(main, [*path, "--help"])
    assert done.exit_code == 0, done.output
    return done.output


def test_check_lists_no_timing_option_and_the_timing_verbs_do():
    check = main.commands["check"]
    assert not option_names(check) & TIMING
    assert {"--trials", "--protocol", "--no-probes", "--cache-dir"} <= option_names(check)
    assert not any(option in help_text("check") for option in TIMING)
    for verb in ("bench", "submit", "eval"):
        assert TIMING - {"--no-timing"} <= option_names(main.commands[verb]), verb
        assert "--budget-ms" in help_text(verb)
    refused = CliRunner().invoke(main, ["check", SEED, "--budget-ms", "100"])
    assert refused.exit_code == 2 and "No such option" in refused.output and "--budget-ms" in refused.output


@pytest.mark.parametrize("path,command", list(commands()), ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_every_option_of_every_command_has_a_description(path, command):
    missing = [p.opts[0] for p in command.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not missing, f"kerneljudge {' '.join(path)}: options without help: {missing}"
    shown = help_text(*path)
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.opts[-1] in shown


def test_history_piped_keeps_each_row_on_one_line(kj, tmp_path):
    name = "a_candidate_with_a_name_long_enough_to_be_cut_at_eighty_columns.py"
    shutil.copy(CANDIDATES / "core" / "wrong.py", tmp_path / name)
    rc, out, err = kj("check", SEED, str(tmp_path / name), "--device", "cpu", "--no-probes", "--trials", "1",
                      "--json")
    assert rc == 1, err
    sha = parse_json(out)["candidate"]["sha256"]
    rc, out, err = kj("history", env={"COLUMNS": "80"})  # stdout is a pipe; COLUMNS must not cut it either
    assert rc == 0, err
    (row,) = [line for line in out.splitlines() if name in line]
    assert f"{name} {sha[:8]}" in row and "check" in row and "fail" in row and "wrong-output" in row
    assert len(row.rstrip()) > 80
