"""Batches: many candidates judged by one scheduler (`kerneljudge run`, `api.evaluate_many`,
`KernelEnv.step_many`).

    discover.py   a KernelBench run folder, a folder of candidates for one problem, a JSONL manifest -> Jobs
    keys.py       resume keys: problem content, candidate content, options, hardware
    backend.py    the interface between the scheduler and where builds and judging run (Job, Lane, Backend)
    local.py      the local backend: builds in worker processes on the CPUs, lanes on the devices
    gate.py       lanes sharing a device: stages side by side, a timing alone
    scheduler.py  a build pool feeding lanes, each lane taking the next built candidate when free
    runner.py     one run from the top: skip what is done, schedule, journal and record each result
    journal.py    the run folder's results.jsonl: what is done (resume), written as each job ends
    export.py     eval_results.json (KernelBench's layout), CSV, summary
    display.py    live progress on a terminal, JSON lines when asked
"""
