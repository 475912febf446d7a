"""CUDA graphs of the runtime's forwards: each decode-sized forward shape is captured once and replayed.

On a GPU an eager forward of a 28-layer model is bound by the host, not the device: ~1,100 kernels launched one by
one from Python. Measured on an H200 (bench/gpu_check.py, bench/results/gpu_check-h200-2026-12-04.jsonl: random-weight
Qwen2.5-1.5B in bf16, b = 1, context 256): 22-37 ms eager against 4.3 ms replayed from a graph (the weight-bytes
roofline is 0.64 ms); AR 151 tok/s against 37. So StaticKV hands every forward of a few tokens per row (decode,
verify, tree steps) to a GraphCache, which replays a graph captured for that static shape.

Static shapes: a forward is fixed by its rows, tokens per row, logits kept and the attention width W (slots the
queries may see). W grows by one or more every round, so it is rounded up to a power of two (at least BUCKET, at
most the cache's capacity); the extra columns are masked out (visibility False), so the attention over them is
empty and the result is the same function of the cached tokens. The rows of a batch that shrinks as sequences
finish are padded to a power of two with rows that see only their own scratch slot. So a run of any length needs
about log2(rows) x log2(context) shapes per forward kind. A graph holds the whole forward from StaticKV's raw inputs
(token ids and a few integers per row): positions, slots and the visibility masks are computed inside it, so a
replay costs the raw inputs' copies (device to device, no host read), the replay and a clone of its logits (the next
replay reuses the memory), not the ~20-30 small launches of building each forward's masks on the host's behalf.
All graphs of one cache share one memory pool; they replay one at a time, so that is safe.

A graph holds the addresses of the K/V buffers: when StaticKV grows them (rare), every graph is dropped. A shape
is captured the second time it is seen, so one-off prefills stay eager, as do wide ones (MAX_TOKENS). A shape
whose forward reads the device from the host (found before capturing, with torch.cuda.set_sync_debug_mode) or
whose capture fails is remembered and runs eager; `GraphCache.note` says why.

A shape's first sighting (eager) and its capture cost several replays (on the H200 above 22-37 ms eager against
4.3 ms replayed; a capture more): `GraphCache.warmups` counts those forwards, so the trace can mark the rounds they
fall in (records.RoundRecord.warmup) and calibration can leave them out of steady latency (io.sanity.steady). Shapes
that stay eager for good (failed, over MAX_GRAPHS, too wide) are steady and not counted.

`backend="emulate"` runs the same static-buffer path on any device without capturing: "replay" calls the forward
again on the static buffers. Tests use it to check that bucketing and static buffers leave every output unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import torch

BUCKET = 128  # the narrowest attention width (slots); wider ones are rounded up to a power of two
MAX_TOKENS = 64  # forwards of more tokens per row (prefills) stay eager
MAX_GRAPHS = 256  # shapes captured per cache; further shapes run eager
BACKENDS = ("cuda", "emulate")


def bucket(width: int, capacity: int) -> int:
    """The static attention width (slots) for a forward of `width`: the next power of two, at least BUCKET and
    at most the cache's capacity (never less than width). Powers of two keep the shapes of a long run few
    (log2 of the context), at the price of attending over at most twice the slots (K/V bytes, small beside
    the weights at decode)."""
    return max(width, min(max(BUCKET, 1 << (width - 1).bit_length()), capacity))


def row_bucket(rows: int, max_rows: int) -> int:
    """The static row count for a forward of `rows` rows: the next power of two, at most the cache's rows. A
    decode forward reads the weights once whatever its rows, so padding rows costs little (H200, 1.5B shape:
    4.34 ms at b = 1, 4.66 ms at b = 8) and a batch that shrinks as sequences finish reuses a few shapes."""
    return min(1 << (rows - 1).bit_length(), max_rows)


@contextmanager
def _host_reads_raise() -> Iterator[None]:
    """Within the block, an operation that makes the host wait for the GPU raises (set_sync_debug_mode)."""
    old = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(old)


def _pad_rows(x: torch.Tensor, rows: int, value) -> torch.Tensor:
    """A copy of x with `rows` rows (dimension 0), the added ones filled with `value`."""
    out = x.new_full((rows, *x.shape[1:]), value)
    out[:x.shape[0]] = x
    return out


class ShapeKey(NamedTuple):
    """What fixes a captured forward: its kind (("append",) or ("tree", step)), rows, raw inputs' shapes past the
    rows, logits kept and the bucketed attention width (slots)."""

    kind: tuple
    start: int
    stop: int
    shapes: tuple
    keep: int
    width: int


@dataclass
class _Graph:
    """One captured shape: its static raw inputs (StaticKV's, one row per row), its output, how to replay it."""

    raw: tuple[torch.Tensor, ...]
    out: torch.Tensor
    replay: Callable[[], None]


class _Replaying:
    """How many replays are in progress (0 or 1): a counter of the ops a round launches on its own (bench/gpu_check,
    ssd_runtime.opcount) leaves out the ops an emulated replay runs, which a CUDA graph launches as one."""

    depth = 0


REPLAYING = _Replaying()


class GraphCache:
    """Graphs of one StaticKV's forwards, keyed by static shape. `run` returns None where the forward stays eager."""

    def __init__(self, run: Callable, backend: str = "cuda"):
        if backend not in BACKENDS:
            raise ValueError(f"graph backend must be one of {BACKENDS}, got {backend!r}")
        self.backend = backend
        self._run = run  # StaticKV's eager forward: run(rows, ids, pos, slots, seen, keep, width) -> logits
        self.graphs: dict[tuple, _Graph] = {}
        self.failed: dict[tuple, str] = {}
        self.sightings: dict[tuple, int] = {}  # forwards per shape not yet captured
        self.captures = self.replays = 0
        self.warmups = 0  # forwards of a capturable shape that ran before its graph replayed: sighting + capture
        self._pool = None

    @property
    def note(self) -> str:
        """One line: graphs captured, replays, shapes that stay eager and why."""
        why = f"; {len(self.failed)} shapes eager ({next(iter(self.failed.values()))})" if self.failed else ""
        return f"{self.backend} graphs: {len(self.graphs)} captured, {self.replays} replays{why}"

    def counts(self) -> dict:
        """{"graphs": captured shapes held, "replays": forwards replayed, "eager_shapes": shapes whose capture
        failed (they run eager)}: what a trace summary records per side (records.Summary.graphs_target / _draft)."""
        return {"graphs": len(self.graphs), "replays": self.replays, "eager_shapes": len(self.failed)}

    def clear(self) -> None:
        """Drop every graph (the K/V buffers they point at were reallocated)."""
        self.graphs.clear()
        self.failed.clear()
        self.sightings.clear()
        self._pool = None

    def run(self, rows: range, raw: tuple[torch.Tensor, ...], build: Callable, width: int, keep: int, kind: tuple,
            capacity: int, max_rows: int, active: int) -> torch.Tensor | None:
        """The forward's float32 logits [R, keep, vocab] from a graph of its shape, or None (run it eager).

        raw: the forward's device inputs, one row per row of `rows` (ids first); build(raw, width) makes the
        model's inputs from them and runs inside the graph, so a replay costs the copies of raw and nothing else.
        A forward over all `active` rows is padded to row_bucket(active) rows: the padding rows are free ones (a
        row of zeros in raw is all padding; rows a previous, wider forward of the graph left in its buffers
        compute into their own free rows) and their logits are dropped. A forward over some rows only (the draft
        catching up the rows that missed) keeps its rows: a padding row there would be a live row."""
        if raw[0].shape[-1] > MAX_TOKENS:
            return None
        n = len(rows)
        if rows.start == 0 and rows.stop == active:
            rows = range(row_bucket(n, max_rows))
        width = bucket(width, capacity)
        key = ShapeKey(kind, rows.start, rows.stop, tuple(tuple(x.shape[1:]) for x in raw), keep, width)
        if key in self.failed:
            return None
        graph = self.graphs.get(key)
        if graph is None:
            self.sightings[key] = self.sightings.get(key, 0) + 1
            if len(self.graphs) >= MAX_GRAPHS:
                return None
            self.warmups += 1
            if self.sightings[key] < 2:  # a shape seen once (a prefill) stays eager
                return None
            try:
                graph = self.graphs[key] = self._capture(rows, raw, build, keep, width)
                self.captures += 1
            except Exception as e:  # noqa: BLE001 - e.g. a host read inside the model: this shape runs eager
                self.failed[key] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:160]}"
                return None
        for static, x in zip(graph.raw, raw, strict=True):  # rows 0..n-1; padding rows keep what they hold
            static[:n].copy_(x)
        _replay(graph)
        self.replays += 1
        return graph.out[:n].clone()

    def _capture(self, rows: range, raw: tuple[torch.Tensor, ...], build: Callable, keep: int,
                 width: int) -> _Graph:
        static = tuple(_pad_rows(x, len(rows), 0) for x in raw)  # padding rows: zeros (all padding)

        def forward() -> torch.Tensor:
            return self._run(rows, *build(static, width), keep, width)

        if self.backend != "emulate" and self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        return _Graph(static, *_captured(forward, self.backend, self._pool))


