"""StaticKV: a preallocated KV cache for a batch of sequences at different lengths (gpt-fast style, per row).

Every layer's keys and values live in one buffer [rows, kv_heads, capacity, head_dim] allocated once (grown by
doubling in the rare case a row outgrows it). Row r's token at position i sits in slot 1 + i; slot 0 is a
scratch slot that padding writes to and nothing real reads. A row's state is one number, its length: rolling
back is `lengths[r] = n` (no copy, no prefix compare) and slots past the length are garbage that the next
write overwrites.

A forward writes the new tokens' K/V straight into their slots (one scatter per layer) and attends over the
buffer's first W slots (W = 1 + the longest row after the call) through an explicit boolean visibility, which
ssd_runtime.attention turns into each layer's own mask (full or sliding window, any model family). Two kinds of
forward:
  append   each row's new tokens at its next positions (rows may add different counts or none: left padding);
  tree     branch steps of the draft: many branches per row share the row's committed prefix and each sees
           only its own earlier tokens (the reference engine's tree decode), written past the row's length.
Active rows are always rows 0..n-1: `remove_row` moves the last row into the freed one (one row copy per
finished sequence, not per round), `add_rows` appends rows that the next append forward prefills.

Per-round work is independent of context except attention itself: no KV copies, no token-list compares.
Memory: rows x capacity x (2 x layers x kv_heads x head_dim x dtype bytes), fixed after the first forward.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence

import torch

from .attention import StaticAttention, Visibility
from .graphs import GraphCache
from .syncs import to_device

SCRATCH = 1  # slots before position 0 (slot 0: padding writes land here)


class StaticKV:
    """Preallocated K/V for up to `rows` sequences of one model. Units: slots = token positions (+1)."""

    def __init__(self, model: torch.nn.Module, rows: int, capacity: int = 256):
        self.model = model
        self.device = next(iter(model.parameters())).device
        self.max_rows = int(rows)
        self.capacity = max(int(capacity), 8)  # slots per row, scratch included
        self.keys: list[torch.Tensor] = []  # per layer [max_rows, kv_heads, capacity, head_dim]; allocated lazily
        self.values: list[torch.Tensor] = []
        self.lengths: list[int] = []  # cached tokens of each active row (= position id of its next token)
        self._dev_lengths: tuple = (None, None)  # (lengths, their device copy)
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self.attention = StaticAttention(model)
        self._writer = eager_writer() if getattr(model, "_ssd_regional", False) else _SlotWriter
        backend = getattr(model, "_ssd_graphs", None)  # set by load_model for --*-compile cuda-graphs
        self.graphs = GraphCache(self._forward, backend) if backend else None

    @classmethod
    def reuse(cls, model: torch.nn.Module, rows: int, capacity: int) -> StaticKV:
        """A cache of at least `rows` x `capacity` slots for a new job: where the model runs CUDA graphs, its
        previous cache emptied when that is big enough (its buffers and captured graphs stay valid, so the next
        job replays them at once); otherwise a new cache."""
        old = getattr(model, "_ssd_kv", None)
        if old is not None and old.max_rows >= rows and old.capacity >= capacity:
            old.lengths = []
            return old
        kv = cls(model, rows, capacity)
        if kv.graphs is not None:
            model._ssd_kv = kv
        return kv

    @property
    def n(self) -> int:
        """Active rows (rows 0..n-1)."""
        return len(self.lengths)

    def graph_counts(self) -> dict | None:
        """GraphCache.counts() of this cache's CUDA graphs; None where the model runs without them."""
        return self.graphs.counts() if self.graphs is not None else None

    def graph_warmups(self) -> int:
        """Forwards of this cache that ran before their shape's graph replayed (GraphCache.warmups; 0 without
        graphs): the rounds they fall in are not steady."""
        return self.graphs.warmups if self.graphs is not None else 0

    # ---- rows ----------------------------------------------------------------------------------
    def add_rows(self, count: int) -> range:
        """Append `count` empty rows; returns their indices (prefill them with an append forward)."""
        if self.n + count > self.max_rows:
            raise ValueError(f"{self.n + count} rows do not fit a cache of {self.max_rows}")
        start = self.n
        self.lengths += [0] * count
        return range(start, self.n)

    def remove_row(self, r: int) -> int:
        """Free row r by moving the last row into it; returns the moved row's old index (r if it was last)."""
        last = self.n - 1
        if r != last:
            used = SCRATCH + self.lengths[last]
            for buf in (*self.keys, *self.values):
                buf[r, :, :used] = buf[last, :, :used]
            self.lengths[r] = self.lengths[last]
        self.lengths.pop()
        return last

    def truncate(self, keep: Sequence[int]) -> None:
        """Keep each row's first keep[r] tokens (keep[r] <= its length)."""
        self.lengths = [min(k, n) for k, n in zip(keep, self.lengths, strict=True)]

    def resume(self, wanted: Sequence[Sequence[int]]) -> list[list[int]]:
        """Roll each row back to its part of `wanted` that is cached and return the rest (never empty).

        Invariant kept by both sides of the runtime: a row's cache holds a prefix of the committed tokens
        followed by a prefix of the last proposal, and `wanted` = committed (+ the new proposal) extends the
        cached prefix. So the cached part is min(length, len(wanted) - 1) tokens: index arithmetic, no compare.
        """
        keep = [min(n, len(w) - 1) for n, w in zip(self.lengths, wanted, strict=True)]
        self.lengths = keep
        return [list(w[k:]) for w, k in zip(wanted, keep, strict=True)]

    # ---- forwards ------------------------------------------------------------------------------
    @torch.no_grad()
    def append(self, inputs: Sequence[Sequence[int]], keep: int = 1, rows: range | None = None) -> torch.Tensor:
        """Append each row's tokens at its next positions; rows listed with no tokens are left alone.

        `inputs` covers `rows` (default: every active row; a contiguous range is a view, no copy). Returns
        float32 logits [rows, keep, vocab] of each row's last `keep` input positions (right-aligned; positions
        before a short row's first token are padding and meaningless).
        """
        counts = [len(x) for x in inputs]
        P = max(counts, default=0)
        ids = to_device([[0] * (P - len(x)) + list(x) for x in inputs], torch.long, self.device)
        return self.append_ids(ids.view(len(inputs), P), counts, keep, rows)

    @torch.no_grad()
    def append_ids(self, ids: torch.Tensor, counts: Sequence[int], keep: int = 1,
                   rows: range | None = None) -> torch.Tensor:
        """append() for token ids already on the device: ids [R, P], row r's counts[r] tokens right-aligned in
        its last columns (the columns before them are padding, any value). No host read: positions and widths
        come from the lengths the host keeps; a draft step feeds its sampled tokens back without a sync."""
        rows = rows if rows is not None else range(self.n)
        assert len(counts) == len(rows), f"{len(counts)} input rows for {len(rows)} cache rows"
        P = int(ids.shape[1]) if ids.dim() == 2 else 0
        if P == 0 or max(counts, default=0) == 0:
            raise ValueError("forward needs at least one token in some row")
        lengths = self.lengths[rows.start:rows.stop]
        width = SCRATCH + max(n + c for n, c in zip(lengths, counts, strict=True))  # host arithmetic, no sync
        lead = to_device([[n, c] for n, c in zip(lengths, counts, strict=True)], torch.long, self.device)
        out = self._run(rows, (ids, lead), append_inputs, width, keep, ("append",))
        for r, c in zip(rows, counts, strict=True):
            self.lengths[r] += c
        return out

    @torch.no_grad()
    def tree_step(self, tokens: torch.Tensor, real: torch.Tensor, prefix: torch.Tensor, step: int) -> torch.Tensor:
        """One branch-decode step over all active rows: row r holds up to P branches, column j one of them.

        tokens [n, P] (step `step` = 0..K-1 of every branch), real [n, P] (False: padding), prefix [n, P] = the
        cached tokens branch j of row r sees (its row's committed prefix + the proposal up to its stopping
        position). Branch tokens go to slots past the row's length (column-major per step) and are forgotten
        when the row is truncated back; its position is prefix + step. Returns logits [n, P, vocab] (float32).
        """
        n, P = tokens.shape
        width = SCRATCH + max(self.lengths) + (step + 1) * P
        lengths = self._lengths_on_device()
        return self._run(range(n), (tokens, real, prefix, lengths), functools.partial(tree_inputs, step=step), width, P,
                         ("tree", step))

    def _lengths_on_device(self) -> torch.Tensor:
        """The rows' lengths as a device tensor, copied once while they stay the same (the K tree steps of a
        branch decode share one copy: on a GPU each copy is a launch)."""
        key = tuple(self.lengths)
        if self._dev_lengths[0] != key:
            self._dev_lengths = (key, to_device(self.lengths, torch.long, self.device))
        return self._dev_lengths[1]

    def _run(self, rows: range, raw: tuple[torch.Tensor, ...], build: Callable, width: int, keep: int,
             kind: tuple) -> torch.Tensor:
        """Model forward of the inputs build(raw, width) makes (ids, positions, slots, visibility): K/V written at
        the slots, attention where the visibility allows (per layer window). Replayed from a CUDA graph of its
        shape where the cache has graphs (ssd_runtime.graphs: `build` then runs inside the graph, so the masks
        cost no launches of their own), else eager. raw's tensors have one row per row of `rows`."""
        self._reserve(width)
        if self.graphs is not None and self.keys:
            out = self.graphs.run(rows, raw, build, width, keep, kind, self.capacity, self.max_rows, self.n)
            if out is not None:
                return out
        return self._forward(rows, *build(raw, width), keep, width)

    def _forward(self, rows: range, ids: torch.Tensor, pos: torch.Tensor, slots: torch.Tensor, seen: Visibility,
                 keep: int, width: int) -> torch.Tensor:
        """The eager forward; attention reads the first `width` slots (seen's width, or a graph's bucket)."""
        cache = self._writer(self, rows, slots, width)
        with self.attention.active(seen):
            out = self.model(input_ids=ids, position_ids=pos, use_cache=True, logits_to_keep=keep,
                             **{self._cache_kw: cache})
        return out.logits[:, -keep:].float()

    def _reserve(self, width: int) -> None:
        """Grow every buffer (doubling) so `width` slots fit; allocation happens once in a normal run."""
        if width <= self.capacity:
            return
        new = max(width, 2 * self.capacity)
        if self.graphs is not None:
            self.graphs.clear()  # they point at the buffers about to be replaced
        for bufs in (self.keys, self.values):
            for i, b in enumerate(bufs):
                grown = b.new_zeros(b.shape[0], b.shape[1], new, b.shape[3])
                grown[:, :, :self.capacity] = b
                bufs[i] = grown
        self.capacity = new

    def nbytes(self) -> int:
        """Bytes held by the K/V buffers."""
        return sum(b.numel() * b.element_size() for b in (*self.keys, *self.values))


