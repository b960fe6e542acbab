"""Does the stream hold of the watched timed calls work on this GPU (proc/streamhold.py)?

    PYTHONPATH=src python benchmarks/streamhold_check.py

Prints whether the driver accepted the hold, that work queued behind a hold waits for the host's lift
(an event behind it is not done 20 ms later, and is done right after the lift), and that a hold nobody
lifts is lifted by the device after RELEASE_MS (a synchronisation of the held stream returns then).
"""

from __future__ import annotations

import time

import torch

from kerneljudge.proc.streamhold import RELEASE_MS, StreamHold
from kerneljudge.proc.timed import _spin_cycles_per_ms


def main() -> None:
    device = torch.device("cuda", 0)
    torch.zeros(1, device=device)
    cycles = _spin_cycles_per_ms(device)
    started = time.perf_counter()
    hold = StreamHold.for_device(device, cycles)
    print(f"spin cycles per ms: {cycles:.0f}; hold: {'available' if hold else 'refused by the driver'} "
          f"(made in {1e3 * (time.perf_counter() - started):.1f} ms)")
    if hold is None:
        return
    print(f"release stream: {'the watchdog kernel, watching the word' if hold.watches_word else 'a fixed spin'}")
    behind = torch.cuda.Event()
    assert hold.hold()
    behind.record()
    time.sleep(0.02)
    waiting = not behind.query()
    started = time.perf_counter()
    hold.lift()
    behind.synchronize()
    print(f"queued work waited for the lift: {waiting}; done {1e3 * (time.perf_counter() - started):.3f} ms after it")
    for _ in range(3):
        assert hold.hold()
        hold.lift()
        started = time.perf_counter()
        torch.cuda.synchronize()
        print(f"a device-wide synchronisation right after a lift: {1e3 * (time.perf_counter() - started):.3f} ms")
    assert hold.hold()
    started = time.perf_counter()
    torch.cuda.current_stream().synchronize()  # nobody lifts it: the device does, after RELEASE_MS
    print(f"an unlifted hold ended after {1e3 * (time.perf_counter() - started):.1f} ms (RELEASE_MS {RELEASE_MS})")
    hold.lift()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
