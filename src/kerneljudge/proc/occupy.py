"""The judge's own device work outside the timed intervals, run so that nothing else can run beside it.

Before each timed call the caller's stream flushes the L2 (a write of twice its size, tens of microseconds), and
before each batch it spins a little while the host launches the first call (proc/timed.py). A candidate's work on
another stream that runs during that time is neither inside a call's events nor in the batch's wall time beyond
the reference's, which has the same flushes: work left running after a call, or waiting for a watched call's new
inputs, could hide there (README, "A watched timed call"). Here that work occupies every thread slot of every
SM: it is launched as `blocks_per_sm` blocks per SM whose threads fill the SM, so no other kernel's block can be
resident beside it, and its blocks do nothing until all of them are resident: a block of the candidate's already
resident when it starts delays it instead, and a delay is in the batch's wall time, which the judge's clock
measures (stages/measure.py's cross-check).

One kernel (`OCCUPY_PTX`, loaded by the driver as the stream hold's watchdog is) does both: it writes a buffer
(the flush) and then spins until a time has passed since it started (the lead spin). Where the driver will not
load it, or the device's figures do not let its blocks fill the SMs, `Occupier.for_device` answers None and the
flush and spins are torch's (`fill_`, `torch.cuda._sleep`): the timing block says `"flush": "shared"`.
"""

from __future__ import annotations

import ctypes
import functools

import torch

from kerneljudge.proc import cudadriver

BARRIER_TIMEOUT_NS = 20_000_000  # a barrier that waits this long gives up (20 ms)


def _barrier(wait: bytes, done: bytes) -> bytes:
    """PTX of a barrier's leader part and its end (OCCUPY_PTX's `barrier(n)`): thread 0 (the others have branched to
    `done`) adds 1 to the counter and loops at `wait` until it reaches `wanted` or BARRIER_TIMEOUT_NS have passed;
    then the block's threads meet at `done`."""
    return b"""    atom.global.add.u32 old, [arrived], 1;
    mov.u64 start, %globaltimer;
""" + wait + b""":
    ld.volatile.global.u32 seen, [arrived];
    sub.s32 ahead, seen, wanted;
    setp.ge.s32 waiting, ahead, 0;
    @waiting bra """ + done + b""";
    mov.u64 now, %globaltimer;
    sub.u64 elapsed, now, start;
    setp.lt.u64 waiting, elapsed, """ + str(BARRIER_TIMEOUT_NS).encode() + b""";
    @waiting bra """ + wait + b""";
""" + done + b""":
    bar.sync 0;
"""


