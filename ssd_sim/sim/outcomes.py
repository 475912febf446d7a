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
draws, so its stream is drawn when it is admitted (`build_stream`), in blocks of at most BLOCK_ROUNDS rounds
(`next_block` draws the next one, the hit chain and the source position carrying on), so a 2M-token sequence
costs the memory of one block; the event model only reads it. Sources of draws: `ModelOutcomes` (an AcceptancePoint + plan), `ReplayOutcomes` (the empirical
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

    def p_all_accepted(self, K: int) -> float:
        """P(a round accepts all K draft tokens), per sequence."""
        return float(self.tables.accept_pmf[K])

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

    def p_all_accepted(self, K: int) -> float:
        """Share of the listed rounds that accept all K draft tokens."""
        return float(np.mean(np.concatenate(self.accepted) >= K))

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

    def p_all_accepted(self, K: int) -> float:
        """Share of the replayed rounds that accept all K draft tokens (pooled over the trace's sequences)."""
        return float(np.mean(np.concatenate([k for k, _ in self.sequences]) >= K))

    @classmethod
    def from_trace(cls, trace: Trace, tables: OutcomeTables, plan: Plan) -> ReplayOutcomes:
        """Per-sequence (accepted, bonus_rank) arrays of a trace; bonus_rank -1 = unknown.

        Refused in one line (ConfigError): a trace with impossible counts (read_trace checks them), an AR
        trace (it accepted nothing: there is nothing to replay), and one that drafted fewer than the plan's K
        tokens. Rounds with K = 0 in an sd / ssd trace (the runtime's autoregressive fallback) are skipped.
        """
        where = f"trace {trace.path}" if trace.path else "the trace"
        if trace.mode == "ar":
            raise ConfigError("replay", f"{where} is an ar run: it has no accepted counts to replay into an "
                                        f"{plan.mode} plan; replay an sd or ssd trace")
        drafted = [r for r in trace.rounds if r.K > 0]
        if not drafted:
            raise ConfigError("replay", f"{where} has no drafted rounds (K > 0) to replay; was the run cut short?")
        k_trace = min((r.K for r in drafted), default=0)
        if k_trace < plan.K:
            raise ConfigError("replay", f"{where} ran K = {k_trace} but the plan has K = {plan.K}: replay needs a "
                                        f"trace with K >= the plan's K (pass -k {max(k_trace, 1)} or less)")
        per_seq: dict[int, list[tuple[int, int]]] = {}
        for r in drafted:
            for s in r.seqs:
                if s.backup == "fast" and not s.hit:
                    continue
                rank = s.bonus_rank
                k = int(s.accepted)
                known = rank is not None and k < plan.K  # at k >= K the bonus is another token
                per_seq.setdefault(int(s.seq), []).append((min(k, plan.K), int(rank) if known else -1))
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


BLOCK_ROUNDS = 4096  # most rounds of one sequence drawn at once: memory is O(batch x BLOCK_ROUNDS), not O(tokens)


@dataclass
class Stream:
    """One block of a sequence's decode rounds: its rounds base .. base + rounds - 1. Units: tokens.

    A sequence of any length is drawn block by block (`build_stream`, then `next_block` when a block is used
    up), so memory per sequence is bounded by BLOCK_ROUNDS rounds whatever its output length.
    """

    accepted: np.ndarray  # draft tokens accepted in round j (0 on fast-backup rounds and in AR)
    committed: np.ndarray  # tokens appended in round j (accepted + bonus, capped at the output length)
    hit: np.ndarray | None  # SSD: round j's proposal came from the cache (False = from the backup)
    backup: str | None = None  # SSD: backup the stream was drawn for (jit | fast)
    base: int = 0  # the sequence's round index of this block's first round
    left: int = 0  # tokens the sequence still needs after this block (0: the block ends the sequence)
    done: int = 0  # tokens committed by the sequence's earlier blocks
    prev_hit: bool | None = None  # SSD: hit of the round before the block (None: the block starts the sequence)
    next_hit: bool | None = None  # SSD: hit of the round after the block (when left > 0)
    mode: str = "ssd"  # ar | sd | ssd

    @property
    def rounds(self) -> int:
        """Rounds in this block."""
        return int(self.committed.size)

    @property
    def end(self) -> int:
        """The sequence's round index just after this block."""
        return self.base + self.rounds

    @property
    def final(self) -> bool:
        """The block ends the sequence."""
        return self.left == 0

    def tokens_before(self, i: int) -> int:
        """Tokens the sequence committed before the block's round i (earlier blocks included)."""
        return self.done + int(self.committed[:i].sum())


def _empty_stream(mode: str, backup: str, base: int, done: int, prev_hit: bool | None) -> Stream:
    empty = np.zeros(0, dtype=np.int16)
    return Stream(empty, empty, np.zeros(0, dtype=bool) if mode == "ssd" else None, backup if mode == "ssd" else None,
                  base, 0, done, prev_hit, None, mode)


def build_stream(source, rng: np.random.Generator, mode: str, need: int, seq: int = 0, start: int = 0,
                 first_hit: bool = False, backup: str = "jit", block: int | None = None, done: int = 0,
                 prev_hit: bool | None = None) -> Stream:
    """Draw the first block of rounds that produce `need` more tokens of sequence `seq`, from its round `start` on.

    mode: ar (one token per round), sd, or ssd (hit chain from first_hit; a new sequence's first round
    always misses). Every round commits >= 1 token, so min(need, block) rounds of draws end the sequence when
    need <= block; otherwise the block is full and `left` tokens remain (drawn by `next_block`). done /
    prev_hit: tokens and the last round's hit before `start` (bookkeeping for counts and progress).
    """
    if need <= 0:
        return _empty_stream(mode, backup, start, done, prev_hit)
    n = min(need, block or BLOCK_ROUNDS)
    if mode == "ar":
        k, hit, after = np.zeros(n, dtype=np.int64), None, None
    else:
        d = source.draws(rng, seq, start, n)
        hit = after = None
        k = np.asarray(d.accepted)
        if mode == "ssd":
            after_miss = d.next_hit_fast if backup == "fast" else d.next_hit_jit
            hit = hit_chain(first_hit, d.next_hit_cache, after_miss)
            after = bool(d.next_hit_cache[-1] if hit[-1] else after_miss[-1])
            if backup == "fast":
                k = np.where(hit, k, 0)
    total = np.cumsum(k + 1)
    rounds = min(int(np.searchsorted(total, need)) + 1, n)
    committed = (k[:rounds] + 1).astype(np.int16)
    left = max(need - int(total[rounds - 1]), 0)
    if left == 0:
        committed[-1] -= int(total[rounds - 1]) - need
    return Stream(k[:rounds].astype(np.int16), committed, None if hit is None else hit[:rounds].copy(),
                  backup if mode == "ssd" else None, start, left, done, prev_hit, after if left else None, mode)


def next_block(stream: Stream, source, rng: np.random.Generator, seq: int, block: int | None = None) -> Stream:
    """The block after a used-up, non-final `stream` of sequence `seq` (the hit chain and source position go on)."""
    last = None if stream.hit is None or not stream.rounds else bool(stream.hit[-1])
    return build_stream(source, rng, stream.mode, stream.left, seq=seq, start=stream.end,
                        first_hit=bool(stream.next_hit), backup=stream.backup or "jit", block=block,
                        done=stream.tokens_before(stream.rounds), prev_hit=last if last is not None else stream.prev_hit)


def redraw(stream: Stream, at: int, source, rng: np.random.Generator, seq: int, backup: str,
           block: int | None = None) -> Stream:
    """Redraw an SSD stream from its block's round `at` on for another backup (round at's lookup stays as drawn)."""
    need = stream.left + int(stream.committed[at:].sum())
    prev = bool(stream.hit[at - 1]) if at > 0 else stream.prev_hit
    return build_stream(source, rng, "ssd", need, seq=seq, start=stream.base + at, first_hit=bool(stream.hit[at]),
                        backup=backup, block=block, done=stream.tokens_before(at), prev_hit=prev)
