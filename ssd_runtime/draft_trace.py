"""The trace's bookkeeping on the draft side, kept out of the Drafter's algorithm.

DraftRecorder drives a Drafter through the same calls (start_batch, reply, speculate) and adds to every
reply what the target writes into the trace:
  ranks         {seq: rank of the bonus token t* among the draft's candidates at the stopping position k of
                the previous round} (sampling.rank_of on the glue logits; None on a sequence's first round),
                for the keys and for the sequences that just finished;
  timings       this reply's phases in ms: draft_lookup, then draft_backup (SSD) or draft_sd (SD);
  prev_timings  the phases of the speculation that followed the previous reply: draft_glue, draft_branch
                (zeros when nothing was speculated).
"""

from __future__ import annotations

from .device import model_device, now_ms
from .draft import Drafter
from .sampling import rank_of


def _no_speculation() -> dict[str, float]:
    return {"draft_glue": 0.0, "draft_branch": 0.0}


class DraftRecorder:
    """A Drafter whose replies carry bonus ranks and phase timings (ms) for the trace."""

    def __init__(self, drafter: Drafter):
        self.drafter = drafter
        self.device = model_device(drafter.model)
        self.spec_timings = _no_speculation()  # of the last speculate(), sent with the next reply

    def start_batch(self, seqs: list[tuple[int, list[int]]]) -> None:
        self.drafter.start_batch(seqs)
        self.spec_timings = _no_speculation()

    def reply(self, spec: dict) -> dict:
        """Drafter.reply(spec) plus ranks, timings and prev_timings (see the module docstring)."""
        d = self.drafter
        t0 = now_ms(self.device)
        ranks = {sid: self.bonus_rank(sid, k, t) for sid, k, t in [*spec.get("done", []), *spec["keys"]]}
        found = d.lookup(spec)  # ranks first: the lookup forgets the glue logits
        t1 = now_ms(self.device)
        reply = d.propose(found)
        t2 = now_ms(self.device)
        prev, self.spec_timings = self.spec_timings, _no_speculation()
        timings = {}
        if reply["tokens"] is not None:
            timings = {"draft_lookup": t1 - t0, ("draft_sd" if d.mode == "sd" else "draft_backup"): t2 - t1}
        return {**reply, "ranks": ranks, "timings": timings, "prev_timings": prev}

    def speculate(self) -> None:
        """Drafter.speculate(), timing the glue and the branch phase (fork + branch decode)."""
        d = self.drafter
        if not d.speculating:
            return
        t0 = now_ms(self.device)
        d.glue()
        t1 = now_ms(self.device)
        d.branch()
        self.spec_timings = {"draft_glue": t1 - t0, "draft_branch": now_ms(self.device) - t1}

    def bonus_rank(self, sid: int, k: int, bonus: int) -> int | None:
        """Rank of t* among the candidates at k of the last glue (0 = best guess); None without a glue."""
        st = self.drafter.seqs[sid]
        if k < 0 or st.glue is None:
            return None
        exclude = st.proposal[k] if k < self.drafter.K else None
        return rank_of(st.glue[k], int(bonus), exclude)
