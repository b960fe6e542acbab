"""`python -m kerneljudge` is the `kerneljudge` command."""

from kerneljudge.cli import main

main()
