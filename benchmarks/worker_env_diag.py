"""Device time of the shipped level2/51 Triton solution in the judge's timed loop, with one ingredient of
the worker's situation added at a time: OMP_WAIT_POLICY=PASSIVE, a bracketed profile of one call
beforehand (the op-trace probe), parameters loaded from relayed bytes, the probes' parameter changes.
Usage (GPU): PYTHONPATH=src python benchmarks/worker_env_diag.py   (runs each variant in a subprocess)
"""

from __future__ import annotations

import os
import subprocess
import sys

VARIANTS = ["plain", "passive", "profiled", "relayed", "replaced", "all"]


def child(variant: str) -> None:
    import glob
    import importlib.util

    import torch

    from kerneljudge import timing
    from kerneljudge.problem import load_problem
    from kerneljudge.proc import tensorwire
    from kerneljudge.proc.inputs import make_inputs
    from kerneljudge.proc.profile import profile_calls
    from kerneljudge.worker.build import import_problem

    device = torch.device("cuda")
    problem = load_problem("level2/51", preset=None, overrides=(), small_if_builtin=False)
    module = import_problem(str(problem.path), problem.source, problem.constants)
    path = glob.glob("src/kerneljudge/suite/solutions/level2/51_*/triton.py")[0]
    spec = importlib.util.spec_from_file_location("sol", path)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    torch.manual_seed(0)
    reference = module.Model(*module.get_init_inputs()).to(device)
    with torch.device(device):
        model = solution.ModelNew(*module.get_init_inputs())
    if variant in ("relayed", "replaced", "all"):
        names, tensors = zip(*reference.state_dict().items())
        meta, blobs = tensorwire.pack_values(list(tensors))
        model.load_state_dict(dict(zip(names, tensorwire.unpack_values(meta, blobs, device))), strict=False)
    else:
        model.load_state_dict(reference.state_dict(), strict=False)
    model = model.to(device).eval()
    sets = [make_inputs(module, s, device) for s in range(4)]
    if variant in ("profiled", "all"):
        profile_calls(model, sets[0], device, bracket=True)
    if variant in ("replaced", "all"):
        for name in ("gemm.weight", "gemm.bias", "subtract"):
            *owner_path, attr = name.split(".")
            owner = model
            for part in owner_path:
                owner = getattr(owner, part)
            old = getattr(owner, attr)
            setattr(owner, attr, torch.nn.Parameter(old.detach().clone(), requires_grad=old.requires_grad))
    timer = timing.cuda_event_timer(device, timing.L2Flusher.for_cuda_device(device), batch=4)
    samples = []
    with torch.inference_mode():
        for b in range(60):
            calls = [timing.IterationCall(lambda i: model(*sets[i % 4]), b * 4 + k) for k in range(4)]
            samples += timing.time_calls(timer, calls)
    print(f"{variant:9} device median {timing.Stats.from_samples(samples[80:]).median_ms:.4f} ms")


def main() -> None:
    if len(sys.argv) > 1:
        child(sys.argv[1])
        return
    for variant in VARIANTS:
        env = dict(os.environ)
        if variant in ("passive", "all"):
            env["OMP_WAIT_POLICY"] = "PASSIVE"
        subprocess.run([sys.executable, __file__, variant], env=env, check=False, timeout=120)


if __name__ == "__main__":
    main()
