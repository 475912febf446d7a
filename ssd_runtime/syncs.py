"""Host <-> device traffic of the runtime, counted: every read of a device tensor by the host is a sync on a GPU.

On a GPU the host queues kernels ahead of the device; a read (`tolist`, `int(t)`, `.cpu()`) makes the host wait
until the queue has drained, so each one costs the launch pipeline it empties (tens of microseconds and the
overlap of host and device work). The runtime reads device tensors only through `to_host` / `host_int`, which
count, and writes host data only through `to_device`, which on CUDA copies from pinned memory without waiting.
The count per round is reported in the trace header (`host_syncs_per_round`); on CPU the same calls are counted,
so the number a CPU run reports is the number a GPU run of the same job would pay.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch


@dataclass
class SyncCounter:
    """Reads of device tensors by the host (one per call of to_host / host_int / to_cpu), per side of the runtime.

    The target and the draft each run in their own process, but an in-process draft (transport.LocalLink) shares
    this counter: the side in force (`on("draft")` around the draft's calls) decides whose count a read goes to."""

    counts: dict[str, int] = field(default_factory=lambda: {"target": 0, "draft": 0})
    side: str = "target"

    @property
    def count(self) -> int:
        """Reads on every side since the last reset."""
        return sum(self.counts.values())

    def reset(self) -> None:
        self.counts = {"target": 0, "draft": 0}

    def add(self, n: int = 1) -> None:
        self.counts[self.side] = self.counts.get(self.side, 0) + n

    @contextmanager
    def on(self, side: str) -> Iterator[None]:
        """Count the reads inside the block as `side`'s."""
        before, self.side = self.side, side
        try:
            yield
        finally:
            self.side = before


SYNCS = SyncCounter()  # per process


def to_host(t: torch.Tensor) -> list:
    """The tensor as (nested) Python lists: one device -> host read, counted."""
    SYNCS.add()
    return t.tolist()


def to_cpu(t: torch.Tensor) -> torch.Tensor:
    """The tensor on the CPU: one device -> host read, counted."""
    SYNCS.add()
    return t.cpu()


def host_int(t: torch.Tensor) -> int:
    """A one-element tensor as a Python int: one device -> host read, counted."""
    SYNCS.add()
    return int(t)


def to_device(data: Sequence | torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Host data (lists or a CPU tensor) as a tensor on `device`. On CUDA the copy goes from pinned memory and
    does not wait for the device (torch keeps the pinned buffer alive until the copy is done); not a sync."""
    host = data if isinstance(data, torch.Tensor) else torch.tensor(data, dtype=dtype)
    host = host.to(dtype)
    if device.type != "cuda":
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)