def append_inputs(raw: tuple[torch.Tensor, torch.Tensor], width: int):
    """(ids, positions, slots, visibility) of an append forward from raw = (ids [R, P], lead [R, 2]): lead[r] =
    (row r's cached tokens, its new tokens, right-aligned in ids). A row of zeros is all padding: its queries see
    and write only the scratch slot. Device arithmetic only (it runs inside a CUDA graph)."""
    ids, lead = raw
    P, dev = ids.shape[1], ids.device
    start, pad = lead[:, 0], P - lead[:, 1]  # cached tokens and padding columns per row
    cols = torch.arange(P, device=dev)[None, :]
    real = cols >= pad[:, None]  # left padding
    ids = torch.where(real, ids, 0)
    pos = start[:, None] + cols - pad[:, None]
    slots = torch.where(real, SCRATCH + pos, 0)
    col = torch.arange(width, device=dev)
    vis = real[:, :, None] & (col >= SCRATCH) & (col <= slots[:, :, None])  # causal over the row's slots
    pad_self = ~real[:, :, None] & (col == 0)  # padding queries see only the scratch slot they write
    pos = pos.clamp(min=0)
    return ids, pos, slots, Visibility(vis, pos, (col - SCRATCH)[None, None, :], pad_self)


def tree_inputs(raw: tuple[torch.Tensor, ...], width: int, step: int):
    """(ids, positions, slots, visibility) of tree step `step` from raw = (tokens [n, P], real [n, P], prefix
    [n, P], lengths [n]): branch j of row r writes slot 1 + lengths[r] + step P + j and sees the row's first
    prefix[r, j] cached tokens and its own earlier steps. Device arithmetic only (it runs inside a CUDA graph)."""
    tokens, real, prefix, lengths = raw
    P, dev = tokens.shape[1], tokens.device
    base = SCRATCH + lengths  # first branch slot of each row
    branch = torch.arange(P, device=dev)
    slots = base[:, None] + step * P + branch[None, :]
    col = torch.arange(width, device=dev)
    rel = col[None, None, :] - base[:, None, None]  # [n, 1, W]: >= 0 in the branch area
    own = (rel >= 0) & (rel % P == branch[None, :, None]) & (rel < (step + 1) * P)
    seen = (col >= SCRATCH) & (col < SCRATCH + prefix[:, :, None])
    vis = (seen | own) & real[:, :, None]
    pad_self = ~real[:, :, None] & (col == slots[:, :, None])  # padding columns see only themselves
    k_pos = torch.where(rel >= 0, prefix[:, :, None] + torch.div(rel, P, rounding_mode="floor"), col - SCRATCH)
    pos = prefix + step
    return tokens, pos, slots, Visibility(vis, pos, k_pos, pad_self)


