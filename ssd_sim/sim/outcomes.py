"""Verification outcomes of the simulated sequences, drawn in vectorised numpy blocks.

One sequence's decode is a stream of rounds. In round j the target verifies K draft tokens and
accepts k_j of them (plus the bonus token); in SSD the proposal of round j came either from the
speculation cache (a hit) or from the backup (a miss). Round j + 1 hits iff the draft had cached the
realised outcome (k_j, bonus token), which happens with the hit probability of the fan-out it gave
position k_j:

    served from the cache   -> F = fan_out[k_j],      curve = primary_hit
    served by the jit backup -> F = fan_out_miss[k_j], curve = primary_hit   (same model and sampler)
    served by the fast backup -> k_j = 0 (random tokens), F = fan_out_miss[0], curve = backup_hit

This is plan/predict.py's hit chain, drawn instead of averaged. A sequence's rounds depend only on its own
draws, so its whole stream is drawn at once when it is admitted (`build_stream`); the event model only
reads it. Sources of draws: `ModelOutcomes` (an AcceptancePoint + plan), `ReplayOutcomes` (the empirical
(accepted, bonus_rank) sequences of an ssd-run trace) and `ForcedOutcomes` (fixed lists, for tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import Trace
from ssd_sim.model.acceptance import AcceptancePoint
from ssd_sim.plan.plan import Plan


@dataclass(frozen=True)
class OutcomeTables:
    """Outcome probabilities of one configuration, per stopping position k = 0..K."""

    K: int  # draft tokens per round (tokens)
    accept_pmf: np.ndarray  # P(k accepted), k = 0..K
    hit_after_cache: np.ndarray  # P(next round hits | this round served from the cache, k)
    hit_after_jit: np.ndarray  # P(next round hits | this round served by the jit backup, k)
    hit_after_fast: float  # P(next round hits | this round served by the fast backup; k = 0)

    @classmethod
    def from_point(cls, acc: AcceptancePoint, plan: Plan) -> OutcomeTables:
        """Tables of a plan at one acceptance point (acceptance.at(T, C))."""
        K = plan.K
        fo, fm = np.asarray(plan.fan_out), np.asarray(plan.fan_out_miss)
        return cls(
            K=K,
            accept_pmf=acc.pmf(K),
            hit_after_cache=acc.primary_hit.hit(fo),
            hit_after_jit=acc.primary_hit.hit(fm),
            hit_after_fast=float(acc.backup_hit.hit(fm)[0]),  # position 0 of the K + 1 list
        )

    @property
    def accept_cdf(self) -> np.ndarray:
        c = np.cumsum(self.accept_pmf)
        c[-1] = 1.0  # guard against rounding: every uniform draw maps to some k <= K
        return c


@dataclass
class Draws:
    """Raw per-round draws of one sequence, before the hit chain picks the branch actually taken."""

    accepted: np.ndarray  # k if the proposal is a real draft (cache or jit), tokens
    next_hit_cache: np.ndarray  # bool: next round hits if this round was served from the cache
    next_hit_jit: np.ndarray  # bool: ... if it was served by the jit backup
    next_hit_fast: np.ndarray  # bool: ... if it was served by the fast backup (k = 0)


class ModelOutcomes:
    """Draws from the acceptance model: k from the per-position pmf, hits from the hit curves."""

    def __init__(self, tables: OutcomeTables):
        self.tables = tables
        self._cdf = tables.accept_cdf

    def draws(self, rng: np.random.Generator, seq: int, start: int, n: int) -> Draws:
        t = self.tables
        k = np.searchsorted(self._cdf, rng.random(n), side="right")
        u = rng.random(n)
        return Draws(k, u < t.hit_after_cache[k], u < t.hit_after_jit[k], u < t.hit_after_fast)


class ForcedOutcomes:
    """Fixed outcomes for tests: per sequence, a list of accepted counts and of next-round hits.

    Lists are cycled; sequence i uses entry i % len(lists). The same next-hit list serves every backup.
    """

    def __init__(self, accepted: list[list[int]], next_hit: list[list[bool]] | None = None):
        self.accepted = [np.asarray(a, dtype=int) for a in accepted]
        hits = next_hit if next_hit is not None else [[False]] * len(accepted)
        self.next_hit = [np.asarray(h, dtype=bool) for h in hits]

    def draws(self, rng: np.random.Generator, seq: int, start: int, n: int) -> Draws:
        idx = start + np.arange(n)
        a = self.accepted[seq % len(self.accepted)]
        h = self.next_hit[seq % len(self.next_hit)]
        hit = h[idx % len(h)]
        return Draws(a[idx % len(a)], hit, hit, hit)


class ReplayOutcomes:
    """Replays the empirical (accepted, bonus_rank) sequences of a trace under the simulated plan.

    Simulated sequence i replays trace sequence i % n (its rounds in order, wrapping around), so the
    correlation of outcomes within a sequence (easy and hard prompts) is kept. The next round hits iff
    bonus_rank < F_k of the simulated plan's fan-out list. Where the trace does not say (bonus_rank unknown,
    k clipped to a smaller simulated K, or a fast-backup round) the hit is drawn from the model instead.
    Rounds the trace served with the fast backup are skipped: their k = 0 says nothing about the draft.
    """

    def __init__(self, sequences: list[tuple[np.ndarray, np.ndarray]], tables: OutcomeTables, plan: Plan):
        if not sequences:
            raise ConfigError("replay", "the trace has no usable rounds (need rounds with per-sequence outcomes)")
        self.sequences = sequences
        self.tables = tables
        self.fan_out = np.asarray(plan.fan_out)
        self.fan_out_miss = np.asarray(plan.fan_out_miss)
        self.K = plan.K

    @classmethod
    def from_trace(cls, trace: Trace, tables: OutcomeTables, plan: Plan) -> ReplayOutcomes:
        """Per-sequence (accepted, bonus_rank) arrays of a trace; bonus_rank -1 = unknown."""
        k_trace = max((r["K"] for r in trace.rounds), default=0)
        if trace.mode != "ar" and k_trace < plan.K:
            raise ConfigError("replay", f"the trace ran K = {k_trace} but the plan has K = {plan.K}: "
                              f"replay needs a trace with K >= the plan's K (pass -k {k_trace} or less)")
        per_seq: dict[int, list[tuple[int, int]]] = {}
        for r in trace.rounds:
            for s in r["seqs"]:
                if s.get("backup") == "fast" and not s.get("hit"):
                    continue
                rank = s.get("bonus_rank")
                k = int(s["accepted"])
                known = rank is not None and k < plan.K  # at k >= K the bonus is another token
                per_seq.setdefault(int(s["seq"]), []).append((min(k, plan.K), int(rank) if known else -1))
        seqs = [(np.array([k for k, _ in v]), np.array([q for _, q in v])) for _, v in sorted(per_seq.items())]
        return cls([s for s in seqs if s[0].size], tables, plan)

    def draws(self, rng: np.random.Generator, seq: int, start: int, n: int) -> Draws:
        acc, rank = self.sequences[seq % len(self.sequences)]
        idx = (start + np.arange(n)) % acc.size
        k, q = acc[idx], rank[idx]
        t = self.tables
        u = rng.random(n)  # the model's hit draw, used where the trace does not know the rank
        after_cache = np.where(q >= 0, q < self.fan_out[k], u < t.hit_after_cache[k])
        after_jit = np.where(q >= 0, q < self.fan_out_miss[k], u < t.hit_after_jit[k])
        return Draws(k, after_cache, after_jit, u < t.hit_after_fast)


def hit_chain(first_hit: bool, after_hit: np.ndarray, after_miss: np.ndarray) -> np.ndarray:
    """hit[0] = first_hit, hit[j + 1] = after_hit[j] if hit[j] else after_miss[j], without a Python loop.

    Each step is one of four boolean maps: constant (after_hit == after_miss), identity (hit, not miss) or
    negation (miss, not hit). So hit[j + 1] is the value of the last constant step at or before j (or
    first_hit if none), flipped once per negation since then.
    """
    n = after_hit.size
    if n == 0:
        return np.zeros(0, dtype=bool)
    const = after_hit == after_miss
    negate = ~after_hit & after_miss
    idx = np.arange(n)
    last_const = np.maximum.accumulate(np.where(const, idx, -1))
    negs = np.cumsum(negate)
    has_const = last_const >= 0
    lc = np.where(has_const, last_const, 0)
    base = np.where(has_const, after_hit[lc], first_hit)
    flips = negs - np.where(has_const, negs[lc], 0)
    after = base ^ (flips & 1).astype(bool)
    return np.concatenate([[bool(first_hit)], after[:-1]])


@dataclass
class Stream:
    """One sequence's decode rounds (its own round index j = 0..rounds-1). Units: tokens."""

    accepted: np.ndarray  # draft tokens accepted in round j (0 on fast-backup rounds and in AR)
    committed: np.ndarray  # tokens appended in round j (accepted + bonus, capped at the output length)
    hit: np.ndarray | None  # SSD: round j's proposal came from the cache (False = from the backup)
    backup: str | None = None  # SSD: backup the stream was drawn for (jit | fast)

    @property
    def rounds(self) -> int:
        return int(self.committed.size)

    def splice(self, at: int, tail: Stream) -> Stream:
        """This stream's first `at` rounds followed by `tail` (a redraw after the backup changed)."""
        hit = None if self.hit is None else np.concatenate([self.hit[:at], tail.hit])
        return Stream(np.concatenate([self.accepted[:at], tail.accepted]),
                      np.concatenate([self.committed[:at], tail.committed]), hit, tail.backup)