def _replay(graph) -> None:
    """Replay a captured graph, marked as a replay for the launch counter (ssd_runtime.opcount)."""
    REPLAYING.depth += 1
    try:
        graph.replay()
    finally:
        REPLAYING.depth -= 1


def _captured(forward: Callable[[], torch.Tensor], backend: str, pool) -> tuple[torch.Tensor, Callable[[], None]]:
    """(output, replay) of `forward`, a function of static buffers: a CUDA graph of it, or ("emulate") a replay
    that runs it again into the same output. A forward that reads the device from the host raises before any
    capture starts (the caller runs it eager)."""
    if backend == "emulate":
        holder = {"out": forward()}

        def replay() -> None:
            holder["out"].copy_(forward())

        return holder["out"], replay
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    try:
        with torch.cuda.stream(stream):  # warm-up off the capture: cuBLAS handles, allocator, lazy inits
            forward()
            with _host_reads_raise():  # a forward that reads the device (a MoE router's nonzero, say)
                forward()  # cannot be captured: refused here, before a capture starts, and run eager
    finally:
        torch.cuda.current_stream().wait_stream(stream)  # the eager forward after a refusal waits too
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool=pool):
        out = forward()
    return out, graph.replay


class GraphedFn:
    """A function of a few device tensors of fixed shapes (no host reads), replayed from a CUDA graph per shape:
    the draft's glue work between forwards (the bonus-token candidates) as one launch instead of ~20. Like
    GraphCache, a shape is captured the second time it is seen (python keyword arguments are part of the shape)
    and one whose capture fails stays eager; `backend` "emulate" re-runs the function on the static buffers."""

    def __init__(self, fn: Callable[..., torch.Tensor], backend: str = "cuda"):
        if backend not in BACKENDS:
            raise ValueError(f"graph backend must be one of {BACKENDS}, got {backend!r}")
        self.fn, self.backend = fn, backend
        self.graphs: dict[tuple, _Graph] = {}
        self.failed: set[tuple] = set()
        self.sightings: dict[tuple, int] = {}
        self._pool = None

    def __call__(self, *xs: torch.Tensor, **kw) -> torch.Tensor:
        key = (tuple((tuple(x.shape), x.dtype) for x in xs), tuple(sorted(kw.items())))
        graph = self.graphs.get(key)
        if graph is None:
            self.sightings[key] = self.sightings.get(key, 0) + 1
            if key in self.failed or self.sightings[key] < 2 or len(self.graphs) >= MAX_GRAPHS:
                return self.fn(*xs, **kw)
            static = tuple(x.clone() for x in xs)
            if self.backend != "emulate" and self._pool is None:
                self._pool = torch.cuda.graph_pool_handle()
            try:
                graph = self.graphs[key] = _Graph(static, *_captured(partial(self.fn, *static, **kw), self.backend,
                                                                     self._pool))
            except Exception:  # noqa: BLE001 - a host read inside: this shape stays eager
                self.failed.add(key)
                return self.fn(*xs, **kw)
        for buf, x in zip(graph.raw, xs, strict=True):
            buf.copy_(x)
        _replay(graph)
        return graph.out.clone()
