"""One tensor relayed as the judge relays it (sender -> judge -> receiver over two channels), as bytes in
the channel and as a sealed memory file: wall time per crossing, packing and unpacking included.
Usage: PYTHONPATH=src python benchmarks/transport.py [MIB] [cpu|cuda]
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

import torch

from kerneljudge import channel, sealed
from kerneljudge.proc import tensorwire


def crossed(fd_out: int, fd_in: int, message: dict, blobs: list) -> dict:
    writer = threading.Thread(target=channel.send, args=(fd_out, message, blobs))
    writer.start()
    got = channel.receive(fd_in)
    writer.join()
    return got


def relay_ms(x: torch.Tensor, device: torch.device) -> float:
    a, b = channel.pair()
    c, d = channel.pair()
    started = time.perf_counter()
    meta, blobs = tensorwire.pack_values([x])
    at_judge = crossed(a, b, {"v": meta}, blobs)
    del blobs
    at_receiver = crossed(c, d, {"v": at_judge["v"]}, at_judge["_blobs"])
    del at_judge
    (y,) = tensorwire.unpack_values(at_receiver["v"], at_receiver["_blobs"], device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = (time.perf_counter() - started) * 1e3
    assert torch.equal(x, y)
    for fd in (a, b, c, d):
        os.close(fd)
    return elapsed


def main() -> None:
    mib = int(sys.argv[1]) if len(sys.argv) > 1 else 64
    device = torch.device(sys.argv[2] if len(sys.argv) > 2 else "cpu")
    x = torch.randn(mib << 18, device=device)  # float32: MIB MiB
    threshold = sealed.MIN_BYTES
    for label, minimum in (("bytes in the channel", 1 << 62), ("sealed memory file", threshold)):
        sealed.MIN_BYTES = minimum
        times = [relay_ms(x, device) for _ in range(7)]
        print(f"{mib} MiB on {device}, {label:22}: median {statistics.median(times):8.1f} ms "
              f"(min {min(times):.1f}, max {max(times):.1f}) per relayed crossing")
    sealed.MIN_BYTES = threshold


if __name__ == "__main__":
    main()
