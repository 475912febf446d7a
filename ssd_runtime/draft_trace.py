"""The trace's bookkeeping on the draft side, kept out of the Drafter's algorithm.

DraftRecorder drives a Drafter through the same calls (start_batch, add, reply, speculate) and adds to every
reply what the target writes into the trace:
  ranks         {seq: rank of the bonus token t* among the draft's candidates at the stopping position k of
                the previous round} (sampling.rank_of on the glue logits; None on a sequence's first round),
                for the keys and for the sequences that just finished;
  timings       this reply's phases in ms: draft_lookup, then draft_backup (SSD) or draft_sd (SD);
  prev_timings  the phases of the speculation that followed the previous reply: draft_glue, draft_branch
                (zeros when nothing was speculated);
  warmups       the draft's forwards since its previous reply that ran before their CUDA graph replayed (a shape's
                first sighting or capture; GraphCache.warmups), prefills of new sequences left out: the target marks
                the round they delay (RoundRecord.warmup); None without graphs;
  dists         with log_topn = N: {seq: the draft's top-N [ids, log-probs, rest] at T = 1 at each stopping
                position 0..k of the previous round} (the target adds its own and writes them to the trace).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ssd_sim.io.records import Phase

from .device import PhaseClock, model_device
from .draft import Drafter
from .protocol import Key, Reply, SpecMsg
from .sampling import ranks_of, top_logprobs
from .syncs import SYNCS


def _no_speculation() -> dict[str, float]:
    return {Phase.DRAFT_GLUE: 0.0, Phase.DRAFT_BRANCH: 0.0}


class DraftRecorder:
    """A Drafter whose replies carry bonus ranks and phase timings (ms) for the trace."""

    def __init__(self, drafter: Drafter, log_topn: int = 0):
        self.drafter = drafter
        self.log_topn = log_topn
        drafter.keep_stop_logits = log_topn > 0
        self.device = model_device(drafter.model)
        self.phases = PhaseClock(self.device)
        self.spec_marks: tuple = ()  # (before glue, after glue, after branch) of the last speculate()
        self.syncs_seen = SYNCS.counts.get("draft", 0)  # the draft's reads counted up to the last reply
        self.warm_seen = 0  # the draft's graph warm-ups counted up to the last reply, prefills included
        self.tops: dict[int, list] = {}  # seq -> the draft's top-N per stopping position (log_topn)
        self.early_ranks: dict[int, int | None] = {}  # of sequences add() freed before the SPEC that reports them
        self.early_dists: dict[int, list] = {}

    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        self.drafter.start_batch(seqs)
        self.spec_marks = ()
        self.warm_seen = self._warmups()  # the prefill's sightings are no round's

    def add(self, seqs: list[tuple[int, list[int]]], done: list[Key] = ()) -> None:
        """Drafter.add; the bonus ranks and dists of the sequences it frees are kept for the next reply."""
        self.early_ranks.update(self.bonus_ranks([key for key in done if key[0] in self.drafter.seqs]))
        self.early_dists.update(self.draft_dists(SpecMsg(-1, [], list(done))))
        before = self._warmups()
        self.drafter.add(seqs, done)
        self.warm_seen += self._warmups() - before  # a prefill overlaps the target's, outside any round

    def _warmups(self) -> int:
        """GraphCache.warmups of the draft's cache (0 before it has one or without graphs)."""
        return self.drafter.kv.graph_warmups() if self.drafter.kv is not None else 0

    def reply(self, spec: SpecMsg) -> Reply:
        """Drafter.reply(spec) plus ranks, timings and prev_timings (see the module docstring)."""
        d = self.drafter
        t0 = self.phases.mark()
        ranks = self.bonus_ranks([*spec.done, *spec.keys])
        ranks.update(self.early_ranks)
        dists = {**self.draft_dists(spec), **self.early_dists}
        self.early_ranks, self.early_dists = {}, {}
        found = d.lookup(spec)  # ranks first: the lookup forgets the glue logits
        t1 = self.phases.mark()
        reply = d.propose(found)
        t2 = self.phases.mark()
        self._add_stop_dists(spec, dists)
        prev = self._spec_timings()
        timings = {}
        if reply.tokens is not None:
            timings = {Phase.DRAFT_LOOKUP: self.phases.between(t0, t1),
                       d.decoding.draft_phase: self.phases.between(t1, t2)}
        syncs, self.syncs_seen = SYNCS.counts.get("draft", 0) - self.syncs_seen, SYNCS.counts.get("draft", 0)
        graphs = d.kv.graph_counts() if d.kv is not None else None
        warm, self.warm_seen = self._warmups() - self.warm_seen, self._warmups()
        return replace(reply, ranks=ranks, timings=timings, prev_timings=prev, dists=dists, syncs=syncs, graphs=graphs,
                       warmups=warm if graphs is not None else None)

    def _spec_timings(self) -> dict[str, float]:
        """The glue and branch phases (ms) of the last speculate(), read once; zeros when nothing was speculated."""
        marks, self.spec_marks = self.spec_marks, ()
        if not marks:
            return _no_speculation()
        t0, t1, t2 = marks
        return {Phase.DRAFT_GLUE: self.phases.between(t0, t1), Phase.DRAFT_BRANCH: self.phases.between(t1, t2)}

    def draft_dists(self, spec: SpecMsg) -> dict[int, list]:
        """{seq: the draft's [ids, log-probs, rest] at stopping positions 0..k of its last round} (T = 1).

        Sliced from the top-N lists `_keep_tops` made while the target verified (off the critical path).
        SD lacks position K (all accepted) here: _add_stop_dists adds it after the next decode step.
        """
        if not self.log_topn:
            return {}
        return {sid: self.tops[sid][:k + 1] for sid, k, _ in [*spec.done, *spec.keys]
                if k >= 0 and sid in self.tops}

    def _keep_tops(self) -> None:
        """Top-N of the draft's logits at every stopping position of the last proposal: SSD the glue rows
        0..K, SD the drafting steps 0..K-1. Runs after the reply went out, outside the timed phases."""
        d = self.drafter
        self.tops = {}
        for sid in d.order:
            st = d.seqs[sid]
            rows = st.glue if st.glue is not None else st.known
            if rows is not None:
                self.tops[sid] = top_logprobs(rows, self.log_topn)

    def _add_stop_dists(self, spec: SpecMsg, dists: dict[int, list]) -> None:
        """SD: the draft's distribution at position K of rounds that accepted all K (see Drafter.stop_logits).

        Computed on the critical path (one log-softmax and top-N per such row, ~1 ms on a CPU at V = 152k)."""
        d = self.drafter
        for sid, k, _ in spec.keys:
            if k == d.K and sid in d.stop_logits and len(dists.get(sid, [])) == k:
                dists[sid].append(top_logprobs(d.stop_logits[sid][None], self.log_topn)[0])
        d.stop_logits = {}

    def speculate(self) -> None:
        """Drafter.speculate(), timing the glue and the branch phase (fork + branch decode)."""
        d = self.drafter
        if d.speculating:
            t0 = self.phases.mark()
            d.glue()
            t1 = self.phases.mark()
            d.branch()
            self.spec_marks = (t0, t1, self.phases.mark())
        if self.log_topn:
            self._keep_tops()

    def bonus_ranks(self, keys: list[Key]) -> dict[int, int | None]:
        """{seq: rank of t* among the candidates at k of its last glue (0 = best guess), None without a glue},
        for keys (seq, k, t*), computed together and read in one transfer."""
        ranks: dict[int, int | None] = {}
        rows, tokens, excludes = [], [], []
        for sid, k, bonus in keys:
            st = self.drafter.seqs.get(sid)
            ranks[sid] = None
            if k >= 0 and st is not None and st.glue is not None:
                rows.append((sid, st.glue[k]))
                tokens.append(int(bonus))
                excludes.append(st.proposal[k] if k < self.drafter.K else None)
        if rows:
            found = ranks_of(torch.stack([g for _, g in rows]), tokens, excludes)
            ranks.update({sid: r for (sid, _), r in zip(rows, found, strict=True)})
        return ranks
