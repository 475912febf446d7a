"""The trace's bookkeeping on the draft side, kept out of the Drafter's algorithm.

DraftRecorder drives a Drafter through the same calls (start_batch, add, reply, speculate) and adds to every
reply what the target writes into the trace:
  ranks         {seq: rank of the bonus token t* among the draft's candidates at the stopping position k of
                the previous round} (sampling.rank_of on the glue logits; None on a sequence's first round),
                for the keys and for the sequences that just finished;
  timings       this reply's phases in ms: draft_lookup, then draft_backup (SSD) or draft_sd (SD);
  prev_timings  the phases of the speculation that followed the previous reply: draft_glue, draft_branch
                (zeros when nothing was speculated);
  dists         with log_topn = N: {seq: the draft's top-N [ids, log-probs, rest] at T = 1 at each stopping
                position 0..k of the previous round} (the target adds its own and writes them to the trace).
"""

from __future__ import annotations

from dataclasses import replace

from ssd_sim.io.records import Phase

from .device import model_device, now_ms
from .draft import Drafter
from .protocol import Key, Reply, SpecMsg
from .sampling import rank_of, top_logprobs


def _no_speculation() -> dict[str, float]:
    return {Phase.DRAFT_GLUE: 0.0, Phase.DRAFT_BRANCH: 0.0}


class DraftRecorder:
    """A Drafter whose replies carry bonus ranks and phase timings (ms) for the trace."""

    def __init__(self, drafter: Drafter, log_topn: int = 0):
        self.drafter = drafter
        self.log_topn = log_topn
        drafter.keep_stop_logits = log_topn > 0
        self.device = model_device(drafter.model)
        self.spec_timings = _no_speculation()  # of the last speculate(), sent with the next reply
        self.tops: dict[int, list] = {}  # seq -> the draft's top-N per stopping position (log_topn)
        self.early_ranks: dict[int, int | None] = {}  # of sequences add() freed before the SPEC that reports them
        self.early_dists: dict[int, list] = {}

    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        self.drafter.start_batch(seqs)
        self.spec_timings = _no_speculation()

    def add(self, seqs: list[tuple[int, list[int]]], done: list[Key] = ()) -> None:
        """Drafter.add; the bonus ranks and dists of the sequences it frees are kept for the next reply."""
        self.early_ranks.update({sid: self.bonus_rank(sid, k, t) for sid, k, t in done if sid in self.drafter.seqs})
        self.early_dists.update(self.draft_dists(SpecMsg(-1, [], list(done))))
        self.drafter.add(seqs, done)

    def reply(self, spec: SpecMsg) -> Reply:
        """Drafter.reply(spec) plus ranks, timings and prev_timings (see the module docstring)."""
        d = self.drafter
        t0 = now_ms(self.device)
        ranks = {sid: self.bonus_rank(sid, k, t) for sid, k, t in [*spec.done, *spec.keys]}
        ranks.update(self.early_ranks)
        dists = {**self.draft_dists(spec), **self.early_dists}
        self.early_ranks, self.early_dists = {}, {}
        found = d.lookup(spec)  # ranks first: the lookup forgets the glue logits
        t1 = now_ms(self.device)
        reply = d.propose(found)
        t2 = now_ms(self.device)
        self._add_stop_dists(spec, dists)
        prev, self.spec_timings = self.spec_timings, _no_speculation()
        timings = {}
        if reply.tokens is not None:
            timings = {Phase.DRAFT_LOOKUP: t1 - t0, d.decoding.draft_phase: t2 - t1}
        return replace(reply, ranks=ranks, timings=timings, prev_timings=prev, dists=dists)

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
            t0 = now_ms(self.device)
            d.glue()
            t1 = now_ms(self.device)
            d.branch()
            self.spec_timings = {Phase.DRAFT_GLUE: t1 - t0, Phase.DRAFT_BRANCH: now_ms(self.device) - t1}
        if self.log_topn:
            self._keep_tops()

    def bonus_rank(self, sid: int, k: int, bonus: int) -> int | None:
        """Rank of t* among the candidates at k of the last glue (0 = best guess); None without a glue."""
        st = self.drafter.seqs.get(sid)
        if k < 0 or st is None or st.glue is None:
            return None
        exclude = st.proposal[k] if k < self.drafter.K else None
        return rank_of(st.glue[k], int(bonus), exclude)