class _SlotWriter:
    """The cache object handed to the model for one forward: `update` scatters K/V into the static buffers."""

    def __init__(self, kv: StaticKV, rows: range, slots: torch.Tensor, width: int):
        self.kv, self.rows, self.slots, self.width = kv, rows, slots, width

    is_initialized = True  # transformers 4.x Gemma 3 asks (to treat image tokens at prefill); no images here

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """transformers 4.x derives `cache_position` from this when none is given; positions here come from
        position_ids and masks from ssd_runtime.attention, so the value is never used for either."""
        return 0

    def update(self, key: torch.Tensor, value: torch.Tensor, layer_idx: int, *args, **kwargs):
        kv, (R, H, P, D) = self.kv, key.shape
        if layer_idx == len(kv.keys):  # first forward: allocate this layer
            kv.keys.append(key.new_zeros(kv.max_rows, H, kv.capacity, D))
            kv.values.append(value.new_zeros(kv.max_rows, H, kv.capacity, D))
        idx = self.slots[:, None, :, None].expand(R, H, P, D)
        k = kv.keys[layer_idx][self.rows.start:self.rows.stop]
        v = kv.values[layer_idx][self.rows.start:self.rows.stop]
        k.scatter_(2, idx, key.to(k.dtype))
        v.scatter_(2, idx, value.to(v.dtype))
        return k[:, :, :self.width], v[:, :, :self.width]


@functools.cache
def eager_writer() -> type:
    """_SlotWriter whose update runs eagerly even when called from a compiled layer (a graph break there): it picks
    the layer's buffers by layer_idx from a list and allocates them on a first forward, so Dynamo would compile each
    layer apart. Eager, every layer runs one compiled code (models.compile_forward's regional compilation)."""
    return type("_EagerSlotWriter", (_SlotWriter,), {"update": torch.compiler.disable(_SlotWriter.update)})