# All the blocks first wait at a barrier until every block of the launch is resident (a counter in device memory,
# `arrivals` the count it reaches then), so a block of the candidate's already resident when the kernel starts runs
# beside blocks that only wait: its time comes before the judge's work, not beside it. Then `vectors` 16-byte words of
# `buffer` are written (grid-stride), copied from `source` where it is not null, else `value` in every 32-bit word,
# and the blocks wait until `spin_ns` have passed since the barrier (the device's global timer). A second barrier
# lets them end together, so no block of the candidate's starts beside the last ones. A barrier gives up after
# BARRIER_TIMEOUT_NS (a GPU shared under MPS may never hold every block at once):
#     barrier(arrivals); start = globaltimer;
#     for (i = blockIdx.x * blockDim.x + threadIdx.x; i < vectors; i += gridDim.x * blockDim.x)
#         ((uint4*)buffer)[i] = source ? ((const uint4*)source)[i] : make_uint4(value, value, value, value);
#     while (globaltimer - start < spin_ns) nanosleep(500);
#     barrier(arrivals + gridDim.x);
# where barrier(n): __syncthreads(); thread 0 adds 1 to *counter and waits until *counter - n >= 0; __syncthreads().
# At most 32 registers a thread, so two blocks of 1024 threads fit one SM's 65536 registers.
OCCUPY_PTX = b"""
.version 7.0
.target sm_70
.address_size 64

.visible .entry kerneljudge_occupy(.param .u64 buffer, .param .u64 source, .param .u64 vectors, .param .u32 value,
                                   .param .u64 spin_ns, .param .u64 counter, .param .u32 arrivals)
.maxnreg 32
{
    .reg .pred more, copying, waiting, leader;
    .reg .b32 v, a, b, c, d, tid, ntid, ctaid, nctaid, wanted, seen, ahead, old;
    .reg .b64 base, from, count, i, stride, offset, address, limit, start, now, elapsed, thread, arrived;

    ld.param.u64 base, [buffer];
    ld.param.u64 from, [source];
    ld.param.u64 count, [vectors];
    ld.param.u32 v, [value];
    ld.param.u64 limit, [spin_ns];
    ld.param.u64 arrived, [counter];
    ld.param.u32 wanted, [arrivals];
    mov.u32 tid, %tid.x;
    mov.u32 ntid, %ntid.x;
    mov.u32 ctaid, %ctaid.x;
    mov.u32 nctaid, %nctaid.x;
    setp.eq.u32 leader, tid, 0;
    bar.sync 0;
    @!leader bra entered;
""" + _barrier(b"enter", b"entered") + b"""    mov.u64 start, %globaltimer;
    setp.ne.u64 copying, from, 0;
    mov.u32 a, v;
    mov.u32 b, v;
    mov.u32 c, v;
    mov.u32 d, v;
    mul.wide.u32 i, ctaid, ntid;
    cvt.u64.u32 thread, tid;
    add.u64 i, i, thread;
    mul.wide.u32 stride, nctaid, ntid;
fill:
    setp.lt.u64 more, i, count;
    @!more bra spin;
    shl.b64 offset, i, 4;
    @!copying bra store;
    add.u64 address, from, offset;
    ld.global.v4.u32 {a, b, c, d}, [address];
store:
    add.u64 address, base, offset;
    st.global.v4.u32 [address], {a, b, c, d};
    add.u64 i, i, stride;
    bra fill;
spin:
    mov.u64 now, %globaltimer;
    sub.u64 elapsed, now, start;
    setp.lt.u64 waiting, elapsed, limit;
    @!waiting bra spun;
    nanosleep.u32 500;
    bra spin;
spun:
    bar.sync 0;
    @!leader bra left;
    add.u32 wanted, wanted, nctaid;
""" + _barrier(b"leave", b"left") + b"""    ret;
}
"""

# CUdevice_attribute values (cuda.h)
MULTIPROCESSOR_COUNT = 16
MAX_THREADS_PER_MULTIPROCESSOR = 39
MAX_THREADS_PER_BLOCK = 1


