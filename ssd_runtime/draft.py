"""The draft side of a round (ssd-notes.md section 4): lookup, backup, reply; then glue, fork, branch decode.

The draft owns its KV cache (one BatchKV row per sequence) and the one-round speculation cache keyed by
(sequence, k accepted, bonus token). Per round, `reply(spec) = propose(lookup(spec))` is the critical path:
  lookup   mirror the committed tokens of each key (seq, k, t*) and find it in the cache built during the
           previous round (the first round misses);
  backup   misses are redrafted: jit (the draft model, only the rows that missed; the whole batch with
           jit_redraft = "batch", as the reference engine) or fast (uniform random tokens, sent as a point-mass
           proposal q = delta so the target's ratio test stays exact);
and the reply goes out. Then `speculate() = glue(); branch()` runs while the target verifies:
  glue     one forward over [t*, s_1..s_K] at their true positions: fixes the KV of any accepted prefix and
           gives the draft's logits at every stopping position k = 0..K;
  fork     at each k, the top-F_k tokens of row k excluding s_{k+1} (F = fan_out if this round's proposal
           came from the cache, fan_out_miss if from the backup; nothing excluded at k = K);
  branch   all branches as one batch for K steps, each row a copy of its sequence's KV truncated to
           prefix + s_1..s_k (positions explicit, holes masked), sampling with Saguaro C;
  cache    replaced by {(seq, k, candidate): (K tokens, their q)}.
In SD mode the draft simply drafts K tokens on request (no cache, no speculation).
The trace's bookkeeping (phase timings, bonus ranks) is not done here: see draft_trace.DraftRecorder.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ssd_sim.plan.plan import Plan

from .device import model_device
from .kv import BatchKV
from .sampling import candidate_order, draft_token


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


@dataclass
class Lookup:
    """The result of looking up one SPEC's keys, in key order: what propose() needs."""

    keys: list[tuple[int, int, int]]  # (seq, k, t*)
    states: list[SeqState]
    cached: list[Entry | None]  # the speculation cached for the key, None on a miss
    pending: list[list[int]]  # per row, the committed tokens the draft KV has not seen yet


