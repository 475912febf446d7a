"""Metrics of a simulated run: the same vocabulary as ssd_sim.io.trace.TraceMetrics, plus latency percentiles.

Definitions (units: ms, tokens, tok/s; rates and busy shares in [0, 1]):
- TTFT = first token time - arrival (queueing + prefill; without prefill, through the first round).
- TPOT = decode time / decode tokens of one sequence, decode = after its first token (vLLM convention).
- per_seq_tok_s = sum of decode tokens / sum of decode time over sequences (= 1000 / token-weighted TPOT),
  the steady-state per-sequence speed the closed forms predict.
- total_tok_s = all output tokens / simulated wall time (arrival of the first request to the last finish).
- mean_accept_len includes the bonus token; acceptance_rate = accepted / drafted; hit rates exclude each
  sequence's first round (it cannot hit); primary / backup hit rate = P(next round hits | this round was
  served from the cache / by the backup).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from ssd_sim.sim.outcomes import Stream


class SeqRecords:
    """Finished sequences, one row each in numpy columns (a million requests take 40 MB). Times in ms from the start
    of the run, lengths in tokens; decode tokens are those after the first token's time."""

    def __init__(self, capacity: int):
        self.n = 0
        self.arrival_ms = np.empty(capacity)
        self.first_token_ms = np.empty(capacity)
        self.finish_ms = np.empty(capacity)
        self.output_tokens = np.empty(capacity, dtype=np.int64)
        self.decode_tokens = np.empty(capacity, dtype=np.int64)

    def append(self, arrival_ms: float, first_token_ms: float, finish_ms: float, output_tokens: int,
               decode_tokens: int) -> None:
        i = self.n
        self.arrival_ms[i], self.first_token_ms[i], self.finish_ms[i] = arrival_ms, first_token_ms, finish_ms
        self.output_tokens[i], self.decode_tokens[i] = output_tokens, decode_tokens
        self.n += 1

    def __len__(self) -> int:
        return self.n

    @property
    def ttft_ms(self) -> np.ndarray:
        return self.first_token_ms[: self.n] - self.arrival_ms[: self.n]

    @property
    def decode_ms(self) -> np.ndarray:
        return self.finish_ms[: self.n] - self.first_token_ms[: self.n]

    @property
    def total_output_tokens(self) -> int:
        return int(self.output_tokens[: self.n].sum())


class RoundCounts:
    """Outcome counts summed over the (sequence, round) pairs of finished sequences."""

    def __init__(self, K: int):
        self.K = K
        self.seq_rounds = 0
        self.accepted = 0
        self.looked = 0  # SSD lookups that could hit (every round but a sequence's first)
        self.hits = 0
        self.tokens_hit = 0
        self.tokens_miss = 0
        self.after_hit = [0, 0]  # [rounds served from the cache followed by another round, of which hit next]
        self.after_miss = [0, 0]  # the same after a round served by the backup
        self.k_hist = np.zeros(K + 1, dtype=np.int64)

    def add(self, stream: Stream, lo: int = 0, hi: int | None = None) -> None:
        """Count rounds lo..hi - 1 of one block of a sequence's stream (default: the whole block).

        The lookup of a sequence's first round cannot hit and is not counted; a later block's first round is,
        paired with the hit of the round before it (stream.prev_hit).
        """
        hi = stream.rounds if hi is None else hi
        k = stream.accepted[lo:hi]
        self.seq_rounds += k.size
        self.accepted += int(k.sum())
        self.k_hist += np.bincount(k, minlength=self.K + 1)[: self.K + 1]
        if stream.hit is None or k.size == 0:
            return
        prev = stream.hit[lo - 1] if lo > 0 else stream.prev_hit
        hit, tok = stream.hit[lo:hi], stream.committed[lo:hi]
        if prev is None:  # the sequence's first round: its lookup cannot hit
            before, hit, tok = hit[:-1], hit[1:], tok[1:]
        else:
            before = np.concatenate([[bool(prev)], hit[:-1]])
        self.looked += hit.size
        self.hits += int(hit.sum())
        self.tokens_hit += int(tok[hit].sum())
        self.tokens_miss += int(tok[~hit].sum())
        self.after_hit[0] += int(before.sum())
        self.after_hit[1] += int((before & hit).sum())
        self.after_miss[0] += int((~before).sum())
        self.after_miss[1] += int((~before & hit).sum())

    def per_position_acceptance(self) -> list[float]:
        """P(position i accepted | positions < i accepted), i = 1..K (NaN where never reached)."""
        reached = self.k_hist[::-1].cumsum()[::-1]  # reached[i] = rounds with k >= i
        tried, passed = reached[: self.K], reached[1:]
        with np.errstate(invalid="ignore", divide="ignore"):
            return [float(v) for v in np.where(tried > 0, passed / np.maximum(tried, 1), np.nan)]


