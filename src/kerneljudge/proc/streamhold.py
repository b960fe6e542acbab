"""A hold on the caller's CUDA stream that the host lifts once a watched timed call has returned.

Before a watched call (proc/timed.py) the device must not write the call's new inputs until the call has
returned on the host, however long the host takes to launch it: a candidate that inspects its call stack
spends milliseconds there, longer than a fixed wait (seen on the H200). After the lift the device still
waits a while (proc/timed.py) for work launched on other streams to run; work that did not wait for the
caller's stream has then read the old inputs, and its output is wrong.

The driver's stream memory operations do this: `cuStreamWaitValue32` makes the stream wait until a word of
pinned host memory reaches a value, and the host writes that value when the call returns. A call that waits
for its own stream inside `forward` (`.item()`, a synchronisation, in an extension that keeps Python's lock)
would wait forever, so a second, private stream writes the value too, at most `RELEASE_MS` later: such a call
loses that time, outside its timed interval (at most WATCHED_CALLS times). That stream's watchdog is a
one-thread kernel (`WATCHDOG_PTX`, loaded by the driver) that watches the word and ends as soon as the host
writes it, so the batch's device-wide synchronisation does not wait for it. Where the driver will not load
it, a fixed spin of RELEASE_MS takes its place, and each hold then costs its batch RELEASE_MS of wall time
(the synchronisation waits for the spin), outside every timed interval (seen on the H200: about 0.6 s an
evaluation). Where the driver lacks or refuses the memory operations, only the fixed wait of proc/timed.py is
left.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from kerneljudge.proc import cudadriver

WAIT_VALUE_GEQ = 0x0  # CU_STREAM_WAIT_VALUE_GEQ: wait until the word >= the value
RELEASE_MS = 100.0  # the device lifts a hold itself after this long

# The watchdog, in PTX: the driver compiles it for its GPU (106 ms in a fresh process on the H200, NVRTC took
# 100-550 ms; each worker has a driver cache of its own, so each pays it, when it takes its GPU: `load_watchdog`)
#     start = globaltimer;
#     while ((int)(*(volatile unsigned*)word - value) < 0 && globaltimer - start < timeout_us * 1000)
#         nanosleep(1000);
# (the word compared with the value as the stream wait's GEQ compares them: cyclically)
WATCHDOG_PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kerneljudge_hold_watchdog(.param .u64 word, .param .u32 value, .param .u32 timeout_us)
{
    .reg .pred lifted, waiting;
    .reg .b32 seen, wanted, timeout, ahead;
    .reg .b64 address, limit, start, now, elapsed;

    ld.param.u64 address, [word];
    ld.param.u32 wanted, [value];
    ld.param.u32 timeout, [timeout_us];
    mul.wide.u32 limit, timeout, 1000;
    mov.u64 start, %globaltimer;
watch:
    ld.volatile.u32 seen, [address];
    sub.s32 ahead, seen, wanted;
    setp.ge.s32 lifted, ahead, 0;
    @lifted bra done;
    nanosleep.u32 1000;
    mov.u64 now, %globaltimer;
    sub.u64 elapsed, now, start;
    setp.lt.u64 waiting, elapsed, limit;
    @waiting bra watch;
done:
    ret;
}
"""


@functools.cache
def load_watchdog(device_index: int) -> ctypes.c_void_p | None:
    """The watchdog kernel, loaded once per process and device into torch's context of that device (the worker
    does it when it takes its GPU, before its evaluation where it is a spare); None where the driver refuses
    it (the fixed spin is used then)."""
    try:
        driver = cudadriver.libcuda()
    except OSError:
        return None
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    with torch.cuda.device(device_index):  # its context current on this thread
        if (driver.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(WATCHDOG_PTX)) != 0
                or driver.cuModuleGetFunction(ctypes.byref(function), module, b"kerneljudge_hold_watchdog") != 0):
            return None
    return function


class StreamHold:
    def __init__(self, device: torch.device, driver: ctypes.CDLL, spin_cycles_per_ms: float):
        memory_op = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        self._wait = cudadriver.entry(driver, "cuStreamWaitValue32", memory_op)
        self._write = cudadriver.entry(driver, "cuStreamWriteValue32", memory_op)
        self._launch = driver.cuLaunchKernel
        self._launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self._launch.restype = ctypes.c_int
        with torch.cuda.device(device):
            self._word = torch.zeros(1, dtype=torch.int32, pin_memory=True)  # device-visible at the same address
            self._release_stream = torch.cuda.Stream(device)
        self._watchdog = load_watchdog(device.index or 0)
        self._release_cycles = int(RELEASE_MS * spin_cycles_per_ms)
        self._value = 0
        self.held = False

    @classmethod
    def for_device(cls, device: torch.device, spin_cycles_per_ms: float) -> "StreamHold | None":
        """A hold for `device`; None without the driver's stream memory operations (and `hold` answers False
        where the driver refuses them)."""
        try:
            return cls(device, cudadriver.libcuda(), spin_cycles_per_ms)
        except (OSError, AttributeError):
            return None

    @property
    def watches_word(self) -> bool:
        """Whether the release stream's wait ends at the host's lift (the watchdog kernel), not after a fixed spin."""
        return self._watchdog is not None

    def hold(self) -> bool:
        """Make the current stream wait here until `lift` (or RELEASE_MS); False if the driver refused."""
        self._value += 1
        address = ctypes.c_uint64(self._word.data_ptr())
        if self._wait(ctypes.c_void_p(torch.cuda.current_stream().cuda_stream), address, self._value,
                      WAIT_VALUE_GEQ) != 0:
            return False
        with torch.cuda.stream(self._release_stream):
            if not self._watch(address):
                torch.cuda._sleep(self._release_cycles)
            # a later hold's value may be lifted early by this late write only if the host already wrote it
            if self._write(ctypes.c_void_p(self._release_stream.cuda_stream), address, self._value, 0) != 0:
                self._word[0] = self._value
                return False
        self.held = True
        return True

    def _watch(self, address: ctypes.c_uint64) -> bool:
        """Launch the watchdog on the release stream; False without it (or if the launch was refused)."""
        if self._watchdog is None:
            return False
        params = [address, ctypes.c_uint32(self._value), ctypes.c_uint32(int(RELEASE_MS * 1000))]
        pointers = (ctypes.c_void_p * len(params))(*map(ctypes.addressof, params))
        return self._launch(self._watchdog, 1, 1, 1, 1, 1, 1, 0, ctypes.c_void_p(self._release_stream.cuda_stream),
                            pointers, None) == 0

    def lift(self) -> None:
        """Let the held stream go on (nothing if it is not held)."""
        if self.held:
            self._word[0] = self._value
            self.held = False
