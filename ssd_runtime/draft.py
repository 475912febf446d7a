"""The draft side of a round (ssd-notes.md section 4): lookup, backup, reply; then glue, fork, branch decode.

The draft owns its KV cache (one StaticKV row per sequence) and the one-round speculation cache keyed by
(sequence, k accepted, bonus token). Per round, `reply(spec) = propose(lookup(spec))` is the critical path:
  lookup   mirror the committed tokens of each key (seq, k, t*) and find it in the cache built during the
           previous round (the first round misses);
  backup   misses are redrafted: jit (the draft model, only the rows that missed; the whole batch with
           jit_redraft = "batch", as the reference engine) or fast (uniform random tokens, sent as a point-mass
           proposal q = delta so the target's ratio test stays exact);
and the reply goes out. Then `speculate() = glue(); branch()` runs while the target verifies:
  glue     one forward over [t*, s_1..s_K] at their true positions: fixes the KV of any accepted prefix and
           gives the draft's logits at every stopping position k = 0..K;
  fork     one masked top-k over those logits: at each k the top-F_k tokens excluding s_{k+1} (F = fan_out if
           this round's proposal came from the cache, fan_out_miss if from the backup; nothing excluded at k = K);
  branch   all branches of a sequence in its own KV row for K tree steps: each attends to the shared prefix +
           s_1..s_k and its own tokens only (no KV copies), sampling with Saguaro C; the q of every branch
           token goes to one preallocated buffer on the draft's device;
  cache    replaced by {(seq, k, candidate): (K tokens, a view of their q)}.
In SD mode the draft simply drafts K tokens on request (no cache, no speculation).
Sequences join (`add`, continuous batching) and leave (a SPEC's "done") between rounds.
The trace's bookkeeping (phase timings, bonus ranks) is not done here: see draft_trace.DraftRecorder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ssd_sim.io.limits import effective_temperature
from ssd_sim.plan.plan import Plan

from .device import model_device
from .graphs import GraphedFn
from .kv import SCRATCH, StaticKV
from .modes import decoding
from .protocol import Key, Reply, SpecMsg
from .sampling import NO_TRUNCATION, Truncation, candidate_lists, candidate_table, draft_token
from .syncs import to_device, to_host


@dataclass
class Entry:
    """One cached speculation: K draft tokens and the distributions they were sampled from (None at T = 0).

    q [K, V] is a view into the drafter's branch buffer, valid until the next branch decode."""

    tokens: list[int]
    q: torch.Tensor | None


@dataclass
class SeqState:
    """What the draft knows about one sequence."""

    committed: list[int]  # prompt + every committed token, mirrored from the target's keys
    proposal: list[int] = field(default_factory=list)  # the K tokens sent in the last reply
    from_cache: bool = False  # that proposal came from the cache (-> fan_out) or the backup (-> fan_out_miss)
    glue: torch.Tensor | None = None  # [K+1, V] draft logits at stopping positions 0..K of that proposal
    known: torch.Tensor | None = None  # [K, V] logits at stopping positions 0..K-1, from a jit backup / SD draft
    cache: dict[tuple[int, int], Entry] = field(default_factory=dict)  # (k, bonus) -> speculation


@dataclass
class Lookup:
    """The result of looking up one SPEC's keys: what propose() needs. Lists are in KV-row order."""

    keys: list[Key]  # in the SPEC's order
    key_rows: list[int]  # the KV row of each key
    cached: list[Entry | None]  # per row: the speculation cached for its key, None on a miss
    pending: list[list[int]]  # per row: the committed tokens the draft KV has not seen yet