@dataclass(frozen=True)
class SimMetrics:
    """What a simulated run measured. Units: tok/s, ms, tokens; shares in [0, 1]."""

    mode: str  # ar | sd | ssd | ssd-fast | ssd-adaptive
    batch_size: int  # most sequences decoded together
    num_speculative_tokens: int  # K (0 for ar)
    sequences: int
    output_tokens: int  # all sequences (tokens)
    rounds: int  # target verification rounds (AR: steps)
    sim_ms: float  # simulated wall time (ms)
    per_seq_tok_s: float
    total_tok_s: float
    devices: int  # target devices (+ draft devices in SSD)
    tok_s_per_device: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    tpot_ms_p99: float
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    mean_batch: float  # active sequences per round, averaged over rounds
    round_ms: float  # mean decode round (ms)
    mean_accept_len: float  # tokens per sequence per round incl. the bonus
    acceptance_rate: float  # accepted / drafted
    per_position_acceptance: tuple[float, ...]
    hit_rate: float | None  # SSD: hits / lookups
    primary_hit_rate: float | None  # SSD: P(next hits | served from the cache)
    backup_hit_rate: float | None  # SSD: P(next hits | served by the backup)
    tokens_per_round_hit: float | None  # SSD: committed tokens per round served from the cache
    tokens_per_round_miss: float | None  # SSD: ... served by the backup
    all_hit_rounds: float | None  # SSD: share of rounds in which every sequence hit
    backup_rounds: dict[str, int]  # SSD: rounds that ran each backup (jit, fast)
    target_busy: float  # share of wall time the target computes (prefill, draft-on-target, verify)
    draft_busy: float  # SSD: share of wall time draft device 0 computes (prefill, lookup, backup, glue, branch)
    target_wait_ms: float  # SSD: total time the target waits for the draft's reply (ms)
    target_wait_share: float  # SSD: target_wait_ms / wall time
    phase_ms: dict[str, float] = field(default_factory=dict)  # mean ms per round of each phase

    def to_dict(self) -> dict:
        d = asdict(self)
        d["per_position_acceptance"] = list(self.per_position_acceptance)
        return d

    def to_json(self) -> str:
        return json.dumps(json_safe(self.to_dict()), indent=2)


def json_safe(x):
    """A copy of nested dicts / lists with NaN and inf replaced by None (JSON has neither)."""
    if isinstance(x, float) and not np.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


def percentiles(values, qs=(50, 90, 99)) -> list[float]:
    """Percentiles (linear interpolation) of a list or array; NaN for an empty one."""
    v = np.asarray(values, dtype=float)
    if v.size <= 1:  # every percentile of one value is that value (numpy's call costs ~0.1 ms per run)
        return [float(v[0]) if v.size else float("nan")] * len(qs)
    return [float(x) for x in np.percentile(v, qs)]


def tok_rates(records: SeqRecords, sim_ms: float) -> tuple[float, float]:
    """(per-sequence decode tok/s, total output tok/s) of finished sequences."""
    decode_tokens = int(records.decode_tokens[: records.n].sum())
    decode_ms = float(records.decode_ms.sum())
    per_seq = decode_tokens / decode_ms * 1e3 if decode_ms > 0 else float("nan")
    total = records.total_output_tokens / sim_ms * 1e3 if sim_ms > 0 else float("nan")
    return per_seq, total


def tpots(records: SeqRecords) -> np.ndarray:
    """TPOT of every sequence that decoded at least one token after its first (ms)."""
    dec = records.decode_tokens[: records.n]
    keep = dec > 0
    return records.decode_ms[keep] / dec[keep]


def ratio(num: float, den: float) -> float | None:
    return num / den if den else None
