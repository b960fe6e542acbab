"""`kerneljudge doctor`: what the worker's sandbox can use on this machine, layer by layer, and why a layer
is off (the system refused it, or $KERNELJUDGE_SANDBOX_OFF turned it off). The same list is in every
result's `sandbox` block."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from kerneljudge import sandbox
from kerneljudge.options import default_sandbox_off


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def doctor_command(as_json: bool) -> None:
    """List the sandbox layers the worker (which runs candidate code) gets on this machine."""
    layers = sandbox.detect(default_sandbox_off())
    gpus = sorted(p.name for p in Path("/dev").glob("nvidia*"))
    facts = {"uid": os.getuid(), "gpu_devices": gpus, **layers.to_json()}
    if as_json:
        click.echo(json.dumps(facts))
        return
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("layer")
    table.add_column("state")
    table.add_column("what it does, or why it is off", overflow="fold")
    for name in sandbox.LAYERS + sandbox.JUDGE_SIDE:
        on = name in layers.active
        table.add_row(name, Text("active" if on else "off", style="green" if on else "yellow"),
                      sandbox.DESCRIPTIONS[name] if on else layers.inactive.get(name, ""))
    console = Console()
    console.print(table)
    console.print(Text(f"judge user id {facts['uid']}; GPU devices: {', '.join(gpus) or 'none'}; turn layers off "
                       "with KERNELJUDGE_SANDBOX_OFF=layer,layer (README: What the judge trusts)", style="dim"))
