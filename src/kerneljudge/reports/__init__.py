"""Reports on runs in the results store: metrics (pure), the tables built from them, the HTML page, and
KernelBench results brought in. `kerneljudge report` (cli_report.py) is the command."""