@functools.cache
def _loaded(device_index: int) -> tuple[ctypes.c_void_p, int, int] | None:
    """(the kernel, blocks, threads a block) for the device, loaded once per process into torch's context of it;
    None where the driver refuses the kernel or its blocks would not fill every SM's thread slots."""
    try:
        driver = cudadriver.libcuda()
    except OSError:
        return None
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    with torch.cuda.device(device_index):  # its context current on this thread (made by the first allocation)
        torch.empty(1, device=torch.device("cuda", device_index))
        if (driver.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(OCCUPY_PTX)) != 0
                or driver.cuModuleGetFunction(ctypes.byref(function), module, b"kerneljudge_occupy") != 0):
            return None
        device = ctypes.c_int()
        if driver.cuDeviceGet(ctypes.byref(device), device_index) != 0:
            return None

        def attribute(which: int) -> int:
            value = ctypes.c_int()
            return value.value if driver.cuDeviceGetAttribute(ctypes.byref(value), which, device) == 0 else 0

        sms, per_sm, per_block = (attribute(a) for a in (MULTIPROCESSOR_COUNT, MAX_THREADS_PER_MULTIPROCESSOR,
                                                         MAX_THREADS_PER_BLOCK))
        if not (sms and per_sm and per_block):
            return None
        blocks_per_sm = -(-per_sm // per_block)
        threads = per_sm // blocks_per_sm
        resident = ctypes.c_int()
        occupancy = cudadriver.entry(driver, "cuOccupancyMaxActiveBlocksPerMultiprocessor",
                                     [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t])
        if (threads % 32 or threads * blocks_per_sm != per_sm
                or occupancy(ctypes.byref(resident), function, threads, 0) != 0 or resident.value < blocks_per_sm):
            return None  # its blocks would leave thread slots free (or not all fit at once)
    return function, sms * blocks_per_sm, threads


def load(device_index: int) -> bool:
    """Load the kernel now (the driver's compilation, about 0.1 s: outside every measured request, before any
    candidate code is imported); whether it is usable on this device."""
    return _loaded(device_index) is not None


class Occupier:
    """Launches the occupying kernel on the current stream: a buffer written (`fill`) or a wait (`spin_ms`)."""

    def __init__(self, function: ctypes.c_void_p, blocks: int, threads: int, device_index: int):
        self._function, self.blocks, self.threads = function, blocks, threads
        self._counter = torch.zeros(1, dtype=torch.int32, device=torch.device("cuda", device_index))
        self._arrivals = 0  # what the barriers' counter reaches once the last launch's blocks all arrived
        self._launch = cudadriver.libcuda().cuLaunchKernel
        self._launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self._launch.restype = ctypes.c_int

    @classmethod
    def for_device(cls, device: torch.device) -> "Occupier | None":
        index = device.index if device.index is not None else torch.cuda.current_device()
        loaded = _loaded(index)
        return cls(*loaded, index) if loaded is not None else None

    def fill(self, buffer: torch.Tensor, value: int) -> None:
        """Write `value` into every 32-bit word of `buffer` (contiguous, its size a multiple of 16 bytes)."""
        if not _in_vectors(buffer):
            raise ValueError("the occupying fill takes a contiguous buffer of 16-byte words")
        self._run(buffer.data_ptr(), 0, buffer.nbytes // 16, value, 0)

    def copy(self, target: torch.Tensor, source: torch.Tensor) -> None:
        """`target.copy_(source)`, by the occupying kernel where both are contiguous tensors of 16-byte words of
        the same type and shape (else torch's copy)."""
        if (target.dtype == source.dtype and target.shape == source.shape and _in_vectors(target)
                and _in_vectors(source)):
            self._run(target.data_ptr(), source.data_ptr(), target.nbytes // 16, 0, 0)
        else:
            target.copy_(source)

    def spin_ms(self, ms: float) -> None:
        """Occupy the device for `ms` (each block from its start)."""
        self._run(0, 0, 0, 0, int(ms * 1e6))

    def _run(self, address: int, source: int, vectors: int, value: int, spin_ns: int) -> None:
        entry = (self._arrivals + self.blocks) & 0xFFFFFFFF  # the entry barrier's count; the exit's is one grid on
        params = [ctypes.c_uint64(address), ctypes.c_uint64(source), ctypes.c_uint64(vectors),
                  ctypes.c_uint32(value & 0xFFFFFFFF), ctypes.c_uint64(spin_ns),
                  ctypes.c_uint64(self._counter.data_ptr()), ctypes.c_uint32(entry)]
        pointers = (ctypes.c_void_p * len(params))(*map(ctypes.addressof, params))
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        error = self._launch(self._function, self.blocks, 1, 1, self.threads, 1, 1, 0, stream, pointers, None)
        if error != 0:
            raise RuntimeError(f"the occupying kernel's launch failed: CUresult {error}")
        self._arrivals = (entry + self.blocks) & 0xFFFFFFFF


def _in_vectors(tensor: torch.Tensor) -> bool:
    """Whether the kernel can take the tensor's memory as 16-byte words."""
    return tensor.is_contiguous() and tensor.nbytes % 16 == 0 and tensor.data_ptr() % 16 == 0
