"""What one output's crossing by CUDA IPC costs the referee (proc/deviceshare.copy_shared), part by part:
opening the exported allocation's handle, copying the bytes, closing the handle; for outputs of several
sizes, a child process exporting them as the worker does.

    PYTHONPATH=src python benchmarks/share_cost.py [--mib 4,64,256] [--repeats 20]   (GPU)
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import time

import torch

from kerneljudge.proc import deviceshare


def _exporting(sizes_mib: list[int], pipe) -> None:
    """The child: one tensor per size exported like a worker's output, held until the parent is done."""
    torch.cuda.set_device(0)
    exporter = deviceshare.Exporter()
    tensors = [torch.randn(mib << 18, device="cuda") for mib in sizes_mib]
    pipe.send([exporter.export(t) for t in tensors])
    pipe.recv()
    exporter.release()  # the allocations freed and made again: does a new allocation get a new handle?
    del tensors
    torch.cuda.empty_cache()
    tensors = [torch.randn(mib << 18, device="cuda") for mib in sizes_mib]
    pipe.send([exporter.export(t) for t in tensors])
    pipe.recv()


def _median_ms(times: list[float]) -> float:
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", default="4,64,256")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    sizes = [int(x) for x in args.mib.split(",")]
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=_exporting, args=(sizes, theirs))
    child.start()
    described = ours.recv()
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    driver = deviceshare._driver()
    for mib, description in zip(sizes, described):
        shape = [mib << 18]
        whole = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            deviceshare.copy_shared(description, torch.float32, shape, device)
            whole.append(time.perf_counter() - started)
        opens, copies, closes = [], [], []
        handle = deviceshare._Handle.from_buffer_copy(bytes.fromhex(description["handle"]))
        target = torch.empty(shape, dtype=torch.float32, device=device)
        for _ in range(args.repeats):
            base = ctypes.c_uint64()
            t0 = time.perf_counter()
            deviceshare._check(driver.open(ctypes.byref(base), handle, deviceshare.LAZY_ENABLE_PEER_ACCESS), "open")
            t1 = time.perf_counter()
            source = torch.as_tensor(deviceshare._Span(base.value + description["offset"], mib << 20), device=device)
            target.view(torch.uint8).copy_(source)
            torch.cuda.current_stream().synchronize()
            del source
            t2 = time.perf_counter()
            driver.close(base.value)
            t3 = time.perf_counter()
            opens.append(t1 - t0)
            copies.append(t2 - t1)
            closes.append(t3 - t2)
        print(f"{mib:5} MiB: copy_shared {_median_ms(whole):.2f} ms; open {_median_ms(opens):.2f}, copy "
              f"{_median_ms(copies):.2f}, close {_median_ms(closes):.2f} ms (medians of {args.repeats})")
    handle = deviceshare._Handle.from_buffer_copy(bytes.fromhex(described[0]["handle"]))
    first, second = ctypes.c_uint64(), ctypes.c_uint64()
    statuses = [driver.open(ctypes.byref(first), handle, deviceshare.LAZY_ENABLE_PEER_ACCESS),
                driver.open(ctypes.byref(second), handle, deviceshare.LAZY_ENABLE_PEER_ACCESS)]
    print(f"the same handle opened twice without closing: driver statuses {statuses}, same address "
          f"{first.value == second.value}")
    for base, status in zip((first.value, second.value), statuses):
        if status == 0:  # each open closed once (the driver counts them)
            driver.close(base)
    ours.send("again")
    again = ours.recv()
    for mib, before, after in zip(sizes, described, again):
        print(f"{mib:5} MiB freed and allocated again in the exporter: same handle {before['handle'] == after['handle']}, "
              f"same offset {before['offset'] == after['offset']}")
    ours.send("done")
    child.join()


if __name__ == "__main__":
    main()
