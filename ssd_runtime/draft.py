"""The draft side of a round (ssd-notes.md section 4): lookup, backup, reply; then glue, fork, branch decode.

The draft owns its KV cache (one BatchKV row per sequence) and the one-round speculation cache keyed by
(sequence, k accepted, bonus token). Per round, `reply(spec)` is the critical path:
  lookup   each key (seq, k, t*) in the cache built during the previous round (the first round misses);
  backup   misses are redrafted: jit (the draft model, only the rows that missed; the whole batch with
           jit_redraft = "batch", as the reference engine) or fast (uniform random tokens, sent as a point-mass
           proposal q = delta so the target's ratio test stays exact);
and the reply goes out. Then `speculate()` runs while the target verifies:
  glue     one forward over [t*, s_1..s_K] at their true positions: fixes the KV of any accepted prefix and
           gives the draft's logits at every stopping position k = 0..K;
  fork     at each k, the top-F_k tokens of row k excluding s_{k+1} (F = fan_out if this round's proposal
           came from the cache, fan_out_miss if from the backup; nothing excluded at k = K);
  branch   all branches as one batch for K steps, each row a copy of its sequence's KV truncated to
           prefix + s_1..s_k (positions explicit, holes masked), sampling with Saguaro C;
  cache    replaced by {(seq, k, candidate): (K tokens, their q)}.
In SD mode the draft simply drafts K tokens on request (no cache, no speculation).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from ssd_sim.plan.plan import Plan

from .kv import BatchKV
from .sampling import candidate_order, draft_token, probs_from_logits, rank_of


def now_ms() -> float:
    return time.perf_counter() * 1e3


@dataclass
class Entry:
    """One cached speculation: K draft tokens and the distributions they were sampled from (None at T = 0)."""

    tokens: list[int]
    q: torch.Tensor | None


@dataclass
class SeqState:
    """What the draft knows about one sequence."""

    committed: list[int]  # prompt + every committed token, mirrored from the target's keys
    proposal: list[int] = field(default_factory=list)  # the K tokens sent in the last reply
    from_cache: bool = False  # that proposal came from the cache (-> fan_out) or the backup (-> fan_out_miss)
    glue: torch.Tensor | None = None  # [K+1, V] draft logits at stopping positions 0..K of that proposal
    known: dict[int, torch.Tensor] = field(default_factory=dict)  # stopping position -> logits, from a jit backup
    cache: dict[tuple[int, int], Entry] = field(default_factory=dict)  # (k, bonus) -> speculation


class Drafter:
    """Draft-side state machine of one job. Methods are called in order: start_batch, (reply, speculate)*."""

    def __init__(self, model: torch.nn.Module, plan: Plan, mode: str, seed: int, vocab: int,
                 debug: dict | None = None, compact_slack: int = 32):
        self.model, self.plan, self.mode, self.vocab = model, plan, mode, vocab
        self.K = plan.num_speculative_tokens
        self.T = plan.temperature
        self.gen = torch.Generator(device=_device(model)).manual_seed(int(seed) + 1)
        self.debug = debug or {}
        self.compact_slack = compact_slack
        self.seqs: dict[int, SeqState] = {}
        self.order: list[int] = []  # sequence id of each KV row
        self.kv: BatchKV | None = None
        self.spec_timings = {"draft_glue": 0.0, "draft_branch": 0.0}  # of the last speculate()

    # ---- batch start ---------------------------------------------------------------------------
    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        """Prefill the prompts (overlaps the target's prefill). The first round of every sequence misses."""
        self.seqs = {sid: SeqState(committed=list(prompt)) for sid, prompt in seqs}
        self.order = [sid for sid, _ in seqs]
        self.kv = BatchKV(self.model, len(seqs), self.compact_slack)
        if seqs:
            self.kv.forward([p for _, p in seqs], keep=1)
        self.spec_timings = {"draft_glue": 0.0, "draft_branch": 0.0}

    # ---- critical path -------------------------------------------------------------------------
    def reply(self, spec: dict) -> dict:
        """Answer a SPEC: per key (seq, k, t*) the next K tokens and their q. Nothing speculative here.

        spec = {"keys": [(seq, k or -1 on a sequence's first round, t*)], "done": [(seq, k, t*)]}.
        Reply: tokens [n, K] long; q [m, K, V] for the rows listed in q_rows (T > 0, rows not from the fast
        backup; those are point masses); hit / lookup_hit / backup per row; ranks {seq: rank of the
        previous round's bonus in the candidate order}; timings of this reply and of the last speculation.
        """
        t0 = now_ms()
        ranks = {sid: self._observe(sid, k, t) for sid, k, t in spec.get("done", [])}
        for sid, _, _ in spec.get("done", []):
            self.seqs.pop(sid, None)
        keys = spec["keys"]
        lookup_hit = []
        for sid, k, t in keys:
            ranks[sid] = self._observe(sid, k, t)
            lookup_hit.append(self.mode == "ssd" and k >= 0 and (k, t) in self.seqs[sid].cache)
        prev = dict(self.spec_timings)
        self.spec_timings = {"draft_glue": 0.0, "draft_branch": 0.0}
        if not keys:
            self.order, self.kv = [], None
            return {"tokens": None, "ranks": ranks, "timings": {}, "prev_timings": prev}
        self._align_rows([sid for sid, _, _ in keys])
        states = [self.seqs[sid] for sid, _, _ in keys]
        pending = self.kv.rollback_to([st.committed for st in states])
        t1 = now_ms()
        backup = self.plan.backup_for(len(keys)) if self.mode == "ssd" else "sd"
        redraft = [i for i, h in enumerate(lookup_hit) if not h]
        if redraft and backup == "jit" and self.plan.jit_redraft == "batch":
            redraft = list(range(len(keys)))
        tokens = torch.zeros(len(keys), self.K, dtype=torch.long)
        q: list[torch.Tensor | None] = [None] * len(keys)
        for i, (_sid, k, t) in enumerate(keys):
            if i not in redraft:
                entry = states[i].cache[(k, t)]
                tokens[i], q[i] = torch.tensor(entry.tokens), entry.q
        for st in states:
            st.known = {}
        if redraft:
            self._backup(backup, redraft, states, pending, tokens, q)
        redrafted = set(redraft)
        for i, st in enumerate(states):
            st.proposal, st.from_cache = tokens[i].tolist(), i not in redrafted
            st.cache = {}
        t2 = now_ms()
        phase = "draft_sd" if self.mode == "sd" else "draft_backup"
        q_rows = [i for i, x in enumerate(q) if x is not None]
        return {
            "tokens": tokens,
            "q": torch.stack([q[i] for i in q_rows]) if q_rows else None,
            "q_rows": q_rows,
            "hit": [None if self.mode != "ssd" else i not in redrafted for i in range(len(keys))],
            "lookup_hit": lookup_hit,
            "backup": [None if (self.mode != "ssd" or i not in redrafted) else backup for i in range(len(keys))],
            "ranks": ranks,
            "timings": {"draft_lookup": t1 - t0, phase: t2 - t1},
            "prev_timings": prev,
        }

    def _observe(self, sid: int, k: int, bonus: int) -> int | None:
        """Mirror the committed tokens of (k, t*) and return t*'s rank among last round's candidates at k."""
        st = self.seqs[sid]
        if k < 0:
            st.committed.append(int(bonus))
            return None
        rank = None
        if st.glue is not None:
            exclude = st.proposal[k] if k < self.K else None
            rank = rank_of(st.glue[k], int(bonus), exclude)
        st.committed.extend(st.proposal[:k] + [int(bonus)])
        st.glue = None
        return rank

    def _align_rows(self, sids: list[int]) -> None:
        """Keep only the KV rows of these sequences, in this order (finished sequences drop out)."""
        if sids != self.order:
            pos = {sid: r for r, sid in enumerate(self.order)}
            self.kv = self.kv.select([pos[s] for s in sids])
            self.order = list(sids)

    def _backup(self, kind: str, rows: list[int], states: list[SeqState], pending: list[list[int]],
                tokens: torch.Tensor, q: list) -> None:
        """Fill the proposal of the given rows: the draft model (jit / sd) or random tokens (fast)."""
        if kind == "fast":
            # Random tokens, q = delta(token): the target accepts s with prob min(1, p(s)/1) = p(s) and on a
            # rejection samples from p without s, so the output stays exactly p at any temperature.
            tokens[rows] = torch.randint(0, self.vocab, (len(rows), self.K), generator=self.gen,
                                         device=self.gen.device).cpu()
            return
        fan = self.plan.fan_out_miss  # the cache built from a backup proposal uses the miss-case fan-out
        on_main = len(rows) == len(states)  # whole batch: draft in place, the glue then reuses these logits
        kv = self.kv if on_main else self.kv.select(rows)
        toks, qs, logits = self.decode(kv, [pending[i] for i in rows], fan, keep_logits=on_main)
        for n, i in enumerate(rows):
            tokens[i] = toks[n]
            q[i] = None if qs is None else qs[n]
            if on_main and self.mode == "ssd":
                states[i].known = {j: logits[n, j] for j in range(self.K)}

    def decode(self, kv: BatchKV, first: list[list[int]], fan: tuple[int, ...], keep_logits: bool = False):
        """K draft steps for every row of kv, starting from each row's pending tokens.

        Token i of a proposal is sampled at stopping position i, so Saguaro down-weights the top fan[i]
        tokens there (the bonus guesses the next cache will hold at that position).
        Returns (tokens [R, K], q [R, K, V] or None at T = 0, logits [R, K, V] or None).
        """
        inputs, toks, qs, lgs = first, [], [], []
        for i in range(self.K):
            logits = kv.forward(inputs, keep=1)[:, -1]
            tok, qi = draft_token(logits, self.T, fan[i], self.plan.saguaro_c, self.plan.downweight, self.gen)
            if qi is not None and self.debug.get("report_unscaled_q"):
                qi = probs_from_logits(logits, self.T)  # deliberately wrong q (exactness test only)
            toks.append(tok.cpu())
            qs.append(qi)
            if keep_logits:
                lgs.append(logits)
            inputs = [[t] for t in tok.tolist()]
        q = None if self.T == 0 else torch.stack(qs, dim=1).cpu()
        return torch.stack(toks, dim=1), q, torch.stack(lgs, dim=1) if keep_logits else None

    # ---- off the critical path -----------------------------------------------------------------
    def speculate(self) -> None:
        """Glue, fork and branch decode for every sequence of the last reply; replaces the cache."""
        if self.mode != "ssd" or not self.order:
            return
        t0 = now_ms()
        states = [self.seqs[sid] for sid in self.order]
        self._glue(states)
        t1 = now_ms()
        branches = self._fork(states)
        if branches:
            self._branch_decode(states, branches)
        self.spec_timings = {"draft_glue": t1 - t0, "draft_branch": now_ms() - t1}

    def _glue(self, states: list[SeqState]) -> None:
        """Forward [t*, s_1..s_K] (minus what a jit backup already cached); keep logits at k = 0..K."""
        pending = self.kv.rollback_to([st.committed + st.proposal for st in states])
        width = max(len(p) for p in pending)
        out = self.kv.forward(pending, keep=width)
        for r, st in enumerate(states):
            m = len(pending[r])  # the glue computed stopping positions K+1-m .. K for this row
            rows = [st.known[j] for j in range(self.K + 1 - m)] + list(out[r, width - m:])
            st.glue, st.known = torch.stack(rows), {}

    def _fork(self, states: list[SeqState]) -> list[tuple[int, int, int]]:
        """Branches (row, k, candidate): top-F_k of glue row k excluding s_{k+1} (nothing excluded at k = K)."""
        out = []
        for r, st in enumerate(states):
            fan = self.plan.fan_out if st.from_cache else self.plan.fan_out_miss
            for k in range(self.K + 1):
                exclude = st.proposal[k] if k < self.K else None
                out += [(r, k, c) for c in candidate_order(st.glue[k], exclude, fan[k])]
        return out

    def _branch_decode(self, states: list[SeqState], branches: list[tuple[int, int, int]]) -> None:
        """Decode all branches as one batch; each row sees prefix + s_1..s_k + its own tokens only."""
        kv = self.kv.select([r for r, _, _ in branches])
        kv.truncate([len(states[r].committed) + k for r, k, _ in branches])
        toks, qs, _ = self.decode(kv, [[c] for _, _, c in branches], self.plan.fan_out)
        for n, (r, k, c) in enumerate(branches):
            states[r].cache[(k, c)] = Entry(toks[n].tolist(), None if qs is None else qs[n])


def _device(model: torch.nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")