class Drafter:
    """Draft-side state machine of one job. Methods are called in order: start_batch, (add | reply, speculate)*."""

    def __init__(self, model: torch.nn.Module, plan: Plan, seed: int, vocab: int,
                 truncation: Truncation = NO_TRUNCATION):
        self.model, self.plan, self.vocab = model, plan, vocab
        self.truncation = truncation  # top-k / top-p of the draft's q (any q is exact: the target gets it)
        self.decoding = decoding(plan.mode)  # SD or SSD
        self.K = plan.num_speculative_tokens
        self.T = effective_temperature(plan.temperature)  # greedy below GREEDY_BELOW_T, as the planner
        self.gen = torch.Generator(device=model_device(model)).manual_seed(int(seed) + 1)
        self.seqs: dict[int, SeqState] = {}
        self.order: list[int] = []  # sequence id of each KV row
        self.kv: StaticKV | None = None
        self.branches = max(sum(plan.fan_out), sum(plan.fan_out_miss))  # most branches of one sequence
        self.qbuf: torch.Tensor | None = None  # [rows, branches, K, V] q of every branch token (T > 0)
        # Trace only (draft_trace.DraftRecorder): in SD, keep the logits before each row's last pending token
        # in decode's first step; after a round that accepted all K they are the draft's at stopping position K.
        self.keep_stop_logits = False
        self.stop_logits: dict[int, torch.Tensor] = {}  # seq -> logits [V]

    # ---- sequences join and leave --------------------------------------------------------------
    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        """Forget everything, then add these sequences."""
        self.seqs, self.order, self.kv = {}, [], None
        self.add(seqs)

    def add(self, seqs: list[tuple[int, list[int]]], done: list[Key] = ()) -> None:
        """Free the rows of finished sequences (`done` keys), then prefill new sequences into fresh rows
        (overlapping the target's prefill). A new sequence's first round misses."""
        for sid, _, _ in done:
            self._drop(sid)
        if not seqs:
            return
        if self.kv is None:
            longest = max(len(p) for _, p in seqs)
            self.kv = StaticKV.reuse(self.model, max(self.plan.batch_size, len(seqs)),
                                     SCRATCH + longest + 64 + (self.K + 1) * (self.branches + 1))
        rows = self.kv.add_rows(len(seqs))
        for sid, prompt in seqs:
            self.seqs[sid] = SeqState(committed=list(prompt))
            self.order.append(sid)
        self.kv.append([p for _, p in seqs], keep=1, rows=rows)

    def _drop(self, sid: int) -> None:
        """A finished sequence leaves: its row is freed (the last row moves into it)."""
        if sid not in self.seqs:
            return
        del self.seqs[sid]
        row = self.order.index(sid)
        last = self.kv.remove_row(row)
        self.order[row] = self.order[last]
        self.order.pop()

    # ---- critical path -------------------------------------------------------------------------
    def reply(self, spec: SpecMsg) -> Reply:
        """Answer a SPEC: per key (seq, k, t*) the next K tokens and their q. Nothing speculative here.

        The spec's keys name every sequence in flight. Reply: see propose() and protocol.Reply.
        """
        return self.propose(self.lookup(spec))

    def lookup(self, spec: SpecMsg) -> Lookup:
        """Forget finished sequences, mirror each key's committed tokens, find each key in the cache."""
        for sid, _, _ in spec.done:
            self._drop(sid)
        keys = [tuple(key) for key in spec.keys]
        if not keys:
            return Lookup([], [], [], [])
        if sorted(s for s, _, _ in keys) != sorted(self.order):
            raise ValueError(f"SPEC keys {[s for s, _, _ in keys]} do not match the sequences in flight {self.order}")
        row_of = {sid: r for r, sid in enumerate(self.order)}
        cached: list[Entry | None] = [None] * len(keys)
        for sid, k, t in keys:
            st = self.seqs[sid]
            self._commit(st, k, t)
            cached[row_of[sid]] = st.cache.get((k, t)) if self.decoding.caches and k >= 0 else None
        pending = self.kv.resume([self.seqs[sid].committed for sid in self.order])
        return Lookup(keys, [row_of[sid] for sid, _, _ in keys], cached, pending)

    def propose(self, found: Lookup) -> Reply:
        """The K tokens per key: the cached speculation on a hit, the backup's on a miss (see protocol.Reply)."""
        n = len(found.keys)
        if not n:
            return Reply(tokens=None)
        backup = self.decoding.backup(self.plan, n)
        redraft = [r for r, e in enumerate(found.cached) if e is None]
        if redraft and backup == "jit" and self.plan.jit_redraft == "batch":
            redraft = list(range(n))
        states = [self.seqs[sid] for sid in self.order]
        missed = set(redraft)
        tokens: list[list[int] | None] = [None] * n  # host lists: the one read per round is the backup's
        q: list[torch.Tensor | None] = [None] * n
        for r, entry in enumerate(found.cached):
            if r not in missed:
                tokens[r], q[r] = list(entry.tokens), entry.q
        for st in states:
            st.known = None
        if redraft:
            self._backup(backup, redraft, states, found.pending, tokens, q)
        for r, st in enumerate(states):
            st.proposal, st.from_cache = tokens[r], r not in missed
            st.cache = {}
        rows = found.key_rows
        ssd = self.decoding.caches
        q_rows = [i for i, r in enumerate(rows) if q[r] is not None]
        return Reply(
            tokens=torch.tensor([tokens[r] for r in rows], dtype=torch.long).view(n, self.K),
            q=torch.stack([q[rows[i]] for i in q_rows]) if q_rows else None,
            q_rows=q_rows,
            hit=[r not in missed if ssd else None for r in rows],
            lookup_hit=[found.cached[r] is not None for r in rows],
            backup=[backup if ssd and r in missed else None for r in rows],
        )

    def _commit(self, st: SeqState, k: int, bonus: int) -> None:
        """Mirror the target's commit of round (k accepted, bonus t*): s_1..s_k of the last proposal, then t*."""
        st.committed.extend(([] if k < 0 else st.proposal[:k]) + [int(bonus)])
        st.glue = None

    def _backup(self, kind: str, rows: list[int], states: list[SeqState], pending: list[list[int]],
                tokens: list, q: list) -> None:
        """Fill the proposal of the given rows: the draft model (jit / sd) or random tokens (fast)."""
        if kind == "fast":
            # Random tokens, q = delta(token): the target accepts s with prob min(1, p(s)/1) = p(s) and on a
            # rejection samples from p without s, so the output stays exactly p at any temperature.
            drawn = to_host(torch.randint(0, self.vocab, (len(rows), self.K), generator=self.gen,
                                          device=self.gen.device))
            for r, row in zip(rows, drawn, strict=True):
                tokens[r] = row
            return
        # Decode in place on the span of rows that holds every missed row (a view of the cache); rows in the
        # span that hit take no input. Their logits are kept: the glue then reuses them.
        span = range(min(rows), max(rows) + 1)
        wanted = set(rows)
        on = [r in wanted for r in span]
        first = [pending[r] if o else [] for r, o in zip(span, on, strict=True)]
        toks, qs, logits = self.decode(span, first, on, self.plan.fan_out_miss)
        for i, r in enumerate(span):
            if on[i]:
                tokens[r] = toks[i]
                q[r] = None if qs is None else qs[i]
                states[r].known = logits[i]

    def decode(self, span: range, first: list[list[int]], on: list[bool], fan: tuple[int, ...]):
        """K draft steps for the KV rows in `span` whose `on` is set, starting from each row's pending tokens.

        Token i of a proposal is sampled at stopping position i, so Saguaro down-weights the top fan[i]
        tokens there (the bonus guesses the next cache will hold at that position) by C_i = plan.c_at(i).
        Returns (tokens [R][K] host lists, read once, q [R, K, V] or None at T = 0, logits [R, K, V] on the draft
        device).
        """
        toks, qs, lgs = [], [], []
        stop = self.keep_stop_logits and not self.decoding.caches and max(map(len, first), default=0) >= 2
        steps = [1 if o else 0 for o in on]
        for i in range(self.K):
            if i == 0:
                out = self.kv.append(first, keep=2 if stop else 1, rows=span)
            else:  # the last step's tokens stay on the device: no read until the proposal is complete
                out = self.kv.append_ids(toks[-1][:, None], steps, rows=span)
            if stop and i == 0:
                self.stop_logits = {self.order[r]: out[j, 0] for j, r in enumerate(span) if len(first[j]) >= 2}
            logits = out[:, -1]
            # SD never down-weights: Saguaro only pays when a cache of guesses exists (SSD).
            tok, qi = self.sample(logits, fan[i], self.decoding.saguaro_c(self.plan, i))
            toks.append(tok)
            qs.append(qi)
            lgs.append(logits)
        q = None if self.T == 0 else torch.stack(qs, dim=1)
        return to_host(torch.stack(toks, dim=1)), q, torch.stack(lgs, dim=1)

    def sample(self, logits: torch.Tensor, F: int, C: float) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One draft token per row of logits [R, V] with Saguaro (F, C): (tokens [R], q [R, V] or None at T = 0)."""
        return draft_token(logits, self.T, F, C, self.plan.downweight, self.gen, self.truncation)

    # ---- off the critical path -----------------------------------------------------------------
    @property
    def speculating(self) -> bool:
        """speculate() has work to do: SSD mode with sequences in flight."""
        return self.decoding.caches and bool(self.order)

    def speculate(self) -> None:
        """Glue, fork and branch decode for every sequence of the last reply; replaces the cache."""
        if self.speculating:
            self.glue()
            self.branch()

    def glue(self) -> None:
        """Forward [t*, s_1..s_K] (minus what a jit backup already cached); keep logits at k = 0..K."""
        states = [self.seqs[sid] for sid in self.order]
        pending = self.kv.resume([st.committed + st.proposal for st in states])
        width = max(len(p) for p in pending)
        out = self.kv.append(pending, keep=width)
        for r, st in enumerate(states):
            m = len(pending[r])  # the glue computed stopping positions K+1-m .. K for this row
            known = st.known[:self.K + 1 - m] if st.known is not None else out[r, :0]
            st.glue, st.known = torch.cat([known, out[r, width - m:]]), None

    def branch(self) -> None:
        """Fork the glued proposals into branches and decode them all in tree steps; they become the cache."""
        states = [self.seqs[sid] for sid in self.order]
        fans = [self.plan.fan_out if st.from_cache else self.plan.fan_out_miss for st in states]
        width = max(max(f) for f in fans)
        if width == 0:
            return
        glue = torch.stack([st.glue for st in states])  # [n, K+1, V]
        exclude = to_device([st.proposal for st in states], torch.long, glue.device)
        cands = candidate_lists(glue, exclude, width, self._candidate_table())  # [n][K+1][width], -1 pads
        branches = [[(k, c) for k in range(self.K + 1) for c in cands[r][k][:fans[r][k]] if c >= 0]
                    for r in range(len(states))]
        self._branch_decode(states, branches)

    def _candidate_table(self) -> Callable[..., torch.Tensor]:
        """sampling.candidate_table, replayed from CUDA graphs where the model runs them (one GraphedFn per model,
        kept across jobs as its StaticKV is)."""
        backend = getattr(self.model, "_ssd_graphs", None)
        if backend is None:
            return candidate_table
        if getattr(self.model, "_ssd_candidates", None) is None:
            self.model._ssd_candidates = GraphedFn(candidate_table, backend)
        return self.model._ssd_candidates

    def _branch_decode(self, states: list[SeqState], branches: list[list[tuple[int, int]]]) -> None:
        """K tree steps: row r decodes its branches side by side, each over prefix + s_1..s_k + its own tokens."""
        n, P = len(states), max(map(len, branches))
        if P == 0:
            return
        dev = self.kv.device
        real = to_device([[j < len(b) for j in range(P)] for b in branches], torch.bool, dev)
        tokens = to_device([[c for _, c in b] + [0] * (P - len(b)) for b in branches], torch.long, dev)
        prefix = to_device([[len(st.committed) + k for k, _ in b] + [0] * (P - len(b))
                            for st, b in zip(states, branches, strict=True)], torch.long, dev)
        qbuf = self._qbuf(n, P)
        steps = []
        for i in range(self.K):
            logits = self.kv.tree_step(tokens, real, prefix, i)
            tok, qi = self.sample(logits.reshape(n * P, -1), self.plan.fan_out[i], self.decoding.saguaro_c(self.plan, i))
            tokens = tok.view(n, P)
            steps.append(tokens)
            if qbuf is not None:
                qbuf[:n, :P, i] = qi.view(n, P, -1)
        toks = to_host(torch.stack(steps, dim=2))  # [n, P, K]: one transfer
        for r, (st, b) in enumerate(zip(states, branches, strict=True)):
            st.cache = {(k, c): Entry(toks[r][j], None if qbuf is None else qbuf[r, j])
                        for j, (k, c) in enumerate(b)}

    def _qbuf(self, n: int, P: int) -> torch.Tensor | None:
        """The branch q buffer [rows, branches, K, V] on the draft's device (allocated once; None at T = 0)."""
        if self.T == 0:
            return None
        if self.qbuf is None or self.qbuf.shape[0] < n or self.qbuf.shape[1] < P:
            rows = max(n, self.kv.max_rows)
            self.qbuf = torch.empty(rows, max(P, self.branches), self.K, self.vocab, device=self.kv.device)
        return self.qbuf
