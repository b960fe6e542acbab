"""The README's test command is the one CI runs: `.ci/run` ends with it, word for word, inside a virtual
environment it makes itself, so a dependency missing from pyproject.toml fails CI as it fails a newcomer."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def readme_test_command() -> str:
    """The one command of the README's fenced block introduced by 'Run the tests'."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^Run the tests.*?\n```bash\n(.*?)\n```", readme, re.MULTILINE | re.DOTALL)
    assert block, "the README lost its 'Run the tests' block"
    (command,) = block.group(1).splitlines()
    return command


def test_ci_runs_the_readme_test_command_in_a_fresh_virtual_environment():
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    assert script[-1] == readme_test_command()
    body = "\n".join(script)
    assert "set -euo pipefail" in body  # pytest's exit status is the script's
    assert re.search(r"python3? -m venv ", body) and "/bin/activate" in body
    assert body.index("/bin/activate") < body.index(script[-1])  # the command runs inside the new environment