def build_stream(source, rng: np.random.Generator, mode: str, need: int, seq: int = 0, start: int = 0,
                 first_hit: bool = False, backup: str = "jit") -> Stream:
    """Draw the rounds that produce `need` more tokens of sequence `seq`, from its round `start` on.

    mode: ar (one token per round), sd, or ssd (hit chain from first_hit; a new sequence's first round
    always misses). Every round commits >= 1 token, so `need` rounds of draws always suffice.
    """
    if need <= 0:
        empty = np.zeros(0, dtype=int)
        return Stream(empty, empty, np.zeros(0, dtype=bool) if mode == "ssd" else None, backup)
    if mode == "ar":
        return Stream(np.zeros(need, dtype=int), np.ones(need, dtype=int), None)
    d = source.draws(rng, seq, start, need)
    if mode == "sd":
        hit, k = None, d.accepted
    else:
        after_miss = d.next_hit_fast if backup == "fast" else d.next_hit_jit
        hit = hit_chain(first_hit, d.next_hit_cache, after_miss)
        k = d.accepted if backup != "fast" else np.where(hit, d.accepted, 0)
    total = np.cumsum(k + 1)
    rounds = int(np.searchsorted(total, need)) + 1
    committed = k[:rounds] + 1
    committed[-1] -= int(total[rounds - 1]) - need
    return Stream(k[:rounds].copy(), committed, None if hit is None else hit[:rounds].copy(),
                  backup if mode == "ssd" else None)
