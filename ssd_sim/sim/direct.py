"""The event model of ssd_sim.sim.des without SimPy: one loop over rounds with a clock per device.

Nothing else runs concurrently in the model, so the SimPy processes reduce to a recurrence. AR and SD: the target
alone, a round after the other. SSD: the target sends a request at `sent`; the draft serves it at
max(sent, end of its last speculation) (the rendezvous), replies after transfer + lookup + [backup], then speculates
for `primary` ms while the target verifies. Every time is computed as SimPy computes it (now + delay, in the same
order), the batch sees the same calls in the same order and the random draws are the same, so a run equals the
SimPy run of the same seed (tests/sim/test_direct.py). Used whenever no timeline is recorded; the SimPy processes
stay the readable definition (des.py) and record the timeline.
"""

from __future__ import annotations

from ssd_sim.io.records import Phase
from ssd_sim.sim.workload import draft_prefill_ms, prefill_ms


class Clock:
    """The target's clock (ms) and the admission step of des.Simulation.next_batch / admit on it."""

    def __init__(self, sim):
        self.sim, self.now = sim, 0.0
        self._prefill: dict[int, float] = {}  # prompt tokens -> prefill ms (a pure function of them)

    def next_batch(self) -> int:
        """Admit arrived requests (prefill blocks the target), idle until the next arrival when nothing is active;
        the active batch size, 0 when every request is done."""
        batch = self.sim.batch
        while not batch.done:
            if batch.can_admit(self.now):
                self.admit()
            if batch.size:
                return batch.size
            if not batch.can_admit(self.now):
                self.now = self.now + (batch.next_arrival_ms - self.now)
        return 0

    def admit(self) -> None:
        sim, start = self.sim, self.now
        new, prompt = sim.batch.admit(start)
        t = self._prefill.get(prompt)
        if t is None:
            t = self._prefill[prompt] = self._prefill_ms(prompt)
        if t > 0:
            self.now = self.now + t
            sim.prefill_ms += t
        if not sim._new_prompt_tokens:
            sim._prefill_start = start
        sim._new_prompt_tokens += prompt
        sim.batch.started(new, self.now)

    def _prefill_ms(self, prompt: int) -> float:
        t = prefill_ms(self.sim.profile.latency, prompt)
        if self.sim.kind == "sd":
            t += draft_prefill_ms(self.sim.profile.latency, prompt)
        return t


def run(sim) -> None:
    """Run des.Simulation `sim` to the end without SimPy (its counters and batch as the SimPy run leaves them)."""
    {"ar": _ar, "sd": _sd, "ssd": _ssd}[sim.kind](sim, Clock(sim))


def _ar(sim, clock: Clock) -> None:
    batch, lat, phase = sim.batch, sim.lat, sim.phase
    while b := clock.next_batch():
        batch.begin_round()
        step = lat.at(b, batch.mean_context()).step
        clock.now = clock.now + step
        phase[Phase.VERIFY] += step
        sim.rows += b
        batch.commit(clock.now)


def _sd(sim, clock: Clock) -> None:
    batch, lat, phase = sim.batch, sim.lat, sim.phase
    while b := clock.next_batch():
        fresh = batch.fresh_rows()
        batch.begin_round()
        draft, verify = lat.sd_phases(b, fresh, batch.mean_context())  # fresh rows: no 2-token first step
        clock.now = clock.now + (draft + verify)
        phase[Phase.DRAFT_SD] += draft
        phase[Phase.VERIFY] += verify
        sim.rows += b
        batch.commit(clock.now)


def _ssd(sim, clock: Clock) -> None:
    batch, lat, phase = sim.batch, sim.lat, sim.phase
    free_at = 0.0  # when the draft finished its last speculation (ms)
    while b := clock.next_batch():
        n_miss = batch.begin_round()
        context = batch.mean_context()
        sent, prompt, prefill_start = clock.now, sim._new_prompt_tokens, sim._prefill_start
        sim._new_prompt_tokens = 0
        # the draft: serves the request once free, replies, speculates the next round (des.Simulation.draft_ssd)
        now = ready = free_at if free_at > sent else sent
        prefill = draft_prefill_ms(lat.model, prompt) if prompt else 0.0
        if prompt:
            ready = max(now, max(prefill_start, free_at) + prefill)
        backup_ms = 0.0
        if n_miss:
            backup_ms = lat.fast if batch.backup == "fast" else lat.jit_ms(n_miss if sim.per_row else b, context)
            sim.backup_rounds[batch.backup] += 1
        else:
            sim.all_hit_rounds += 1
        reply = now + (ready - now + lat.transfer + lat.lookup + backup_ms)
        cost = lat.at(b, context, lat.redrafted(b, n_miss, batch.backup, sim.per_row))
        primary = cost.primary
        sim.busy["draft"] += prefill + lat.lookup + backup_ms + primary
        phase[Phase.DRAFT_BACKUP] += backup_ms
        glue = min(cost.primary_glue, primary)
        phase[Phase.DRAFT_GLUE] += glue
        phase[Phase.DRAFT_BRANCH] += primary - glue
        free_at = reply + primary
        # the target: waits for the reply, verifies, commits
        verify = cost.verify
        phase[Phase.TARGET_WAIT] += reply - sent
        clock.now = reply + verify
        phase[Phase.VERIFY] += verify
        sim.rows += b
        batch.commit(clock.now)
