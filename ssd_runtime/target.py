"""The target side: owns all sequence state; per round requests a proposal, verifies, commits, rolls back.

Requests queue up (continuous batching); a free KV row takes the next one that has arrived (prefill, first token),
and it joins the next round. One round for the active sequences:
  request   SPEC with one key per sequence (seq, k accepted last round, bonus t*) -> the draft's reply
            (skipped in AR mode and after a draft fault: the proposal is then empty, K = 0);
  verify    one target forward over [t*, s_1..s_K] per row (the KV holds everything before t*), then
            `accept`: the ratio test with the exact q each s_i was sampled from (greedy matching at T = 0);
  commit    append s_1..s_k + bonus (cut at EOS / max new tokens), set each row's KV length back to its
            committed tokens but the new bonus, free the rows of finished sequences.
AR, SD and SSD run this same code, so their timings compare fairly. A trace record for round i is
written once the draft's timings of the speculation it did during round i arrive (with reply i+1).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ssd_sim.io.limits import effective_temperature
from ssd_sim.io.records import Phase, RequestRecord, RoundRecord, SeqRecord, no_timings
from ssd_sim.plan.plan import Plan

from .device import PhaseClock, model_device, now_ms
from .kv import SCRATCH, StaticKV
from .modes import decoding
from .protocol import Key, Reply, SpecMsg
from .sampling import (
    NO_TRUNCATION,
    Truncation,
    greedy,
    point_mass,
    probs_from_logits,
    sample,
    top_logprobs,
    verify_forced,
    verify_greedy,
    verify_sample,
)
from .syncs import SYNCS, to_device, to_host
from .transport import DraftFault


@dataclass
class Seq:
    """One request being generated. Times in ms since the job started."""

    sid: int
    prompt: list[int]
    arrival_ms: float = 0.0
    out: list[int] = field(default_factory=list)  # generated tokens
    last_k: int = -1  # draft tokens accepted in its last round (-1 before its first round)
    last_bonus: int = -1
    done: bool = False
    first_token_ms: float | None = None
    finish_ms: float | None = None

    def record(self) -> RequestRecord:
        """The request's line in the summary: arrival, first token and finish times (ms), output tokens."""
        return RequestRecord(self.sid, round(self.arrival_ms, 3), round(self.first_token_ms, 3),
                             round(self.finish_ms, 3), len(self.out))


@dataclass
class TargetConfig:
    """Everything the target needs to run a job (besides the model and the prompts)."""

    plan: Plan  # plan.mode is the job's mode
    max_new_tokens: int
    seed: int = 0
    eos_token_ids: tuple[int, ...] = ()
    forced_acceptance: float | None = None  # synthetic acceptance rate (not exact; pipeline tests)
    log_topn: int = 0  # SD / SSD: log the top-N distributions of target and draft at positions 0..k (0: off)
    truncation: Truncation = NO_TRUNCATION  # top-k / top-p of the distribution sampled (T > 0)


