"""A hold on the caller's CUDA stream that the host lifts once a watched timed call has returned.

Before a watched call (proc/timed.py) the device must not write the call's new inputs until the call has
returned on the host, however long the host takes to launch it: a candidate that inspects its call stack
spends milliseconds there, longer than a fixed wait (seen on the H200). After the lift the device still
waits a while (proc/timed.py) for work launched on other streams to run; work that did not wait for the
caller's stream has then read the old inputs, and its output is wrong.

The driver's stream memory operations do this: `cuStreamWaitValue32` makes the stream wait until a word of
pinned host memory reaches a value, and the host writes that value when the call returns. A call that waits
for its own stream inside `forward` (`.item()`, a synchronisation, in an extension that keeps Python's lock)
would wait forever, so a second, private stream writes the value too, after `RELEASE_MS` of spinning on the
device: such a call loses that time, outside its timed interval (at most WATCHED_CALLS times). Where the
driver lacks or refuses these operations, only the fixed wait is left. Each hold costs its batch RELEASE_MS
of wall time (the batch's device-wide synchronisation waits for the watchdog's spin), outside every timed interval.
"""

from __future__ import annotations

import ctypes

import torch

WAIT_VALUE_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: wait until the word >= the value
RELEASE_MS = 100.0  # the device lifts a hold itself after this long


class StreamHold:
    def __init__(self, device: torch.device, driver: ctypes.CDLL, spin_cycles_per_ms: float):
        self._wait = getattr(driver, "cuStreamWaitValue32_v2", None) or driver.cuStreamWaitValue32
        self._write = getattr(driver, "cuStreamWriteValue32_v2", None) or driver.cuStreamWriteValue32
        for fn in (self._wait, self._write):
            fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
            fn.restype = ctypes.c_int
        with torch.cuda.device(device):
            self._word = torch.zeros(1, dtype=torch.int32, pin_memory=True)  # device-visible at the same address
            self._release_stream = torch.cuda.Stream(device)
        self._release_cycles = int(RELEASE_MS * spin_cycles_per_ms)
        self._value = 0
        self.held = False

    @classmethod
    def for_device(cls, device: torch.device, spin_cycles_per_ms: float) -> "StreamHold | None":
        """A hold for `device`; None without the driver's stream memory operations (and `hold` answers False
        where the driver refuses them)."""
        try:
            return cls(device, ctypes.CDLL("libcuda.so.1"), spin_cycles_per_ms)
        except (OSError, AttributeError):
            return None

    def hold(self) -> bool:
        """Make the current stream wait here until `lift` (or RELEASE_MS); False if the driver refused."""
        self._value += 1
        address = ctypes.c_uint64(self._word.data_ptr())
        if self._wait(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), address, self._value,
                      WAIT_VALUE_GEQ) != 0:
            return False
        with torch.cuda.stream(self._release_stream):
            torch.cuda._sleep(self._release_cycles)
            # a later hold's value may be lifted early by this late write only if the host already wrote it
            if self._write(ctypes.c_void_p(self._release_stream.cuda_stream), address, self._value, 0) != 0:
                self._word[0] = self._value
                return False
        self.held = True
        return True

    def lift(self) -> None:
        """Let the held stream go on (nothing if it is not held)."""
        if self.held:
            self._word[0] = self._value
            self.held = False
