"""BatchKV: a KV cache for a batch of sequences at different lengths, with per-row rollback.

Rows live in one transformers DynamicCache ([rows, heads, slots, head_dim] per layer). A slot may be a
*hole* (left padding, or a rejected draft token of one row while other rows kept theirs); `valid`
marks the slots a row may attend to, and `toks[r]` lists the row's logical tokens in slot order.
Every forward passes explicit position ids (a token's position = how many valid slots its row has
before it) and a 4D float mask (0 = visible, finfo.min = hidden), so holes cost a little memory and
attention work but never change results. Rolling back keeps a row's first n logical tokens and crops
slots no row uses any more; `compact()` squeezes holes out when they pile up.

Both the target (verify) and the draft (prefill, backup, glue, branch decode) use this one class.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch
from transformers import DynamicCache


class BatchKV:
    """KV cache + per-row validity for `rows` sequences of one model. Units: slots = token positions."""

    def __init__(self, model: torch.nn.Module, rows: int, compact_slack: int = 32):
        self.model = model
        self.device = next(model.parameters()).device if any(True for _ in model.parameters()) else \
            torch.device("cpu")
        self.dtype = _float_dtype(model)
        self.cache = DynamicCache()
        self.valid = torch.zeros(rows, 0, dtype=torch.bool, device=self.device)
        self.toks: list[list[int]] = [[] for _ in range(rows)]
        self.compact_slack = compact_slack  # compact() when this many slot columns are unused by every row
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    @property
    def rows(self) -> int:
        return len(self.toks)

    @property
    def slots(self) -> int:
        return int(self.valid.shape[1])

    def lengths(self) -> list[int]:
        """Logical tokens cached per row (= position id of the row's next token)."""
        return [len(t) for t in self.toks]

    # ---- forward -------------------------------------------------------------------------------
    @torch.no_grad()
    def forward(self, inputs: Sequence[Sequence[int]], keep: int = 1) -> torch.Tensor:
        """Append each row's tokens (rows may differ in length; shorter rows are left-padded with holes).

        Returns float32 logits [rows, keep, vocab] for the last `keep` input positions of every row
        (right-aligned: position -1 is each row's last token; positions before a short row's first
        token are padding and meaningless).
        """
        b, P = self.rows, max((len(x) for x in inputs), default=0)
        assert len(inputs) == b, f"{len(inputs)} input rows for a cache of {b} rows"
        if P == 0:
            raise ValueError("forward needs at least one token in some row")
        dev = self.device
        lens = torch.tensor([len(x) for x in inputs], device=dev)
        real = torch.arange(P, device=dev)[None, :] >= (P - lens)[:, None]  # [b, P] left padding
        ids = torch.zeros(b, P, dtype=torch.long, device=dev)
        for r, x in enumerate(inputs):
            if len(x):
                ids[r, P - len(x):] = torch.tensor(list(x), dtype=torch.long, device=dev)
        start = torch.tensor(self.lengths(), device=dev)
        pos = (start[:, None] + torch.arange(P, device=dev)[None, :] - (P - lens)[:, None]).clamp(min=0)
        mask = self._mask(real, P)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True,
                         logits_to_keep=keep, **{self._cache_kw: self.cache})
        self.valid = torch.cat([self.valid, real], dim=1)
        for r, x in enumerate(inputs):
            self.toks[r].extend(int(t) for t in x)
        return out.logits[:, -keep:].float()

    def _mask(self, real: torch.Tensor, P: int) -> torch.Tensor:
        """4D additive mask [b, 1, P, slots + P]: cached valid slots + causal over this call's real tokens."""
        b, L = self.rows, self.slots
        causal = torch.tril(torch.ones(P, P, dtype=torch.bool, device=self.device))
        new = causal[None] & real[:, None, :]
        new |= torch.eye(P, dtype=torch.bool, device=self.device)[None]  # padding queries see themselves
        vis = torch.cat([self.valid[:, None, :].expand(b, P, L), new], dim=2)
        mask = torch.zeros(b, 1, P, L + P, dtype=self.dtype, device=self.device)
        return mask.masked_fill_(~vis[:, None], torch.finfo(self.dtype).min)

    # ---- rollback ------------------------------------------------------------------------------
    def truncate(self, keep: Sequence[int]) -> None:
        """Keep each row's first keep[r] logical tokens; later slots become holes, unused columns are cropped."""
        n = torch.tensor(list(keep), device=self.device)
        self.valid &= self.valid.cumsum(dim=1) <= n[:, None]
        self.toks = [t[:k] for t, k in zip(self.toks, keep, strict=True)]
        used = self.valid.any(dim=0).nonzero()
        self._crop(int(used.max()) + 1 if used.numel() else 0)
        if self.slots - max(self.lengths(), default=0) >= self.compact_slack:
            self.compact()

    def rollback_to(self, wanted: Sequence[Sequence[int]]) -> list[list[int]]:
        """Keep, per row, the longest cached prefix of `wanted` (at most all but its last token).

        Returns the tokens each row still has to forward (never empty), so the next forward ends with the
        row's last wanted token and yields the logits after it.
        """
        keep = []
        for cached, want in zip(self.toks, wanted, strict=True):
            n, m = 0, min(len(cached), len(want) - 1)
            while n < m and cached[n] == want[n]:
                n += 1
            keep.append(n)
        self.truncate(keep)
        return [list(w[n:]) for w, n in zip(wanted, keep, strict=True)]

    def _crop(self, slots: int) -> None:
        if slots >= self.slots:
            return
        for layer in self._layers():
            layer.keys, layer.values = layer.keys[..., :slots, :], layer.values[..., :slots, :]
        self.valid = self.valid[:, :slots]

    def compact(self) -> None:
        """Move each row's valid slots to the right end (left padding), dropping columns nobody uses."""
        width = max(self.lengths(), default=0)
        if width == self.slots:
            return
        order = torch.sort(self.valid.to(torch.int8), dim=1, stable=True).indices[:, self.slots - width:]
        for layer in self._layers():
            idx = order[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[3])
            layer.keys, layer.values = layer.keys.gather(2, idx), layer.values.gather(2, idx)
        self.valid = self.valid.gather(1, order)

    # ---- rows ----------------------------------------------------------------------------------
    def select(self, rows: Sequence[int]) -> BatchKV:
        """A new BatchKV holding copies of the given rows (repeats allowed: branch rows share a prefix)."""
        idx = torch.tensor(list(rows), dtype=torch.long, device=self.device)
        new = BatchKV.__new__(BatchKV)
        new.model, new.device, new.dtype = self.model, self.device, self.dtype
        new.compact_slack, new._cache_kw = self.compact_slack, self._cache_kw
        layers = self._layers()
        new.cache = DynamicCache(ddp_cache_data=[(lay.keys[idx], lay.values[idx]) for lay in layers]) \
            if layers else DynamicCache()
        new.valid = self.valid[idx]
        new.toks = [list(self.toks[i]) for i in rows]
        return new

    def _layers(self) -> list:
        """The cache's initialised layers (each with .keys / .values [rows, heads, slots, head_dim])."""
        return [lay for lay in getattr(self.cache, "layers", []) if getattr(lay, "is_initialized", False)
                and lay.keys is not None and lay.keys.numel() > 0]


def _float_dtype(model: torch.nn.Module) -> torch.dtype:
    """The activation dtype of a model (float32 for int8-quantised models)."""
    for p in model.parameters():
        if p.is_floating_point():
            return p.dtype
    return torch.float32