class Target:
    """Runs the rounds of one job on the target model; talks to the draft through a link (or none).

    Continuous batching: requests wait in a queue (in arrival order); whenever a row is free and the next
    request has arrived, it is prefilled into that row (the draft prefills it at the same time) and joins the
    next round. Without arrival times every request is there at the start."""

    def __init__(self, model: torch.nn.Module, cfg: TargetConfig, link=None,
                 on_round: Callable[[RoundRecord], None] | None = None,
                 on_progress: Callable[[int], None] | None = None):
        self.model, self.cfg, self.link = model, cfg, link
        self.plan, self.T = cfg.plan, effective_temperature(cfg.plan.temperature)  # greedy below GREEDY_BELOW_T
        self.decoding = decoding(cfg.plan.mode)
        self.max_batch = int(cfg.plan.batch_size)  # rows decoded together (ssd-run --max-batch sets it)
        self.device = model_device(model)
        self.gen = torch.Generator(device=self.device).manual_seed(int(cfg.seed))
        self.on_round = on_round or (lambda rec: None)
        self.on_progress = on_progress or (lambda n: None)
        self.faults: list[str] = []
        self.rounds = 0
        self.prefill_ms = 0.0
        self.requests: list[RequestRecord] = []  # per finished request: Seq.record()
        self.kv: StaticKV | None = None
        self._t0 = 0.0  # job start (now_ms)
        self._pending: RoundRecord | None = None  # waiting for the draft's timings / ranks
        self._verify_logits: torch.Tensor | None = None
        self._top: list | None = None  # last verify's target top-N per row and position (log_topn)
        self.phases = PhaseClock(self.device)
        self._pending_marks: tuple = ()  # the pending record's phase boundaries (read when it is emitted)
        self.syncs: list[int] = []  # host reads of device tensors per round, this side (syncs.SYNCS)
        self.draft_syncs: list[int] = []  # the draft's, per reply (its speculation before it included)
        self.draft_graphs: dict | None = None  # the draft's GraphCache.counts() at its last reply

    @property
    def speculative(self) -> bool:
        return self.decoding.uses_draft and self.link is not None and not self.faults

    def clock_ms(self) -> float:
        """ms since the job started, on the host clock (no device sync: the stamps that matter, first token and
        finish, are taken after the host has read those tokens, so the device work behind them is done)."""
        return now_ms() - self._t0

    # ---- a job ---------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], arrivals_ms: list[float] | None = None) -> list[list[int]]:
        """Generate for every prompt (request i arrives at arrivals_ms[i] ms, default 0); returns the ids."""
        seqs = [Seq(i, list(p), float(arrivals_ms[i]) if arrivals_ms else 0.0) for i, p in enumerate(prompts)]
        queue = deque(sorted(seqs, key=lambda s: (s.arrival_ms, s.sid)))
        longest = max((len(p) for p in prompts), default=1)
        self.kv = StaticKV.reuse(self.model, self.max_batch,
                                 SCRATCH + longest + self.cfg.max_new_tokens + self.plan.num_speculative_tokens + 2)
        self._t0 = now_ms()
        active: list[Seq] = []  # in KV-row order
        just_done: list = []
        while queue or active:
            new = []
            while queue and len(active) + len(new) < self.max_batch and queue[0].arrival_ms <= self.clock_ms():
                new.append(queue.popleft())
            if new:
                just_done += self.admit(active, new, just_done)
            elif not active:
                time.sleep(max(queue[0].arrival_ms - self.clock_ms(), 0.0) / 1e3)
                continue
            if active:
                just_done = self.round(active, just_done)
        if self.speculative and just_done:
            reply = self._call(lambda: self.link.request(SpecMsg(self.rounds, [], just_done)))
            self._finish_pending(reply)
        self._finish_pending(None)
        return [s.out for s in seqs]

    def admit(self, active: list[Seq], new: list[Seq], just_done: list[Key]) -> list[Key]:
        """Prefill new requests into free rows and sample their first token; returns keys of any that finished.

        The draft is told first (it prefills at the same time), together with the sequences that finished
        since the last round, so it frees their rows before it fills new ones."""
        if self.speculative:
            self._call(lambda: self.link.add([(s.sid, s.prompt) for s in new], list(just_done)))
        t0 = now_ms()
        rows = self.kv.add_rows(len(new))
        logits = self.kv.append([s.prompt for s in new], keep=1, rows=rows)[:, -1]
        first = greedy(logits) if self.T == 0 else sample(self._p(logits), self.gen)
        first = to_host(first)
        stamp = self.clock_ms()
        for s, tok in zip(new, first, strict=True):
            self._commit_tokens(s, [tok])
            s.last_bonus, s.first_token_ms = tok, stamp
        self.prefill_ms += now_ms() - t0
        self.on_progress(len(new))
        active += new
        return self._drop_finished(active)

    def round(self, active: list[Seq], just_done: list[Key]) -> list[Key]:
        """One verification round for the active sequences (finished ones leave `active`); returns their keys."""
        syncs_before, warm_before = SYNCS.counts["target"], self.kv.graph_warmups()
        t0 = self.phases.mark()
        reply = None
        if self.speculative:
            keys = [(s.sid, s.last_k, s.last_bonus) for s in active]
            reply = self._call(lambda: self.link.request(SpecMsg(self.rounds, keys, just_done)))
        t1 = self.phases.mark()
        self._finish_pending(reply)
        K = self.plan.num_speculative_tokens if reply is not None else 0
        drafts = reply.tokens if reply is not None else torch.zeros(len(active), 0, dtype=torch.long)
        cached = list(self.kv.lengths)
        accepted, bonus, drafts = self.verify(active, drafts, reply)  # host lists: the round's one read
        t2 = self.phases.mark()
        first = [s.last_k < 0 for s in active]
        committed = []
        for i, s in enumerate(active):
            k = accepted[i]
            committed.append(self._commit_tokens(s, drafts[i][:k] + [bonus[i]]))
            s.last_k, s.last_bonus = k, bonus[i]
        self.kv.truncate([n + 1 + k for n, k in zip(cached, accepted, strict=True)])  # all but t*
        record_seqs = list(active)
        finished = self._drop_finished(active)
        t3 = self.phases.mark()
        self.on_progress(sum(committed))
        timings = no_timings()
        if reply is not None:
            timings.update(reply.timings)
        self._log_top()
        warmup = self.kv.graph_warmups() > warm_before or bool(reply is not None and reply.warmups)
        self._pending = self._record(record_seqs, K, accepted, bonus, committed, first, reply, timings, warmup)
        self._pending_marks = (t0, t1, t2, t3)
        self.syncs.append(SYNCS.counts["target"] - syncs_before)
        if reply is not None and reply.syncs is not None:
            self.draft_syncs.append(reply.syncs)
        if reply is not None and reply.graphs is not None:
            self.draft_graphs = reply.graphs
        self.rounds += 1
        return finished

    # ---- verify --------------------------------------------------------------------------------
    def verify(self, active: list[Seq], drafts: torch.Tensor, reply: Reply | None):
        """Target forward over [t*, s_1..s_K] per row, then the acceptance rule -> host lists (accepted [b],
        bonus [b], drafts [b][K]), read from the device in one transfer (the round's only host read).

        The KV holds every committed token but the last (t*), so the forward is exactly these K + 1 tokens; they
        are put together on the device (the proposal stays where the transport left it)."""
        b, K = drafts.shape
        drafts = to_device(drafts, torch.long, self.device) if drafts.device != self.device else drafts
        bonus_in = to_device([s.last_bonus for s in active], torch.long, self.device)
        logits = self.kv.append_ids(torch.cat([bonus_in[:, None], drafts], dim=1), [K + 1] * b, keep=K + 1)
        self._verify_logits = logits if self.cfg.log_topn and K else None
        accepted, bonus = self.accept(logits, drafts, reply)
        both = to_host(torch.cat([accepted[:, None], bonus[:, None], drafts], dim=1))
        return [r[0] for r in both], [r[1] for r in both], [r[2:] for r in both]

    def _log_top(self) -> None:
        """The target's top-N per row and position of the last verify (outside the timed phases: trace cost)."""
        logits, self._verify_logits = self._verify_logits, None
        if logits is not None:
            b, w, V = logits.shape
            flat = top_logprobs(logits.reshape(-1, V), self.cfg.log_topn)
            self._top = [flat[r * w:(r + 1) * w] for r in range(b)]

    def accept(self, logits: torch.Tensor, drafts: torch.Tensor, reply: Reply | None):
        """The acceptance rule: target logits [b, K+1, V], drafts [b, K] -> (accepted [b] in 0..K, bonus [b])."""
        K = drafts.shape[1]
        if self.cfg.forced_acceptance is not None and K:
            return verify_forced(logits, drafts, self.cfg.forced_acceptance, self.T, self.gen, self.cfg.truncation)
        if self.T == 0:
            return verify_greedy(logits, drafts)
        p = self._p(logits)
        q = self._proposal_q(reply, drafts, p.shape[-1]) if K else p[:, :0]
        return verify_sample(p, drafts, q, self.gen)

    def _p(self, logits: torch.Tensor) -> torch.Tensor:
        """The target distribution sampled from (T > 0): softmax(z / T), truncated by top-k / top-p."""
        return self.cfg.truncation.apply(probs_from_logits(logits, self.T))

    @staticmethod
    def _proposal_q(reply: Reply, drafts: torch.Tensor, vocab: int) -> torch.Tensor:
        """q [b, K, V]: the draft's distributions, or delta(s_i) for rows proposed without the model (fast)."""
        q = point_mass(drafts, vocab)
        if reply.q is not None:
            rows = to_device(reply.q_rows, torch.long, q.device)
            q[rows] = reply.q.to(q.device, q.dtype)
        return q

    # ---- commit --------------------------------------------------------------------------------
    def _commit_tokens(self, s: Seq, new: list[int]) -> int:
        """Append tokens up to EOS (included) or max_new_tokens; returns how many were appended."""
        room = self.cfg.max_new_tokens - len(s.out)
        new = new[:max(room, 0)]
        for i, t in enumerate(new):
            if t in self.cfg.eos_token_ids:
                new = new[:i + 1]
                break
        s.out += new
        if len(s.out) >= self.cfg.max_new_tokens or (s.out and s.out[-1] in self.cfg.eos_token_ids):
            s.done = True
        return len(new)

    def _drop_finished(self, active: list[Seq]) -> list:
        """Free the rows of finished sequences (the last row moves into each, as in the KV); returns their keys."""
        stamp = None
        finished = []
        for r in reversed(range(len(active))):  # highest first: a row that moves is never one still to drop
            s = active[r]
            if s.done:
                stamp = self.clock_ms() if stamp is None else stamp
                s.finish_ms = stamp
                self.requests.append(s.record())
                finished.append((s.sid, s.last_k, s.last_bonus))
                last = self.kv.remove_row(r)
                active[r] = active[last]
                active.pop()
        return finished[::-1]

    # ---- draft faults and trace records --------------------------------------------------------
    def _call(self, fn):
        """Talk to the draft; on a fault record it and continue autoregressively (returns None)."""
        try:
            return fn()
        except DraftFault as e:
            self.faults.append(f"round {self.rounds}: {e}; finishing autoregressively")
            self.link = None
            return None

    def _record(self, active, K, accepted, bonus, committed, first, reply, timings, warmup) -> RoundRecord:
        seqs = []
        for i, s in enumerate(active):
            k = accepted[i]
            entry = SeqRecord(s.sid, k, bonus[i], committed[i], first=first[i])
            if reply is not None and self.decoding.caches:
                entry.hit = bool(reply.hit[i])
                entry.backup = reply.backup[i]
                entry.fan_out = (self.plan.fan_out if entry.hit else self.plan.fan_out_miss)[k]
                entry.lookup_hit = bool(reply.lookup_hit[i]) and not entry.hit  # jit_redraft = batch threw it away
            if self._top is not None and reply is not None:
                entry.dists = self._top[i][:k + 1]  # target side; the draft's is added by _finish_pending
            seqs.append(entry)
        self._top = None
        fallback = "ar" if K == 0 and self.decoding.uses_draft else None  # after a draft fault
        return RoundRecord(self.rounds, K, len(active), seqs, timings, fallback, warmup)

    def _finish_pending(self, reply: Reply | None) -> None:
        """Complete the waiting record with the draft's speculation timings and bonus ranks; emit it."""
        rec, self._pending = self._pending, None
        if rec is None:
            return
        t0, t1, t2, t3 = (self.phases.between(self._pending_marks[0], m) for m in self._pending_marks)
        rec.timings_ms.update({Phase.TARGET_WAIT: t1 - t0, Phase.VERIFY: t2 - t1, Phase.COMMIT: t3 - t2,
                               Phase.ROUND: t3 - t0})
        if reply is not None:
            rec.timings_ms.update(reply.prev_timings)
            if self.decoding.caches:
                for e in rec.seqs:
                    e.bonus_rank = reply.ranks.get(e.seq)
        for e in rec.seqs:
            if e.dists is not None:
                draft = (reply.dists.get(e.seq) if reply is not None else None) or []
                e.dists = [t + (draft[i] if i < len(draft) and draft[i] else [None, None, None])
                           for i, t in enumerate(e.dists)]
        self.on_round(rec)