class Drafter:
    """Draft-side state machine of one job. Methods are called in order: start_batch, (reply, speculate)*."""

    def __init__(self, model: torch.nn.Module, plan: Plan, mode: str, seed: int, vocab: int,
                 compact_slack: int = 32):
        self.model, self.plan, self.mode, self.vocab = model, plan, mode, vocab
        self.K = plan.num_speculative_tokens
        self.T = plan.temperature
        self.gen = torch.Generator(device=model_device(model)).manual_seed(int(seed) + 1)
        self.compact_slack = compact_slack
        self.seqs: dict[int, SeqState] = {}
        self.order: list[int] = []  # sequence id of each KV row
        self.kv: BatchKV | None = None
        # Trace only (draft_trace.DraftRecorder): in SD, keep the logits before each row's last pending token
        # in decode's first step; after a round that accepted all K they are the draft's at stopping position K.
        self.keep_stop_logits = False
        self.stop_logits: dict[int, torch.Tensor] = {}  # KV row -> logits [V]

    # ---- batch start ---------------------------------------------------------------------------
    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        """Prefill the prompts (overlaps the target's prefill). The first round of every sequence misses."""
        self.seqs = {sid: SeqState(committed=list(prompt)) for sid, prompt in seqs}
        self.order = [sid for sid, _ in seqs]
        self.kv = BatchKV(self.model, len(seqs), self.compact_slack)
        if seqs:
            self.kv.forward([p for _, p in seqs], keep=1)

    # ---- critical path -------------------------------------------------------------------------
    def reply(self, spec: dict) -> dict:
        """Answer a SPEC: per key (seq, k, t*) the next K tokens and their q. Nothing speculative here.

        spec = {"keys": [(seq, k or -1 on a sequence's first round, t*)], "done": [(seq, k, t*)]}.
        Reply: see propose().
        """
        return self.propose(self.lookup(spec))

    def lookup(self, spec: dict) -> Lookup:
        """Forget finished sequences, mirror each key's committed tokens, find each key in the cache."""
        for sid, _, _ in spec.get("done", []):
            self.seqs.pop(sid, None)
        keys = spec["keys"]
        cached = []
        for sid, k, t in keys:
            st = self.seqs[sid]
            self._commit(st, k, t)
            cached.append(st.cache.get((k, t)) if self.mode == "ssd" and k >= 0 else None)
        if not keys:
            self.order, self.kv = [], None
            return Lookup([], [], [], [])
        self._align_rows([sid for sid, _, _ in keys])
        states = [self.seqs[sid] for sid, _, _ in keys]
        pending = self.kv.rollback_to([st.committed for st in states])
        return Lookup(list(keys), states, cached, pending)

    def propose(self, found: Lookup) -> dict:
        """The K tokens per key: the cached speculation on a hit, the backup's on a miss.

        Reply: tokens [n, K] long (None when there are no keys); q [m, K, V] for the rows listed in q_rows
        (T > 0, rows not from the fast backup; those are point masses); per row hit (served from the cache),
        lookup_hit (found in the cache, even if jit_redraft = "batch" threw it away) and backup (its kind, or
        None). hit and backup are None outside SSD mode.
        """
        n = len(found.keys)
        if not n:
            return {"tokens": None}
        backup = self.plan.backup_for(n) if self.mode == "ssd" else "sd"
        redraft = [i for i, e in enumerate(found.cached) if e is None]
        if redraft and backup == "jit" and self.plan.jit_redraft == "batch":
            redraft = list(range(n))
        tokens = torch.zeros(n, self.K, dtype=torch.long)
        q: list[torch.Tensor | None] = [None] * n
        for i, entry in enumerate(found.cached):
            if i not in redraft:
                tokens[i], q[i] = torch.tensor(entry.tokens), entry.q
        for st in found.states:
            st.known = {}
        if redraft:
            self._backup(backup, redraft, found.states, found.pending, tokens, q)
        redrafted = set(redraft)
        for i, st in enumerate(found.states):
            st.proposal, st.from_cache = tokens[i].tolist(), i not in redrafted
            st.cache = {}
        ssd = self.mode == "ssd"
        q_rows = [i for i, x in enumerate(q) if x is not None]
        return {
            "tokens": tokens,
            "q": torch.stack([q[i] for i in q_rows]) if q_rows else None,
            "q_rows": q_rows,
            "hit": [i not in redrafted if ssd else None for i in range(n)],
            "lookup_hit": [e is not None for e in found.cached],
            "backup": [backup if ssd and i in redrafted else None for i in range(n)],
        }

    def _commit(self, st: SeqState, k: int, bonus: int) -> None:
        """Mirror the target's commit of round (k accepted, bonus t*): s_1..s_k of the last proposal, then t*."""
        st.committed.extend(([] if k < 0 else st.proposal[:k]) + [int(bonus)])
        st.glue = None

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
            if on_main:  # SSD: the glue reuses them; SD: the trace's draft distributions (DraftRecorder)
                states[i].known = {j: logits[n, j] for j in range(self.K)}

    def decode(self, kv: BatchKV, first: list[list[int]], fan: tuple[int, ...], keep_logits: bool = False):
        """K draft steps for every row of kv, starting from each row's pending tokens.

        Token i of a proposal is sampled at stopping position i, so Saguaro down-weights the top fan[i]
        tokens there (the bonus guesses the next cache will hold at that position) by C_i = plan.c_at(i).
        Returns (tokens [R, K], q [R, K, V] or None at T = 0, logits [R, K, V] or None).
        """
        inputs, toks, qs, lgs = first, [], [], []
        stop = self.keep_stop_logits and self.mode == "sd" and max(map(len, first), default=0) >= 2
        for i in range(self.K):
            out = kv.forward(inputs, keep=2 if stop and i == 0 else 1)
            if stop and i == 0:
                self.stop_logits = {r: out[r, 0] for r, x in enumerate(first) if len(x) >= 2}
            logits = out[:, -1]
            tok, qi = draft_token(logits, self.T, fan[i], self.plan.c_at(i), self.plan.downweight, self.gen)
            toks.append(tok.cpu())
            qs.append(qi)
            if keep_logits:
                lgs.append(logits)
            inputs = [[t] for t in tok.tolist()]
        q = None if self.T == 0 else torch.stack(qs, dim=1).cpu()
        return torch.stack(toks, dim=1), q, torch.stack(lgs, dim=1) if keep_logits else None

    # ---- off the critical path -----------------------------------------------------------------
    @property
    def speculating(self) -> bool:
        """speculate() has work to do: SSD mode with sequences in flight."""
        return self.mode == "ssd" and bool(self.order)

    def speculate(self) -> None:
        """Glue, fork and branch decode for every sequence of the last reply; replaces the cache."""
        if self.speculating:
            self.glue()
            self.branch()

    def glue(self) -> None:
        """Forward [t*, s_1..s_K] (minus what a jit backup already cached); keep logits at k = 0..K."""
        states = [self.seqs[sid] for sid in self.order]
        pending = self.kv.rollback_to([st.committed + st.proposal for st in states])
        width = max(len(p) for p in pending)
        out = self.kv.forward(pending, keep=width)
        for r, st in enumerate(states):
            m = len(pending[r])  # the glue computed stopping positions K+1-m .. K for this row
            rows = [st.known[j] for j in range(self.K + 1 - m)] + list(out[r, width - m:])
            st.glue, st.known = torch.stack(rows), {}

    def branch(self) -> None:
        """Fork the glued proposals into branches and decode them all; they become the cache."""
        states = [self.seqs[sid] for sid in self.order]
        branches = self._fork(states)
        if branches:
            self._branch_decode(states, branches)

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
