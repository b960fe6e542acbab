"""Which sandbox layers let CUDA start? (issue 13, a diagnostic for the GPU machine) For each set of layers
turned off, a process under the launcher imports torch and allocates on the GPU; prints OK or the error.
Run: PYTHONPATH=src python benchmarks/sandbox_cuda_layers.py   (one GPU; about 5 s a line)"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from kerneljudge import sandbox

PROBE = ("import torch; n = torch.cuda.device_count(); x = torch.ones(4, device='cuda'); "
         "print('OK', n, float(x.sum()))")
OFFS = [(), ("mount", "dev"), ("pid",), ("user",)]


def main() -> None:
    for off in OFFS:
        layers = sandbox.detect(tuple(sorted(off)))
        folder = tempfile.mkdtemp(prefix="kj-cuda-layers-")
        command = sandbox.launch_command([sys.executable, "-c", PROBE], layers=[n for n in layers.active
                                                                               if n in sandbox.LAUNCHED],
                                         writable=[folder], limits=sandbox.limits(120, 1024, 1024, 4096),
                                         judge_pid=os.getpid())
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=folder,
                              env=sandbox.launcher_env(dict(os.environ)))
        text = (done.stdout.strip() or done.stderr.strip().splitlines()[-1:] or ["?"])
        line = text if isinstance(text, str) else text[0]
        print(f"off={','.join(off) or '-':22} active={' '.join(n for n in layers.active if n in sandbox.LAUNCHED):34} "
              f"{line[:160]}", flush=True)


if __name__ == "__main__":
    main()
