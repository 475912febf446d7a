"""Messages between the target (rank 0) and the draft (rank 1): torch.distributed point-to-point.

Backend: NCCL when target and draft are on two CUDA devices, gloo otherwise (backend_for). A message is a Python object
whose tensors travel as raw tensors (no pickling of large data): first a length, then the pickled
skeleton (tensors replaced by (dtype, shape) placeholders), then each tensor. A wait takes the draft timeout
(None: no timeout at all, see GROUP_TIMEOUT); a timeout or a broken connection raises DraftFault, after which the
target stops using the draft.

On CPU each process is pinned to its own core with one thread (`pin_cpu`), so the two models really
run in parallel, like two devices.

The messages themselves are declared in protocol.py.
"""

from __future__ import annotations

import datetime
import os
import pickle
import socket
import time
from collections.abc import Callable
from dataclasses import fields

import torch
import torch.distributed as dist

from .protocol import AddMsg, JobAnswer, JobMsg, Key, Message, Reply, SpecMsg, StopMsg
from .syncs import SYNCS, to_cpu, to_device


class DraftFault(RuntimeError):
    """The draft process died or did not answer in time."""


def pin_cpu(core: int | None, threads: int = 1) -> None:
    """Run this process on one CPU core with `threads` intra-op threads (one 'device' per process)."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[core % len(cores)]})
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set (only allowed once, before parallel work)
        pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def backend_for(*devices: str) -> str:
    """NCCL when every side has its own CUDA device; gloo otherwise (CPU, or two processes sharing one GPU,
    which NCCL refuses: "Duplicate GPU detected"). Over gloo, tensors travel through host memory."""
    cuda = [d if ":" in d else "cuda:0" for d in devices if d.startswith("cuda")]
    return "nccl" if len(cuda) == len(devices) and len(set(cuda)) == len(cuda) else "gloo"


# The group's own timeout bounds every wait that names none (torch's default is 30 min). Waits that must end
# carry their own timeout (the draft timeout); "no timeout" (--draft-timeout 0, an idle draft during a long AR
# job, the rendezvous, which the controller supervises) must really mean none, so the group's is ten years
# (longer overflows the nanosecond clocks of gloo and NCCL).
GROUP_TIMEOUT = datetime.timedelta(days=3650)


def init(rank: int, port: int, backend: str) -> None:
    """Join the two-process group (blocks until both ranks are there; the controller ends a rank that waits
    for a peer that died or hangs)."""
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                            timeout=GROUP_TIMEOUT)


SPIN_S = 0.005  # NCCL waits spin (yielding the core) this long before they sleep between polls
HEADER_BYTES = 2048  # one fixed-size first message: the skeleton's length (8 bytes) and, when it fits, the skeleton


class Channel:
    """Send / receive whole messages to / from the peer rank, with timeouts.

    A message is one fixed-size header (length + pickled skeleton when it fits, as most SPECs and replies do),
    the rest of the skeleton if it did not fit, then each tensor. Over NCCL tensors are sent from and received
    into the channel's CUDA device (no staging in host memory; a CPU tensor is copied up from pinned memory
    without a wait); the header is the one read the host must make per message (counted in syncs.SYNCS)."""

    def __init__(self, peer: int, device: str = "cpu", backend: str = "gloo"):
        self.peer, self.backend = peer, backend
        self.device = torch.device(device if backend == "nccl" else "cpu")

    def send(self, obj, timeout_s: float | None = None) -> None:
        tensors: list[torch.Tensor] = []
        skeleton = pickle.dumps(_strip(obj, tensors), protocol=pickle.HIGHEST_PROTOCOL)
        size = len(skeleton).to_bytes(8, "little")
        head, rest = skeleton[:HEADER_BYTES - 8], skeleton[HEADER_BYTES - 8:]
        header = bytearray(size + head) + bytearray(HEADER_BYTES - 8 - len(head))
        self._send(torch.frombuffer(header, dtype=torch.uint8), timeout_s)
        if rest:
            self._send(torch.frombuffer(bytearray(rest), dtype=torch.uint8), timeout_s)
        for t in tensors:
            self._send(t, timeout_s)

    def recv(self, timeout_s: float | None = None):
        header = torch.empty(HEADER_BYTES, dtype=torch.uint8, device=self.device)
        self._recv(header, timeout_s)
        data = bytes(to_cpu(header).numpy()) if header.device.type != "cpu" else bytes(header.numpy())
        size = int.from_bytes(data[:8], "little")
        skeleton = data[8:8 + size]
        if size > HEADER_BYTES - 8:
            rest = torch.empty(size - (HEADER_BYTES - 8), dtype=torch.uint8, device=self.device)
            self._recv(rest, timeout_s)
            skeleton += bytes(rest.cpu().numpy())
        return _fill(pickle.loads(skeleton), lambda dtype, shape: self._recv_new(dtype, shape, timeout_s))

    def _recv_new(self, dtype, shape, timeout_s):
        """A tensor of the message, received straight into the channel's device (CUDA over NCCL)."""
        t = torch.empty(shape, dtype=dtype, device=self.device)
        self._recv(t, timeout_s)
        return t

    def _send(self, t: torch.Tensor, timeout_s: float | None) -> None:
        if t.numel() == 0:  # the receiver knows the shape from the skeleton
            return
        t = t.contiguous()
        if t.device != self.device:  # CPU -> CUDA without a wait (NCCL); a CUDA tensor over gloo is a host read
            t = to_device(t, t.dtype, self.device) if self.device.type == "cuda" else to_cpu(t)
        self._wait(self._start(dist.isend, t, "send to"), timeout_s, "send to")

    def _recv(self, t: torch.Tensor, timeout_s: float | None) -> None:
        if t.numel() == 0:
            return
        self._wait(self._start(dist.irecv, t, "receive from"), timeout_s, "receive from")

    def _start(self, op: Callable, t: torch.Tensor, what: str):
        """dist.isend / dist.irecv; a peer already gone fails here already (DraftFault, as in _wait)."""
        try:
            return op(t, self.peer)
        except RuntimeError as e:
            raise DraftFault(f"{what} rank {self.peer} failed: {str(e).splitlines()[0][:200]}") from e

    def _wait(self, work, timeout_s: float | None, what: str) -> None:
        try:
            if timeout_s is None:
                work.wait()
            elif self.backend == "gloo":
                work.wait(timeout=datetime.timedelta(seconds=timeout_s))
            else:  # NCCL work objects do not take a timeout: poll, spinning first (a reply is usually there
                # within a few ms, and a 100 us sleep adds its own ~60-100 us of wake-up latency), then sleeping
                start = time.monotonic()
                deadline = start + timeout_s
                while not work.is_completed():
                    now = time.monotonic()
                    if now > deadline:
                        raise TimeoutError(f"no answer within {timeout_s:g} s")
                    time.sleep(0 if now - start < SPIN_S else 1e-4)
        except (RuntimeError, TimeoutError) as e:
            raise DraftFault(f"{what} rank {self.peer} failed: {str(e).splitlines()[0][:200]}") from e


