"""Large tensors cross as sealed memory files (`kerneljudge.sealed`): bit-exact, nothing left behind, and a
descriptor that is not a sealed file of the stated size is refused by the judge, not believed."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
from pathlib import Path

import pytest
import torch
from conftest import CANDIDATES

from kerneljudge import api, channel, sealed
from kerneljudge.proc import tensorwire

pytestmark = pytest.mark.skipif(not sealed.AVAILABLE, reason="memfd_create and file seals are Linux only")

RELU = "level1/19"
HONEST = Path(__file__).parents[1] / "src/kerneljudge/suite/solutions/level1/19_ReLU/pytorch.py"
LARGE = (("batch_size", "512"), ("dim", "1024"))  # 2 MiB tensors: above sealed.MIN_BYTES


def memory_files() -> int:
    """This process's open descriptors of sealed blobs."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            count += "kerneljudge-blob" in os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    return count


def crossed(fd_out: int, fd_in: int, message: dict, blobs: list) -> dict:
    """`message` sent on one end of a channel and received on the other (a thread writes: sockets block)."""
    writer = threading.Thread(target=channel.send, args=(fd_out, message, blobs))
    writer.start()
    try:
        return channel.receive(fd_in)
    finally:
        writer.join()


def test_a_large_tensor_crosses_relayed_bit_exact_and_leaves_nothing_open():
    before = memory_files()
    a, b = channel.pair()
    c, d = channel.pair()
    # every bit pattern, NaN payloads included: a float32 view of random int32 words
    x = torch.randint(-2**31, 2**31 - 1, (1024, 1024), dtype=torch.int32).view(torch.float32)
    meta, blobs = tensorwire.pack_values([x, 7])
    assert isinstance(blobs[0], sealed.SealedBlob) and len(blobs[0]) == x.numel() * 4
    with pytest.raises(OSError):  # the sender cannot change what it handed over
        os.pwrite(blobs[0].fd, b"\0", 0)
    received = crossed(a, b, {"values": meta}, blobs)  # the sender to the judge
    relayed = crossed(c, d, {"values": received["values"]}, received["_blobs"])  # the judge to the receiver
    y, seven = tensorwire.unpack_values(relayed["values"], relayed["_blobs"], torch.device("cpu"))
    assert seven == 7 and torch.equal(y.view(torch.int32), x.view(torch.int32))
    y.view(torch.int32)[0, 0] += 1  # the receiver's own copy
    assert torch.equal(tensorwire.unpack_values(relayed["values"], relayed["_blobs"], torch.device("cpu"))[0]
                       .view(torch.int32), x.view(torch.int32))
    del blobs, received, relayed
    assert memory_files() == before  # closed with the last reference: no file anywhere to delete
    for fd in (a, b, c, d):
        os.close(fd)


def test_the_mapped_writer_seals_what_it_filled():
    """The path a GPU tensor takes (copied from the device straight into a shared mapping), here filled from
    the host: sealed once the mapping is gone, the same bytes, no write accepted after."""
    data = os.urandom(3 << 20)
    blob = sealed.write(len(data), lambda mapped: mapped.__setitem__(slice(0, len(data)), data))
    try:
        with pytest.raises(OSError):
            os.pwrite(blob.fd, b"\0", 0)
        with blob.buffer() as mapped:
            assert bytes(mapped) == data
    finally:
        blob.close()


def forged(declared: int, fd: int) -> str:
    """What the judge says when a message names `fd` as a sealed blob of `declared` bytes."""
    a, b = channel.pair()
    data = channel.json.dumps({"op": "x", "_blobs": [{"sealed": declared}]}).encode()
    with socket.socket(fileno=os.dup(a)) as sock:
        socket.send_fds(sock, [channel._HEADER.pack(len(data)) + data], [fd])
    before = memory_files()
    try:
        with pytest.raises(channel.ChannelForged) as refused:
            channel.receive(b)
        return str(refused.value)
    finally:
        assert memory_files() == before  # the refused descriptor is not kept
        os.close(a)
        os.close(b)


def test_a_descriptor_that_is_not_a_sealed_file_of_its_size_is_refused():
    good = sealed.write(sealed.MIN_BYTES, lambda mapped: mapped.write(b"\1" * sealed.MIN_BYTES))
    assert "bytes where its message says" in forged(sealed.MIN_BYTES + 4, os.dup(good.fd))  # a wrong size
    good.close()
    unsealed = os.memfd_create("kerneljudge-blob", os.MFD_ALLOW_SEALING)
    os.ftruncate(unsealed, 64)
    assert "not sealed" in forged(64, unsealed)  # writable after it was handed over
    os.close(unsealed)
    with tempfile.NamedTemporaryFile() as outside:  # a file anywhere on disk
        outside.write(b"\0" * 64)
        outside.flush()
        assert "not a sealed memory file" in forged(64, outside.fileno())
    read_end, write_end = os.pipe()
    assert "not a sealed memory file" in forged(0, read_end)  # not a file at all
    for fd in (read_end, write_end):
        os.close(fd)


def test_an_evaluation_moves_large_tensors_sealed_and_refuses_an_unsealed_output(fast, monkeypatch):
    adopted = []
    adopt = sealed.adopt
    monkeypatch.setattr(sealed, "adopt", lambda fd, size: adopted.append(size) or adopt(fd, size))
    options = fast.replace(overrides=LARGE)
    before = memory_files()
    honest = api.evaluate(RELU, HONEST, options)
    assert honest.verdict == "pass", [(f.code, f.message) for f in honest.findings if f.severity != "info"]
    assert adopted and set(adopted) == {512 * 1024 * 4}  # inputs and outputs, each 2 MiB, crossed sealed
    assert memory_files() == before
    attack = api.evaluate(RELU, CANDIDATES / "sealed" / "unsealed_output.py", options)
    assert attack.verdict in ("fail", "error")
    assert any(f.code == "tampering" and "not sealed against writes" in f.message for f in attack.findings), \
        [(f.code, f.message) for f in attack.findings]
    assert memory_files() == before
