"""transport.backend_for: NCCL only when target and draft each have their own CUDA device."""

from __future__ import annotations

import pytest

from ssd_runtime.transport import backend_for


@pytest.mark.parametrize("devices, backend", [
    (("cpu", "cpu"), "gloo"),
    (("cuda:0", "cpu"), "gloo"),
    (("cuda:0", "cuda:1"), "nccl"),
    (("cuda:0", "cuda:0"), "gloo"),  # NCCL refuses two ranks on one GPU
    (("cuda", "cuda:0"), "gloo"),  # "cuda" is cuda:0
    (("cuda", "cuda:1"), "nccl"),
])
def test_backend_for(devices, backend):
    assert backend_for(*devices) == backend


class FakeWire:
    """dist.isend / dist.irecv between two Channels of one process: a FIFO of tensors (copied on send)."""

    def __init__(self):
        self.queue: list = []
        self.sent = 0

    def isend(self, t, peer):
        self.queue.append(t.clone())
        self.sent += 1
        return _Done()

    def irecv(self, t, peer):
        t.copy_(self.queue.pop(0))
        return _Done()


class _Done:
    def wait(self, timeout=None):
        return True

    def is_completed(self):
        return True


@pytest.mark.parametrize("extra", [0, 5000])
def test_a_message_is_one_header_plus_its_tensors_unless_its_skeleton_outgrows_the_header(monkeypatch, extra):
    import torch

    from ssd_runtime import transport
    from ssd_runtime.protocol import Reply

    wire = FakeWire()
    monkeypatch.setattr(transport.dist, "isend", wire.isend)
    monkeypatch.setattr(transport.dist, "irecv", wire.irecv)
    a, b = transport.Channel(1), transport.Channel(0)
    q = torch.rand(2, 3, 11)
    msg = Reply(tokens=torch.tensor([[1, 2, 3], [4, 5, 6]]), q=q, q_rows=[0, 1], hit=[True, False],
                dists={0: ["x" * extra]} if extra else {}, syncs=3)
    a.send(msg)
    assert wire.sent == 3 + (extra > 0)  # header (+ the rest of the skeleton), tokens, q
    got = b.recv()
    assert got.tokens.tolist() == [[1, 2, 3], [4, 5, 6]] and torch.equal(got.q, q) and got.q.device == b.device
    assert (got.hit, got.syncs, got.dists) == (msg.hit, 3, msg.dists) and wire.queue == []
