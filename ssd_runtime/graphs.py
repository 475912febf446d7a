"""CUDA graphs of the runtime's forwards: each decode-sized forward shape is captured once and replayed.

On a GPU an eager forward of a 28-layer model is bound by the host, not the device: ~1,100 kernels launched one by
one from Python. Measured on an H200 (bench/gpu_check.py, bench/results/gpu_check-h200-2026-12-04.jsonl: random-weight
Qwen2.5-1.5B in bf16, b = 1, context 256): 22-37 ms eager against 4.3 ms replayed from a graph (the weight-bytes
roofline is 0.64 ms); AR 151 tok/s against 37. So StaticKV hands every forward of a few tokens per row (decode,
verify, tree steps) to a GraphCache, which replays a graph captured for that static shape.

Static shapes: a forward is fixed by its rows, tokens per row, logits kept and the attention width W (slots the
queries may see). W grows by one or more every round, so it is rounded up to a bucket (a multiple of BUCKET slots,
at most the cache's capacity); the extra columns are masked out (visibility False), so the attention over them is
empty and the result is the same function of the cached tokens. Inputs are copied into the graph's static buffers
(device to device, no host read), the graph is replayed, and its logits are cloned (the next replay reuses the
memory). All graphs of one cache share one memory pool; they replay one at a time, so that is safe.

A graph holds the addresses of the K/V buffers: when StaticKV grows them (rare), every graph is dropped. A shape
is captured the second time it is seen, so one-off prefills stay eager, as do wide ones (MAX_TOKENS). A shape whose capture fails (an operation that reads the host
inside the model, say) is remembered and runs eager; `GraphCache.note` says why.

`backend="emulate"` runs the same static-buffer path on any device without capturing: "replay" calls the forward
again on the static buffers. Tests use it to check that bucketing and static buffers leave every output unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .attention import Visibility

BUCKET = 128  # attention width is rounded up to a multiple of this many slots
MAX_TOKENS = 64  # forwards of more tokens per row (prefills) stay eager
MAX_GRAPHS = 96  # shapes captured per cache; further shapes run eager
BACKENDS = ("cuda", "emulate")


def bucket(width: int, capacity: int) -> int:
    """The static attention width (slots) for a forward of `width`: the next multiple of BUCKET, at most the
    cache's capacity (never less than width)."""
    return max(width, min(-(-width // BUCKET) * BUCKET, capacity))


def _pad(x: torch.Tensor, width: int, value) -> torch.Tensor:
    """x with its last dimension padded to `width` with `value`."""
    extra = width - x.shape[-1]
    return x if extra == 0 else torch.nn.functional.pad(x, (0, extra), value=value)


@dataclass
class _Graph:
    """One captured shape: its static inputs, its output, and how to replay it."""

    ids: torch.Tensor
    pos: torch.Tensor
    slots: torch.Tensor
    seen: Visibility
    out: torch.Tensor
    replay: Callable[[], None]


class GraphCache:
    """Graphs of one StaticKV's forwards, keyed by static shape. `run` returns None where the forward stays eager."""

    def __init__(self, run: Callable, backend: str = "cuda"):
        if backend not in BACKENDS:
            raise ValueError(f"graph backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self._run = run  # StaticKV's eager forward: run(rows, ids, pos, slots, seen, keep, width) -> logits
        self.graphs: dict[tuple, _Graph] = {}
        self.failed: dict[tuple, str] = {}
        self.seen: dict[tuple, int] = {}  # forwards per shape not yet captured
        self.captures = self.replays = 0
        self._pool = None

    @property
    def note(self) -> str:
        """One line: graphs captured, replays, shapes that stay eager and why."""
        why = f"; {len(self.failed)} shapes eager ({next(iter(self.failed.values()))})" if self.failed else ""
        return f"{self.backend} graphs: {len(self.graphs)} captured, {self.replays} replays{why}"

    def clear(self) -> None:
        """Drop every graph (the K/V buffers they point at were reallocated)."""
        self.graphs.clear()
        self.failed.clear()
        self.seen.clear()
        self._pool = None

    def run(self, rows: range, ids: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, seen: Visibility,
            keep: int, capacity: int) -> torch.Tensor | None:
        """The forward's float32 logits [R, keep, vocab] from a graph of its shape, or None (run it eager)."""
        if ids.shape[-1] > MAX_TOKENS:
            return None
        width = bucket(seen.vis.shape[-1], capacity)
        key = (rows.start, rows.stop, tuple(ids.shape), tuple(seen.k_pos.shape[:-1]), keep, width)
        if key in self.failed:
            return None
        graph = self.graphs.get(key)
        if graph is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] < 2 or len(self.graphs) >= MAX_GRAPHS:  # a shape seen once (a prefill) stays eager
                return None
            try:
                graph = self.graphs[key] = self._capture(rows, ids, pos, slots, seen, keep, width)
                self.captures += 1
            except Exception as e:  # noqa: BLE001 - e.g. a host read inside the model: this shape runs eager
                self.failed[key] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
                return None
        self._load(graph, ids, pos, slots, seen, width)
        graph.replay()
        self.replays += 1
        return graph.out.clone()

    def _load(self, g: _Graph, ids, pos, slots, seen: Visibility, width: int) -> None:
        """Copy one forward's inputs into the graph's static buffers (device to device)."""
        g.ids.copy_(ids)
        g.pos.copy_(pos)
        g.slots.copy_(slots)
        g.seen.q_pos.copy_(seen.q_pos)
        g.seen.vis.copy_(_pad(seen.vis, width, False))
        g.seen.k_pos.copy_(_pad(seen.k_pos, width, 0))
        g.seen.self_slot.copy_(_pad(seen.self_slot, width, False))

    def _capture(self, rows: range, ids, pos, slots, seen: Visibility, keep: int, width: int) -> _Graph:
        static = Visibility(_pad(seen.vis, width, False).clone(), seen.q_pos.clone(),
                            _pad(seen.k_pos, width, 0).clone(), _pad(seen.self_slot, width, False).clone())
        ids_s, pos_s, slots_s = ids.clone(), pos.clone(), slots.clone()

        def forward() -> torch.Tensor:
            static._masks.clear()  # masks are built from the static buffers inside the graph, never cached across
            return self._run(rows, ids_s, pos_s, slots_s, static, keep, width)

        if self.backend == "emulate":
            holder = {"out": forward()}

            def replay() -> None:
                holder["out"].copy_(forward())

            return _Graph(ids_s, pos_s, slots_s, static, holder["out"], replay)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm-up off the capture: cuBLAS handles, allocator, lazy inits
            for _ in range(2):
                forward()
        torch.cuda.current_stream().wait_stream(stream)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            out = forward()
        return _Graph(ids_s, pos_s, slots_s, static, out, graph.replay)
