#!/usr/bin/env python
"""How fast a parameter can be parked in host memory and brought back (referee/session.RefereeSession.park): the
device-to-host and host-to-device copies of one tensor through pageable memory (what the park does: level3/2's 8.6 GB
of parameters, 18 parks and unparks, took 23 s of a 50 s evaluation on an H100), through memory pinned by torch's
host allocator (kept by torch for the process's life), and through pageable memory registered with CUDA for the copy
(`cudaHostRegister`, then unregistered: given back like any pageable memory), its registration's cost included.
Usage: PYTHONPATH=src python benchmarks/park_copies.py [--gib 1,4]
"""

from __future__ import annotations

import argparse
import time

import torch

GIB = 2**30


def timed_s(work) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    work()
    torch.cuda.synchronize()
    return time.perf_counter() - start


def registered(host: torch.Tensor) -> None:
    code = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), host.untyped_storage().nbytes(), 0)
    assert int(code) == 0, code


def unregistered(host: torch.Tensor) -> None:
    code = torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
    assert int(code) == 0, code


def ways(on_device: torch.Tensor) -> dict:
    """Each way's (copy out, copy back), the host tensor held between them in `held`."""
    held: dict[str, torch.Tensor] = {}

    def pageable_out():
        held["host"] = on_device.to("cpu", copy=True)

    def pinned_out():
        held["host"] = torch.empty(on_device.shape, dtype=on_device.dtype, pin_memory=True)
        held["host"].copy_(on_device)

    def registered_out():
        held["host"] = torch.empty(on_device.shape, dtype=on_device.dtype)
        registered(held["host"])
        held["host"].copy_(on_device)

    def back():
        on_device.copy_(held["host"])

    def registered_back():
        back()
        unregistered(held.pop("host"))
    return {"pageable (.to)": (pageable_out, back), "pinned (host allocator)": (pinned_out, back),
            "registered (+register, unregister)": (registered_out, registered_back)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", default="1,4")
    args = parser.parse_args()
    print(f"{'GiB':>4} {'way':36} {'out s':>7} {'back s':>7} {'GB/s out':>9} {'GB/s back':>9}")
    for gib in (float(g) for g in args.gib.split(",")):
        on_device = torch.rand(int(gib * GIB) // 4, device="cuda")
        nbytes = on_device.numel() * 4
        for name, (out, back) in ways(on_device).items():
            out_s, back_s = timed_s(out), timed_s(back)
            print(f"{gib:4.1f} {name:36} {out_s:7.3f} {back_s:7.3f} {nbytes / out_s / 1e9:9.1f} "
                  f"{nbytes / back_s / 1e9:9.1f}", flush=True)
        on_device = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
