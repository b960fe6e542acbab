"""Exploit (catalog rows 7 and 25; a hole a review found in the thirty-third session): honest except in the judge's
timing loop (seen on the call stack), where part of each product goes to a side stream that is never joined back.
The side part's first kernel waits on the device, for the call's new inputs where they are not there yet (a
watched call's: written after the call has returned on the host), else for the caller's own part to end. So the
side part runs during the judge's L2 flush before the next call (or during a watched call's own flush, after its
new inputs): outside every call's events, and, while it fits the flush, in no wall time the reference's batches
lack. For the square product of tests/square_product.py (a compute-bound kernel of about 40 us beside a flush of
about 30 us on an H100)."""
import inspect

import torch
import torch.nn as nn

SIDE_SHARE = 0.6  # of the product's rows
TIMEOUT_US = 50_000  # a wait on the device ends after this long whatever it saw

WAIT_SOURCE = r"""
extern "C" __global__ void wait_turn(const unsigned int* word, unsigned int* last, const unsigned int* marker,
                                     unsigned int turn, unsigned int timeout_us) {
    volatile const unsigned int* w = word;
    volatile const unsigned int* m = marker;
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    bool fresh = *w != *last;  // the call's new values were written before the call (an unwatched call)
    for (;;) {
        if (fresh ? (int)(*m - turn) >= 0 : *w != *last) break;
        __nanosleep(200);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        if (now - start > 1000ull * timeout_us) break;
    }
    if (!fresh) {  // the new values are being written now: let the copy end
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < 4000);
    }
    *last = *w;
}
"""


def _being_timed() -> bool:
    return any(f.function == "batch" and f.filename.endswith("timed.py") for f in inspect.stack())


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.wait = None
        self.last = {}  # input set (its second input's address) -> the last word seen in it, on the device

    def forward(self, A, B):
        if not _being_timed():
            return A @ B
        if self.wait is None:
            self.wait = torch.cuda._compile_kernel(WAIT_SOURCE, "wait_turn")
            self.stream = torch.cuda.Stream()
            self.marker = torch.zeros(1, dtype=torch.int32, device=A.device)
            self.turn = 0
        word = B.reshape(-1)[-1:].view(torch.int32)  # the last word the judge's refill writes
        last = self.last.get(B.data_ptr())
        if last is None:  # the set's first call: its values are not rewritten before it
            self.last[B.data_ptr()] = word.clone()
            return A @ B
        out = torch.empty(A.shape[0], B.shape[1], device=A.device)
        split = int(A.shape[0] * (1 - SIDE_SHARE))
        torch.matmul(A[:split], B, out=out[:split])
        self.turn += 1
        self.marker.fill_(self.turn)
        with torch.cuda.stream(self.stream):
            self.wait(args=[word, last, self.marker, self.turn, TIMEOUT_US])
            torch.matmul(A[split:], B, out=out[split:])
        for tensor in (A, B, out, last, self.marker):
            tensor.record_stream(self.stream)
        return out