class _TensorSlot:
    """Placeholder for a tensor inside a message skeleton."""

    def __init__(self, dtype: torch.dtype, shape: tuple[int, ...]):
        self.dtype, self.shape = dtype, shape


def _strip(obj, out: list[torch.Tensor]):
    """Replace tensors by placeholders (collected in `out`, in order)."""
    if isinstance(obj, torch.Tensor):
        out.append(obj.detach())
        return _TensorSlot(obj.dtype, tuple(obj.shape))
    if isinstance(obj, Message):
        return type(obj)(**{f.name: _strip(getattr(obj, f.name), out) for f in fields(obj)})
    if isinstance(obj, dict):
        return {k: _strip(v, out) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_strip(v, out) for v in obj)
    return obj


def _fill(obj, make: Callable):
    if isinstance(obj, _TensorSlot):
        return make(obj.dtype, obj.shape)
    if isinstance(obj, Message):
        return type(obj)(**{f.name: _fill(getattr(obj, f.name), make) for f in fields(obj)})
    if isinstance(obj, dict):
        return {k: _fill(v, make) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, make) for v in obj)
    return obj


# ---- links: how the target reaches the draft -----------------------------------------------------------
class ProcessLink:
    """The draft in another process, over a Channel. Any failure becomes DraftFault."""

    def __init__(self, channel: Channel, timeout_s: float):
        self.channel, self.timeout_s = channel, timeout_s

    def job(self, msg: JobMsg) -> JobAnswer:
        self.channel.send(msg, self.timeout_s)
        return self.channel.recv(self.timeout_s)

    def add(self, seqs: list[tuple[int, list[int]]], done: list[Key]) -> None:
        self.channel.send(AddMsg(seqs, done), self.timeout_s)

    def request(self, spec: SpecMsg) -> Reply:
        self.channel.send(spec, self.timeout_s)
        return self.channel.recv(self.timeout_s)

    def stop(self) -> None:
        self.channel.send(StopMsg(), self.timeout_s)


class LocalLink:
    """The draft in this process, run synchronously (reply, then speculate): for tests and in-process runs.

    The factory builds the draft for a job message: a Drafter, or a DraftRecorder when the trace needs the
    draft's bonus ranks and timings."""

    def __init__(self, drafter_factory: Callable[[JobMsg], object]):
        self.factory, self.drafter = drafter_factory, None

    def job(self, msg: JobMsg) -> JobAnswer:
        self.drafter = self.factory(msg)
        return JobAnswer(info={})

    def add(self, seqs, done) -> None:
        with SYNCS.on("draft"):
            self.drafter.add(seqs, done)

    def request(self, spec: SpecMsg) -> Reply:
        with SYNCS.on("draft"):
            reply = self.drafter.reply(spec)
            self.drafter.speculate()
        return reply

    def stop(self) -> None:
        self.drafter = None
