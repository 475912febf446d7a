"""Continuous batching: which sequences the target decodes in each round, and their outcome streams.

The target owns all sequence state (as in the reference engine). At each round boundary the scheduler
admits requests that have arrived (first come, first served) while fewer than `max_batch` sequences are
active; a sequence leaves in the round that completes its output. Each admitted sequence has its whole
outcome stream drawn in blocks of at most BLOCK_ROUNDS rounds (ssd_sim.sim.outcomes.build_stream), so a round
costs O(1) Python and memory is O(max_batch x BLOCK_ROUNDS) whatever the output length: between changes of the
batch or of a block (an "epoch", at most EPOCH_ROUNDS rounds) the number of rows that miss in each round is summed
over the active streams with numpy. Finished sequences are kept as one row of numbers each (SeqRecords).

When the backup depends on the batch size (adaptive) and the batch size changes, the streams of the
active sequences are redrawn from their current round with the new backup.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ssd_sim.sim.metrics import RoundCounts, SeqRecords
from ssd_sim.sim.outcomes import Stream, build_stream, next_block, redraw
from ssd_sim.sim.workload import Requests

EPOCH_ROUNDS = 4096  # longest stretch of rounds whose miss counts are precomputed at once
_NO_MISSES = [0] * EPOCH_ROUNDS


class Seq:
    """One admitted sequence. Times in ms; its stream position in round r is r - offset."""

    __slots__ = ("id", "arrival_ms", "output", "prefill_token", "stream", "offset", "first_token_ms", "first_tokens")

    def __init__(self, id: int, arrival_ms: float, output: int, prefill_token: int, stream: Stream, offset: int):
        self.id = id
        self.arrival_ms = arrival_ms
        self.output = output  # output tokens in all
        self.prefill_token = prefill_token  # 1 if the prefill produced the first token
        self.stream = stream  # the current block of decode rounds producing output - prefill_token tokens
        self.offset = offset
        self.first_token_ms = math.nan
        self.first_tokens = prefill_token  # tokens produced at first_token_ms (the prefill's, else round 0's)


class Batcher:
    """Continuous-batching scheduler plus the per-round miss counts of the active sequences."""

    def __init__(self, requests: Requests, max_batch: int, mode: str, source, rng: np.random.Generator,
                 backup_for: Callable[[int], str], K: int, on_epoch: Callable[[Batcher], None] | None = None,
                 track_context: bool = False):
        """track_context: keep the batch's mean context per round (mean_context), for latencies that depend on it."""
        self.requests = requests
        self.max_batch = max_batch
        self.mode = mode  # ar | sd | ssd
        self.source = source
        self.rng = rng
        self.backup_for = backup_for
        self.on_epoch = on_epoch
        self.round = 0  # decode rounds completed
        self.active: list[Seq] = []
        self.backup: str | None = None  # SSD: backup of the current batch size (jit | fast)
        self.records = SeqRecords(len(requests))
        self.counts = RoundCounts(K)
        self.finished_tokens = 0
        self.last_finish_ms = 0.0
        self._next = 0  # next request to admit (requests are sorted by arrival)
        self.next_arrival_ms = float(requests.arrival_ms[0]) if len(requests) else math.inf
        self._awaiting_first: list[Seq] = []
        self._admitted_at = -1  # the round before which requests were last admitted
        self._misses: list[int] = _NO_MISSES
        self._i = 0  # round within the epoch
        self._len = 0  # rounds in the epoch (0 = recompute before the next round)
        self.track_context = track_context
        self._context: list[float] = []  # the epoch's mean context per round (tokens per row), when tracked

    @property
    def size(self) -> int:
        """Active sequences (the batch size of the next round)."""
        return len(self.active)

    @property
    def done(self) -> bool:
        return self._next >= len(self.requests) and not self.active

    def can_admit(self, now: float) -> bool:
        """A request has arrived by `now` and there is room for it."""
        return self.next_arrival_ms <= now and len(self.active) < self.max_batch

    def admit(self, now: float) -> tuple[list[Seq], int]:
        """Admit arrived requests while there is room (FCFS). Returns them and their prompt tokens."""
        new: list[Seq] = []
        while self.can_admit(now):
            i = self._next
            self._next += 1
            self.next_arrival_ms = (float(self.requests.arrival_ms[self._next])
                                    if self._next < len(self.requests) else math.inf)
            new.append(Seq(i, float(self.requests.arrival_ms[i]), int(self.requests.output_tokens[i]),
                           int(self.requests.prompt_tokens[i] > 0), None, self.round))
            self.active.append(new[-1])
        backup = self.backup_for(len(self.active)) if self.mode == "ssd" else None
        for s in new:
            s.stream = build_stream(self.source, self.rng, self.mode, s.output - s.prefill_token, seq=s.id,
                                    backup=backup or "jit")
            if not s.prefill_token:
                s.first_tokens = int(s.stream.committed[0])
        if new:
            self._len = 0  # the batch changed: recompute the epoch before the next round
            self._admitted_at = self.round
        prompt = int(sum(int(self.requests.prompt_tokens[s.id]) for s in new))
        return new, prompt

    def started(self, new: list[Seq], now: float) -> None:
        """The admitted sequences' prefill ended at `now` (it produced their first token, if any)."""
        for s in new:
            if s.prefill_token:
                s.first_token_ms = now
            else:
                self._awaiting_first.append(s)
        if any(s.stream.final and s.stream.rounds == 0 for s in new):  # one-token outputs end with the prefill
            self._retire(now)

    def fresh_rows(self) -> int:
        """Active sequences in their request's first decode round (admitted since the last round ended)."""
        if self._admitted_at != self.round:
            return 0
        return sum(1 for s in self.active if s.offset == self.round)

    def begin_round(self) -> int:
        """Start a round with the active batch; returns how many rows miss the cache (SSD; else 0)."""
        if self._i >= self._len:
            self._new_epoch()
        return self._misses[self._i]

    def commit(self, now: float) -> None:
        """The round's verification ended at `now`: tokens are appended, finished sequences leave."""
        self._i += 1
        self.round += 1
        if self._awaiting_first:
            for s in self._awaiting_first:
                s.first_token_ms = now
            self._awaiting_first.clear()
        if self._i >= self._len:
            self._retire(now)

    def mean_context(self) -> float:
        """The current round's mean KV context over the active rows (tokens: prompt plus tokens committed before the
        round); 0.0 unless tracked. Call after begin_round."""
        return self._context[self._i] if self.track_context else 0.0

    def tokens_done(self) -> int:
        """Output tokens produced so far (finished sequences plus progress of the active ones)."""
        return self.finished_tokens + sum(
            s.prefill_token + s.stream.tokens_before(self.round - s.offset - s.stream.base) for s in self.active)

    def _new_epoch(self) -> None:
        for s in self.active:
            if self.round - s.offset >= s.stream.end:  # a used-up block of an unfinished sequence
                self.counts.add(s.stream)
                s.stream = next_block(s.stream, self.source, self.rng, s.id)
        if self.mode == "ssd":
            self.backup = self.backup_for(len(self.active))
            for s in self.active:
                if s.stream.backup != self.backup:
                    self._redraw(s)
        positions = [self.round - s.offset - s.stream.base for s in self.active]  # within each block
        left = min(s.stream.rounds - p for s, p in zip(self.active, positions, strict=True))
        self._len = min(left, EPOCH_ROUNDS)
        self._i = 0
        if self.mode == "ssd":
            misses = np.zeros(self._len, dtype=np.int64)
            for s, p in zip(self.active, positions, strict=True):
                misses += ~s.stream.hit[p:p + self._len]
            self._misses = misses.tolist()
        else:
            self._misses = _NO_MISSES
        if self.track_context:
            self._context = self._epoch_context(positions)
        if self.on_epoch is not None:
            self.on_epoch(self)

    def _epoch_context(self, positions: list[int]) -> list[float]:
        """The mean context of each round of the epoch (tokens per row): what every active row held at its start,
        plus the tokens the rows commit in the epoch's earlier rounds."""
        prompts = self.requests.prompt_tokens
        held = sum(int(prompts[s.id]) + s.prefill_token + s.stream.tokens_before(p)
                   for s, p in zip(self.active, positions, strict=True))
        added = np.zeros(self._len, dtype=np.int64)
        for s, p in zip(self.active, positions, strict=True):
            added += s.stream.committed[p:p + self._len]
        before = held + np.concatenate([[0], np.cumsum(added[:-1])])
        return (before / len(self.active)).tolist()

    def _redraw(self, s: Seq) -> None:
        """Redraw a sequence's remaining rounds for the current backup (its next lookup stays as drawn)."""
        at = self.round - s.offset - s.stream.base
        self.counts.add(s.stream, 0, at)  # the rounds already decoded with the old backup
        s.stream = redraw(s.stream, at, self.source, self.rng, s.id, self.backup)

    def _retire(self, now: float) -> None:
        still = []
        for s in self.active:
            if s.stream.final and self.round - s.offset >= s.stream.end:
                self._finish(s, now)
            else:
                still.append(s)
        if len(still) != len(self.active):
            self.active = still
            self._len = 0

    def _finish(self, s: Seq, now: float) -> None:
        self.records.append(s.arrival_ms, s.first_token_ms, now, s.output, s.output - s.first_tokens)
        self.counts.add(s.stream)
        self.finished_tokens += s.output
        self.last_finish_ms = now
