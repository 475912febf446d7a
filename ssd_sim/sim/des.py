"""The discrete-event model of AR, SD and SSD decoding (SimPy), readable top to bottom.

Devices and one round of each mode (b active sequences, K draft tokens; every latency comes from the
LatencyModel at that row count, precomputed per batch size in round_latency.RoundLatency, and with a context that
grows over the decode at the batch's mean context, ContextLatency):

  AR   target: step  (one forward over b x 1 tokens)
  SD   target: draft (K draft steps over b rows; the draft shares the target's devices) -> verify (b x (K+1))
  SSD  target: request -> wait for the reply -> verify (b x (K+1)) -> commit -> next request
       draft:  wait for the request -> request transfer -> lookup -> [backup if any row missed]
               -> reply transfer -> glue (b x (K+1)) + branch decode (b x budget rows, K steps)

The request is a rendezvous (a blocking send): the draft serves it once its previous speculation is
done, so an SSD round lasts transfer + lookup + [backup] + max(T_v, T_p), the round model of plan/predict.py.
Backups: jit redrafts K tokens for the rows that missed (plan.jit_redraft = "rows") or for the whole
batch ("batch"; either way a row's next cache follows its own lookup, as in plan/predict.py); fast returns
random tokens after fast_backup_ms (never accepted); adaptive picks by the active batch size
(plan.backup_for(b)). transfer_ms is split evenly between the request and the reply. Several draft devices split the branch rows (each
runs the glue for the whole batch); device 0 also runs lookups and backups. Prefill of newly admitted
requests (a target forward over their prompts) blocks the target; in SSD the draft prefills the same
prompts on its own device, and a new sequence's first round always misses.

Outcomes (accepted tokens, cache hits) come from each sequence's pre-drawn stream (ssd_sim.sim.outcomes,
ssd_sim.sim.batching), so a round costs a few SimPy events and no per-sequence Python: AR and SD one
timeout, SSD a request and a reply event plus three timeouts. Recording the timeline (spans for the
Gantt chart and the Chrome trace) is off unless asked for, and keeps the first MAX_SPANS spans (SimResult says
where it was cut). Memory is bounded whatever the run's length: outcomes are drawn in blocks (outcomes.py),
finished sequences kept as numbers (metrics.SeqRecords).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import simpy

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import plan_point
from ssd_sim.sim import direct, fast
from ssd_sim.sim.batching import Batcher
from ssd_sim.sim.metrics import SeqRecords, SimMetrics, percentiles, ratio, tok_rates, tpots
from ssd_sim.sim.outcomes import ModelOutcomes, OutcomeTables, ReplayOutcomes
from ssd_sim.sim.round_latency import ContextLatency, round_latency
from ssd_sim.sim.timeline import Span, chrome_trace, event_log
from ssd_sim.sim.workload import Workload, draft_prefill_ms, fixed_batch, prefill_ms

MODES = ("ar", "sd", "ssd", "ssd-fast", "ssd-adaptive")
# The round phases the simulator models (the runtime's names; it also times commit and the draft's lookup).
SIM_PHASES = tuple(p.value for p in (Phase.VERIFY, Phase.TARGET_WAIT, Phase.DRAFT_SD, Phase.DRAFT_BACKUP,
                                     Phase.DRAFT_GLUE, Phase.DRAFT_BRANCH))
MAX_SPANS = 200_000  # timeline spans recorded at most (~25,000 SSD rounds; a Chrome trace of ~30 MB)
LOOPS = ("auto", "simpy", "direct", "fast")
FAST_MIN_TOKENS = 1 << 24  # auto runs the fast loop from this many output tokens on (~33,000 x 512; tokens)


@dataclass
class SimResult:
    """One simulated run: metrics, the plan as simulated, and the timeline when it was recorded."""

    metrics: SimMetrics
    plan: Plan  # with ssd-fast / ssd-adaptive applied
    mode: str
    workload: Workload
    seed: int
    devices: list[str]  # timeline devices: "target", then the draft devices (SSD)
    labels: dict[str, str]  # device -> display name
    timeline: list[Span] | None = None  # every phase on every device, in recording order
    timeline_cut_ms: float | None = None  # the timeline stops here (MAX_SPANS reached); None = complete
    records: SeqRecords | None = None  # every finished sequence (TTFT, decode time and tokens): SLO accounting

    def event_log(self) -> list[tuple[float, str, str]]:
        """(time ms, device, phase) of every span start in time order (needs timeline=True)."""
        return event_log(self._spans(), self.devices)

    def chrome_trace(self) -> dict:
        """Chrome / Perfetto trace-event JSON object of the timeline (needs timeline or chrome_trace=True)."""
        meta = {"mode": self.mode, "seed": self.seed, "plan": self.plan.to_dict()}
        if self.timeline_cut_ms is not None:
            meta["timeline_cut_ms"] = self.timeline_cut_ms
            meta["note"] = f"only the first {MAX_SPANS} spans were recorded: the timeline ends early"
        return chrome_trace(self._spans(), self.devices, self.labels, meta)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "seed": self.seed, "plan": self.plan.to_dict(),
                "workload": self.workload.to_dict(), "metrics": self.metrics.to_dict()}

    def _spans(self) -> list[Span]:
        if self.timeline is None:
            raise ConfigError("timeline", "not recorded: run simulate(..., timeline=True)")
        return self.timeline


def simulate(profile: Profile, plan: Plan, mode: str = "ssd", tokens: int | None = None, seed: int = 0,
             workload: Workload | None = None, chrome_trace: bool = False, progress: bool = False,
             timeline: bool = False, outcomes=None, loop: str = "auto",
             profile_at: Callable[[int], Profile] | None = None) -> SimResult:
    """Simulate decoding with `plan` on `profile`; bit-for-bit reproducible for a given seed.

    mode: ar | sd | ssd (the plan's backup) | ssd-fast | ssd-adaptive (switch at the plan's threshold, or
    at the planner's b* when the plan has none). tokens: output tokens per sequence (default 512); with
    no workload, `plan.batch_size` sequences start together (workload.fixed_batch). timeline /
    chrome_trace: record every phase (result.timeline, result.event_log(), result.chrome_trace()).
    outcomes: None (draw from the acceptance model), a Trace to replay, or an outcome source (tests).
    loop: "simpy" runs the processes below; "direct" the same model as one loop (ssd_sim.sim.direct: equal results,
    several times faster, no timeline); "fast" the same model vectorised over rounds (ssd_sim.sim.fast: equal in
    distribution, not bit for bit; the acceptance model or AR only, no timeline); "auto" = simpy when a timeline
    is recorded, else fast for runs of at least FAST_MIN_TOKENS output tokens that it supports, else direct.
    profile_at: the profile at a KV context (tokens per sequence) when the latencies depend on it (a GPU preset or a
    spec pair, ssd_sim.cli.growth.profile_at): every round then costs what it does at its batch's mean context,
    which grows from the prompts as tokens are decoded (round_latency.ContextLatency); None: `profile`'s one context.
    """
    if mode not in MODES:
        raise ConfigError("mode", f"must be one of {', '.join(MODES)}, got {mode!r}")
    plan = plan_for_mode(profile, plan, mode)
    if workload is None:
        workload = fixed_batch(plan.batch_size, tokens or 512)
    elif tokens is not None:
        workload = Workload(**{**workload.to_dict(), "output_tokens": tokens})
    source = outcome_source(profile, plan, outcomes)
    record = timeline or chrome_trace
    if loop not in LOOPS or (loop in ("direct", "fast") and record):
        raise ConfigError("loop", f"must be auto, simpy, direct or fast (direct and fast record no timeline), "
                                  f"got {loop!r}")
    sim = Simulation(profile, plan, mode, workload, source, seed, record, progress, profile_at)
    if loop == "fast" and not fast.supports(sim):
        raise ConfigError("loop", "fast draws from the acceptance model only: replayed traces and given outcome "
                                  "sources need loop direct (or auto)")
    if loop == "auto":
        big = int(sim.batch.requests.output_tokens.sum()) >= FAST_MIN_TOKENS
        loop = "simpy" if record else "fast" if big and fast.supports(sim) else "direct"
    return sim.run(loop)


def plan_for_mode(profile: Profile, plan: Plan, mode: str) -> Plan:
    """The plan a mode simulates: ssd-fast forces the fast backup, ssd-adaptive switches at b*."""
    base = "ssd" if mode.startswith("ssd") else mode
    if mode == "ssd-fast":
        plan = plan.replace(backup="fast")
    elif mode == "ssd-adaptive" and (plan.backup != "adaptive" or math.isinf(plan.backup_threshold)):
        from ssd_sim.plan.planner import critical_batch

        b_star, _ = critical_batch(profile, plan)
        plan = plan.replace(backup="adaptive", backup_threshold=b_star)
    return plan.replace(mode=base) if plan.mode != base else plan


def outcome_source(profile: Profile, plan: Plan, outcomes=None):
    """Where the simulated outcomes come from: the acceptance model, a trace replay, or a given source."""
    if outcomes is not None and not isinstance(outcomes, Trace):
        return outcomes
    if isinstance(outcomes, Trace) and plan.mode == "ar":
        raise ConfigError("replay", "mode ar drafts nothing, so a replayed trace would change nothing; "
                                    "drop --replay or simulate sd / ssd")
    point = plan_point(profile, plan) if plan.mode == "ssd" else profile.acceptance.at(plan.temperature, 1.0)
    tables = OutcomeTables.from_point(point, plan)
    if isinstance(outcomes, Trace):
        return ReplayOutcomes.from_trace(outcomes, tables, plan)
    return ModelOutcomes(tables)


class Simulation:
    """One run: the SimPy environment, the devices' processes and the counters they keep."""

    def __init__(self, profile: Profile, plan: Plan, mode: str, workload: Workload, source, seed: int,
                 record: bool = False, progress: bool = False, profile_at: Callable[[int], Profile] | None = None):
        self.env = simpy.Environment()
        self.profile, self.plan, self.mode, self.workload, self.seed = profile, plan, mode, workload, seed
        self.kind = plan.mode  # ar | sd | ssd
        p_all = source.p_all_accepted(plan.K) if self.kind == "sd" else 0.0
        self.lat = round_latency(profile.latency, plan, workload.max_batch, p_all)
        rng = np.random.default_rng(seed)
        requests = workload.requests(rng)
        if profile_at is not None and len(requests):  # contexts from the shortest prompt to the longest sequence
            lo = max(1, int(requests.prompt_tokens.min()))
            hi = max(lo, int((requests.prompt_tokens + requests.output_tokens).max()))
            self.lat = ContextLatency(self.lat, profile_at, plan, workload.max_batch, lo, hi, p_all)
        self.progress = _Progress(int(requests.output_tokens.sum())) if progress else None
        self.batch = Batcher(requests, workload.max_batch, self.kind, source, rng, plan.backup_for,
                             plan.K, self.progress, track_context=self.lat.varies)
        self.drafts = (["draft"] if plan.draft_devices == 1 else
                       [f"draft{i}" for i in range(plan.draft_devices)]) if self.kind == "ssd" else []
        self.spans: list[Span] | None = [] if record else None
        self.timeline_cut_ms: float | None = None  # when the first span beyond MAX_SPANS started
        self.per_row = plan.jit_redraft == "rows"
        # Counters (ms unless noted).
        self.busy = {"target": 0.0, "draft": 0.0}
        self.phase = dict.fromkeys(SIM_PHASES, 0.0)  # the runtime's phase names (ssd_sim.io.records.Phase)
        self.prefill_ms = 0.0
        self.rows = 0  # sequences summed over rounds
        self.all_hit_rounds = 0
        self.backup_rounds = {"jit": 0, "fast": 0}
        # SSD messages: the target's request for the next round (carries the event of the draft's reply).
        self._request = self.env.event()
        self._new_prompt_tokens, self._prefill_start = 0, 0.0

    # ---- the run --------------------------------------------------------------------------------
    def run(self, loop: str = "simpy") -> SimResult:
        """Run to the end with one loop: simpy (the processes below), direct (the same, bit for bit) or fast
        (ssd_sim.sim.fast, equal in distribution)."""
        if loop == "simpy":
            target = {"ar": self.target_ar, "sd": self.target_sd, "ssd": self.target_ssd}[self.kind]
            self.env.process(target())
            if self.kind == "ssd":
                self.env.process(self.draft_ssd())
            self.env.run()
        elif loop == "fast":
            fast.run(self)
        else:
            direct.run(self)
        if self.progress is not None:
            self.progress.close()
        return SimResult(self.metrics(), self.plan, self.mode, self.workload, self.seed,
                         ["target", *self.drafts], self.labels(), self.spans, self.timeline_cut_ms,
                         self.batch.records)

    # ---- target device ----------------------------------------------------------------------------
    def next_batch(self):
        """Admit arrived requests (prefill) and wait for work; the active batch size, 0 when all are done.

        An admission can end with an empty batch: one-token outputs finish with their prefill. Requests that
        arrived meanwhile are then admitted at once; only an empty batch with no request waiting idles until
        the next arrival (which is then in the future).
        """
        env, batch = self.env, self.batch
        while not batch.done:
            if batch.can_admit(env.now):
                yield from self.admit()
            if batch.size:
                return batch.size
            if not batch.can_admit(env.now):
                yield env.timeout(batch.next_arrival_ms - env.now)
        return 0

    def target_ar(self):
        """Autoregressive: one target step per token for every active sequence."""
        env, batch, lat = self.env, self.batch, self.lat
        while b := (yield from self.next_batch()):
            batch.begin_round()
            step = lat.at(b, batch.mean_context()).step
            if self.spans is not None:
                self.span(env.now, step, "target", "step", b)
            yield env.timeout(step)
            self.phase[Phase.VERIFY] += step
            self.rows += b
            batch.commit(env.now)

    def target_sd(self):
        """Synchronous SD: K draft steps, then one verification of K + 1 tokens, on the target's devices."""
        env, batch, lat = self.env, self.batch, self.lat
        while b := (yield from self.next_batch()):
            fresh = batch.fresh_rows()
            batch.begin_round()
            draft, verify = lat.sd_phases(b, fresh, batch.mean_context())  # fresh rows: no 2-token first step
            if self.spans is not None:
                self.span(env.now, draft, "target", "draft", b)
                self.span(env.now + draft, verify, "target", "verify", b)
            yield env.timeout(draft + verify)
            self.phase[Phase.DRAFT_SD] += draft
            self.phase[Phase.VERIFY] += verify
            self.rows += b
            batch.commit(env.now)

    def target_ssd(self):
        """SSD target: send the round's request, wait for the draft's reply, verify, commit."""
        env, batch, lat = self.env, self.batch, self.lat
        while b := (yield from self.next_batch()):
            n_miss = batch.begin_round()
            context = batch.mean_context()
            reply = env.event()
            sent = env.now
            self._request.succeed((b, context, n_miss, batch.backup, self._new_prompt_tokens, self._prefill_start,
                                   reply))
            self._new_prompt_tokens = 0
            yield reply
            verify = lat.at(b, context, lat.redrafted(b, n_miss, batch.backup, self.per_row)).verify
            if self.spans is not None:
                self.span(sent, env.now - sent, "target", "wait", b)
                self.span(env.now, verify, "target", "verify", b)
            self.phase[Phase.TARGET_WAIT] += env.now - sent
            yield env.timeout(verify)
            self.phase[Phase.VERIFY] += verify
            self.rows += b
            batch.commit(env.now)

    def admit(self):
        """Admit arrived requests and prefill them on the target (SD: the colocated draft prefills too)."""
        env, start = self.env, self.env.now
        new, prompt = self.batch.admit(start)
        t = prefill_ms(self.profile.latency, prompt)
        if self.kind == "sd":
            t += draft_prefill_ms(self.profile.latency, prompt)
        if t > 0:
            if self.spans is not None:
                self.span(start, t, "target", "prefill", len(new), round=-1)
            yield env.timeout(t)
            self.prefill_ms += t
        if not self._new_prompt_tokens:  # the draft may prefill from the first admission since the last round
            self._prefill_start = start
        self._new_prompt_tokens += prompt
        self.batch.started(new, env.now)

    # ---- draft device(s) --------------------------------------------------------------------------
    def draft_ssd(self):
        """SSD draft: serve each request (lookup, backup on a miss), reply, then speculate the next round."""
        env, lat = self.env, self.lat
        free_at = 0.0  # when the draft finished its last speculation (ms)
        while True:
            b, context, n_miss, backup, prompt, prefill_start, reply = yield self._request
            self._request = env.event()
            now = ready = env.now
            prefill = draft_prefill_ms(lat.model, prompt) if prompt else 0.0
            if prompt:  # the draft prefills new prompts as soon as both it and the target's prefill start
                ready = max(now, max(prefill_start, free_at) + prefill)
            backup_ms = 0.0
            if n_miss:
                backup_ms = lat.fast if backup == "fast" else lat.jit_ms(n_miss if self.per_row else b, context)
                self.backup_rounds[backup] += 1
            else:
                self.all_hit_rounds += 1
            if self.spans is not None:
                self.record_serve(free_at, now, ready, prefill, prefill_start, backup, backup_ms, b, n_miss)
            yield env.timeout(ready - now + lat.transfer + lat.lookup + backup_ms)
            reply.succeed()
            redrafted = lat.redrafted(b, n_miss, backup, self.per_row)  # its glue feeds one token per row
            cost = lat.at(b, context, redrafted)
            primary = cost.primary
            if self.spans is not None:
                self.record_primary(env.now, b, context, redrafted)
            self.busy["draft"] += prefill + lat.lookup + backup_ms + primary
            self.phase[Phase.DRAFT_BACKUP] += backup_ms
            glue = min(cost.primary_glue, primary)
            self.phase[Phase.DRAFT_GLUE] += glue
            self.phase[Phase.DRAFT_BRANCH] += primary - glue
            yield env.timeout(primary)
            free_at = env.now

    # ---- timeline recording (only when asked for) ---------------------------------------------------
    def span(self, start: float, dur: float, device: str, name: str, rows: int, round: int | None = None):
        if dur > 0 and len(self.spans) >= MAX_SPANS:
            if self.timeline_cut_ms is None:
                self.timeline_cut_ms = float(start)
        elif dur > 0:
            self.spans.append(Span(float(start), float(dur), device, name,
                                   self.batch.round if round is None else round, rows))

    def record_serve(self, free_at, now, ready, prefill, prefill_start, backup, backup_ms, b, n_miss):
        """Draft device 0 from the end of its last speculation to its reply: wait, prefill, serve phases."""
        d = self.drafts[0]
        if prefill:
            p0 = max(prefill_start, free_at)
            self.span(free_at, p0 - free_at, d, "wait", b)
            self.span(p0, prefill, d, "prefill", b, round=-1)
            self.span(p0 + prefill, now - p0 - prefill, d, "wait", b)
        else:
            self.span(free_at, now - free_at, d, "wait", b)
        t = ready
        half = self.lat.transfer / 2
        for name, dur, rows in (("request", half, b), ("lookup", self.lat.lookup, b),
                                ("backup", backup_ms, n_miss if (self.per_row or backup == "fast") else b),
                                ("reply", half, b)):
            self.span(t, dur, d, name, rows)
            t += dur

    def record_primary(self, t: float, b: int, context: float, redrafted: bool):
        """Glue over the whole batch, then each draft device's share of the branch rows."""
        glue = self.lat.at(b, context, redrafted).glue
        for d, rows in zip(self.drafts, self.lat.branch_rows(b), strict=True):
            self.span(t, glue, d, "glue", b)
            self.span(t + glue, self.lat.branch_ms(rows, context), d, "branch", rows)

    # ---- results ----------------------------------------------------------------------------------
    def labels(self) -> dict[str, str]:
        tp = self.profile.latency.target_devices
        out = {"target": f"target (TP={tp})" if tp > 1 else "target"}
        out.update({d: d.replace("draft", "draft device ") if d != "draft" else "draft" for d in self.drafts})
        return out

    def metrics(self) -> SimMetrics:
        batch, plan = self.batch, self.plan
        records, counts = batch.records, batch.counts
        wall = batch.last_finish_ms
        per_seq, total = tok_rates(records, wall)
        devices = self.profile.latency.target_devices + (plan.draft_devices if self.kind == "ssd" else 0)
        tp, tt = percentiles(tpots(records)), percentiles(records.ttft_ms)
        rounds = max(batch.round, 1)
        self.busy["target"] = self.phase[Phase.VERIFY] + self.phase[Phase.DRAFT_SD] + self.prefill_ms
        ssd = self.kind == "ssd"
        K = plan.K if self.kind != "ar" else 0
        drafted = counts.seq_rounds * K
        round_ms = (self.phase[Phase.VERIFY] + self.phase[Phase.DRAFT_SD] + self.phase[Phase.TARGET_WAIT]) / rounds
        return SimMetrics(
            mode=self.mode, batch_size=self.workload.max_batch, num_speculative_tokens=K,
            sequences=len(records), output_tokens=records.total_output_tokens,
            rounds=batch.round, sim_ms=wall, per_seq_tok_s=per_seq, total_tok_s=total, devices=devices,
            tok_s_per_device=total / devices, tpot_ms_p50=tp[0], tpot_ms_p90=tp[1], tpot_ms_p99=tp[2],
            ttft_ms_p50=tt[0], ttft_ms_p90=tt[1], ttft_ms_p99=tt[2], mean_batch=self.rows / rounds,
            round_ms=round_ms,
            mean_accept_len=(counts.accepted / counts.seq_rounds + 1) if counts.seq_rounds else 1.0,
            acceptance_rate=counts.accepted / drafted if drafted else 0.0,
            per_position_acceptance=tuple(counts.per_position_acceptance()) if K else (),
            hit_rate=ratio(counts.hits, counts.looked) if ssd else None,
            primary_hit_rate=ratio(counts.after_hit[1], counts.after_hit[0]) if ssd else None,
            backup_hit_rate=ratio(counts.after_miss[1], counts.after_miss[0]) if ssd else None,
            tokens_per_round_hit=ratio(counts.tokens_hit, counts.hits) if ssd else None,
            tokens_per_round_miss=ratio(counts.tokens_miss, counts.looked - counts.hits) if ssd else None,
            all_hit_rounds=self.all_hit_rounds / rounds if ssd else None,
            backup_rounds=dict(self.backup_rounds) if ssd else {},
            target_busy=self.busy["target"] / wall if wall else 0.0,
            draft_busy=self.busy["draft"] / wall if wall else 0.0,
            target_wait_ms=self.phase[Phase.TARGET_WAIT], target_wait_share=self.phase[Phase.TARGET_WAIT] / wall if wall else 0.0,
            phase_ms={k: v / rounds for k, v in self.phase.items()} | {"round": round_ms},
        )


class _Progress:
    """A rich progress bar on stderr that appears only once a run has taken `delay_s` of wall time."""

    def __init__(self, total_tokens: int, delay_s: float = 1.0):
        self.total, self.delay_s = total_tokens, delay_s
        self.t0 = self.shown = time.perf_counter()
        self.bar = self.task = None

    def __call__(self, batch: Batcher) -> None:
        now = time.perf_counter()
        if now - self.t0 < self.delay_s or now - self.shown < 0.2:  # redraw at most 5 times a second
            return
        self.shown = now
        if self.bar is None:
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("simulating (tokens)", total=self.total)
        self.bar.update(self.task, completed=batch.tokens_done())

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
