"""Calibrate a Profile from runtime traces: `ssd-plan calibrate traces/*.jsonl -o PROFILE.json`.

Fits, with scipy:
- the target's ForwardLatency to every verification (rows = active sequences, tokens = K + 1; 1 in AR);
- the draft's ForwardLatency jointly to glue forwards (b x (K+1); b x 1 after a jit backup of every row), branch
  decodes (K steps of b x budget rows), SD drafting (K steps of b rows) and jit backups (K steps of the missed rows);
- per-round overheads (commit, transfer, lookup, fast backup) as medians of the phase timings (SSD's transfer:
  the wait for a reply beyond the draft's lookup, backup and overrun of the verify before it);
- per (temperature, C): per-position acceptance (counts, Wilson 95% intervals) from neurally drafted
  rounds, and the primary / backup hit curves miss(F) = min(1, c F^-r) from the bonus-token ranks
  (every rank tells whether the round would have hit at every fan-out F, so one fan-out calibrates all).
All traces must come from one setup (models, dtypes, quantisation, devices); forced-acceptance runs only
inform latencies. Every trace is checked as it is read (ssd_sim.io.records): a count or timing no run can produce
(accepted > K, a negative or non-numeric timing, ...) is refused in one line naming the file, line, field and
value, never clipped or fitted.
"""

from __future__ import annotations

import math
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host, host_differences
from ssd_sim.io.probe import Probe
from ssd_sim.io.records import Phase, RoundRecord, SeqRecord
from ssd_sim.io.sanity import distinct_traces, stall_warning, steady, unsteady_counts
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.drift import GUEST_SHIFT, Drift, calibration_drift, guest_of, timed_span
from ssd_sim.model.interference import fit_interference, glue_tokens
from ssd_sim.model.latency import (
    FitReport,
    ForwardLatency,
    LatencyModel,
    fit_forward_latency,
    fit_scaled_latency,
    fit_warnings,
)
from ssd_sim.model.logged import MIN_CONTEXTS, derived_model, logged_positions
from ssd_sim.model.mix import RequestMix, left_out, mix_provenance
from ssd_sim.model.probed import apply_probe, check_probe, probe_provenance, probed_uncertainty
from ssd_sim.model.profile import Profile
from ssd_sim.model.residual import MIN_RUNS, SHIPPED_RESIDUAL, ProjectResidual, measured_residual, moderated
from ssd_sim.model.uncertainty import (
    CPU_INTERFERENCE,
    DRAFT_SHARE,
    EXTRAPOLATION_SD,
    GPU_INTERFERENCE,
    Uncertainty,
)

SETUP_KEYS = ("models", "dtype", "quantize", "devices")
MAX_RANK_F = 32  # fan-outs 1..32 are used to fit the hit curves
FREE = ("fixed_ms", "token_ms", "token_exponent", "multi_token_ms")  # fitted ForwardLatency parameters


@dataclass
class CalibrationReport:
    """Fit quality of every part of a calibrated profile (for the CLI table and the profile JSON)."""

    traces: list[str]
    latency: dict[str, dict] = field(default_factory=dict)  # role -> FitReport fields + samples
    overheads: dict[str, float] = field(default_factory=dict)
    acceptance: list[dict] = field(default_factory=list)  # one entry per (T, C) group
    logged: dict | None = None  # the logged distributions behind a derived acceptance model (logged.derived_model)
    warnings: list[str] = field(default_factory=list)  # assumed or extrapolated quantities, one line each
    duplicates: list[str] = field(default_factory=list)  # traces given again (same content), counted once: one line each
    left_out: str | None = None  # with a mix: the requests it weighs 0 (mix.left_out), also one of the warnings
    # rounds the latency fit left out (io.sanity.steady): {"rounds": all, "stalled": n, "warmup": n}; {} when none
    unsteady: dict[str, int] = field(default_factory=dict)
    # role -> the warnings of the traces' own latency fit (also in warnings): a probe's tables replace that fit, and
    # model.probed.apply_probe drops them
    fit_warnings: dict[str, list[str]] = field(default_factory=dict)

    @property
    def latency_fit_lines(self) -> set[str]:
        """Every warning of the traces' latency fits (fit_warnings), as one set."""
        return {w for lines in self.fit_warnings.values() for w in lines}

    def to_dict(self) -> dict:
        return {"traces": self.traces, "latency": self.latency, "overheads": self.overheads,
                "acceptance": self.acceptance, "logged": self.logged, "warnings": self.warnings,
                **({"duplicates": self.duplicates} if self.duplicates else {}),
                **({"unsteady_rounds": self.unsteady} if self.unsteady else {})}

    def unsteady_line(self) -> str | None:
        """One line naming the rounds the latency fit left out, or None when it timed every round."""
        u = self.unsteady
        if not u:
            return None
        return (f"latency timed on {u['rounds'] - u['stalled'] - u['warmup']} of {u['rounds']} rounds: "
                f"{u['stalled']} stalled and {u['warmup']} CUDA graph warm-up rounds left out (io.sanity.steady)")


def check_setup(traces: Sequence[Trace]) -> dict:
    """The shared setup of all traces; ConfigError if they mix models, dtypes, quantisation or devices.

    Each of SETUP_KEYS is a {"target": ..., "draft": ...} object; an AR trace has no draft (null), so the
    draft side is compared only between traces that have one.
    """
    setup: dict = {k: {} for k in SETUP_KEYS}
    origin: dict = {}
    for t in traces:
        for key in SETUP_KEYS:
            value = getattr(t.header, key) or {}
            for role in ("target", "draft"):
                v = value.get(role) if isinstance(value, dict) else value
                if v is None and role == "draft":
                    continue
                if role in setup[key] and setup[key][role] != v:
                    raise ConfigError(key, f"{t.path} has {role} {v!r} but {origin[key, role]} has "
                                      f"{setup[key][role]!r}: calibrate each setup separately")
                setup[key].setdefault(role, v)
                origin.setdefault((key, role), t.path)
    return setup


def common_host(traces: Sequence[Trace]) -> tuple[Host | None, str]:
    """The host all traces were measured on (kernels merged over roles) and a provenance line.

    ConfigError if two traces name different hosts (latencies are per host: calibrate one host at a time).
    Traces made before ssd-run recorded hosts have none; they mix with recorded ones, and the line says so.
    """
    recorded = [(t, Host.from_dict(t.header.host, f"{t.path} host")) for t in traces if t.header.host]
    if not recorded:
        return None, "not recorded in the traces (made before ssd-run recorded hosts)"
    (first, host), kernels = recorded[0], {}
    for t, h in recorded:
        diffs = host_differences(host, h)
        if diffs:
            raise ConfigError("host", f"{t.path} was measured on another host or kernel setup than {first.path} ({'; '.join(diffs)}): "
                                      "latencies are per host, calibrate each host separately")
        kernels.update(h.kernels)
    missing = len(traces) - len(recorded)
    note = f"recorded in the traces: {host.label()}" + (f" ({missing} older traces have no record)" if missing else "")
    guests = trace_guests(traces)
    if guests > 1 or missing or any(not h.boot_id for _, h in recorded):
        host = host.without_guest()  # pooled over guests, or over traces that cannot say: no one guest's latency
        note += f"; {guests} guests" if guests > 1 else ""
    elif host.guest():
        note += f"; the guest {host.guest()}"
    return replace(host, kernels=kernels), note


def trace_guests(traces: Sequence[Trace]) -> int:
    """How many guests (distinct host boot_id, model.drift.guest_of) the traces name; traces that do not record one
    are not counted."""
    return len({g for t in traces if (g := guest_of(t))})


def probed_host(host: Host | None, probe: Probe) -> Host | None:
    """The host a probed profile's latencies were timed on: the traces' host kind, on the probe's guest (none
    when the probe does not record one)."""
    if host is None:
        return probe.host
    guest = probe.host or Host()
    return replace(host, boot_id=guest.boot_id, booted_at=guest.booted_at)


def _k(r: RoundRecord) -> int:
    return r.K


def _rows(r: RoundRecord) -> int:
    return r.batch


@dataclass
class LatencySamples:
    """Timed phases as (workload, ms) pairs: a workload is [(rows, tokens, repeats)] forwards of one model.

    draft_concurrent flags the draft phases that ran beside a verify (SSD glue and branch decode); SD drafting
    and jit backups run while the target waits.
    """

    target_work: list = field(default_factory=list)
    target_ms: list = field(default_factory=list)
    draft_work: list = field(default_factory=list)
    draft_ms: list = field(default_factory=list)
    draft_concurrent: list = field(default_factory=list)

    def add_draft(self, work: list, ms: float, concurrent: bool) -> None:
        self.draft_work.append(work)
        self.draft_ms.append(ms)
        self.draft_concurrent.append(concurrent)


def sd_draft_work(b: int, K: int, two: bool) -> list[tuple[int, int, int]]:
    """The forwards of one SD drafting phase over b rows: K steps, the first feeding 2 tokens when some row
    accepted all K last round (`two`: the K-th draft token was never fed; LatencyModel.sd_draft_ms)."""
    return [(b, 2 if two else 1, 1)] + ([(b, 1, K - 1)] if K > 1 else [])


def latency_samples(traces: Sequence[Trace]) -> LatencySamples:
    """The timed phases of every round of the traces (see LatencySamples)."""
    out = LatencySamples()
    for t in traces:
        plan = t.plan
        budget = sum(plan.get("fan_out") or [1])
        all_accepted: dict[int, bool] = {}  # SD: each sequence's last round accepted all its draft tokens
        for r in t.rounds:
            ms, b = r.timings_ms, _rows(r)
            K = 0 if t.mode == "ar" else _k(r)
            if ms[Phase.VERIFY] > 0:
                out.target_work.append([(b, K + 1, 1)])
                out.target_ms.append(ms[Phase.VERIFY])
            if t.mode == "sd":
                if ms[Phase.DRAFT_SD] > 0:
                    out.add_draft(sd_draft_work(b, K, any(all_accepted.get(s.seq, False) for s in r.seqs
                                                          if not s.first)), ms[Phase.DRAFT_SD], False)
                all_accepted.update((s.seq, K > 0 and s.accepted == K) for s in r.seqs)
            if t.mode != "ssd":
                continue
            if ms[Phase.DRAFT_GLUE] > 0:
                out.add_draft([(b, glue_tokens(t, r), 1)], ms[Phase.DRAFT_GLUE], True)
            if ms[Phase.DRAFT_BRANCH] > 0:
                out.add_draft([(b * budget, 1, K)], ms[Phase.DRAFT_BRANCH], True)
            missed = [s for s in r.seqs if s.hit is False and s.backup == "jit"]
            if missed and ms[Phase.DRAFT_BACKUP] > 0:
                rows = b if plan.get("jit_redraft") == "batch" else len(missed)
                out.add_draft([(rows, 1, K)], ms[Phase.DRAFT_BACKUP], False)
    return out


def fit_latency(traces: Sequence[Trace], report: CalibrationReport, probed: bool = False) -> LatencyModel:
    """Target and draft ForwardLatency fits, how much each slows the other in SSD, median overheads.

    The target is fitted to verifies with the draft idle (AR and SD traces) when there are any, and the SSD
    verifies then measure its slowdown (fit_interference); with SSD traces only it is fitted to those and the
    slowdown is absorbed in it (reported as assumed 0). The draft is fitted to all its phases, the SSD glue
    and branch decode (beside a verify) carrying one extra factor, draft_slowdown, against its idle phases.
    `probed`: a probe's tables and slowdowns will replace these fits (model.probed), so SSD verifies that fit the
    AR / SD traces badly are a warning (the runs' host was busier than the probe's, or they mix setups), not an error.
    """
    idle = latency_samples([t for t in traces if t.mode != "ssd"])
    every = latency_samples(traces)
    separate = len(idle.target_ms) >= 3 and len(idle.target_ms) < len(every.target_ms)
    tw, tms = (idle.target_work, idle.target_ms) if separate else (every.target_work, every.target_ms)
    if len(tms) < 3:
        raise ConfigError("traces", "need at least 3 rounds with verify timings to fit the target latency")
    if len(every.draft_ms) < 3:
        raise ConfigError("traces", "need sd or ssd traces with draft timings to fit the draft latency")
    target, trep = fit_forward_latency(tw, tms, free=FREE)
    report.latency["target"] = _fit_dict(trep, len(tms), target)
    _warn_fit(report, "target", trep)
    if any(every.draft_concurrent):
        draft, drep = fit_forward_latency(every.draft_work, every.draft_ms, free=FREE, concurrent=every.draft_concurrent)
        report.latency["draft"] = _fit_dict(drep, len(every.draft_ms), draft)
        _warn_fit(report, "draft", drep)
    else:  # SD drafting only: one or two tokens per row, so the draft's multi-token / multi-row curve is not seen
        draft, drep = fit_scaled_latency(target, every.draft_work, every.draft_ms)
        report.latency["draft"] = _fit_dict(drep, len(every.draft_ms), draft)
        report.latency["draft"]["source"] = (
            f"derived: the target's measured rows x tokens curve scaled by {drep.params['scale']:.3f} to the draft's "
            "SD steps (no SSD traces time the draft's glue and multi-row branch decode)")
        line = "draft latency beyond one token per row is derived from the target's curve (no SSD traces); one SSD " \
               "trace measures it"
        report.fit_warnings["draft"] = [line]
        report.warnings.append(line)
    d_slow = drep.params.get("concurrent_slowdown", 0.0)
    if not any(every.draft_concurrent):  # no SSD trace: nothing ran both models at once
        lo, hi = interference_range(traces)
        mid, d_mid = (lo + hi) / 2, (lo + hi) / 2 * DRAFT_SHARE
        slow = {"one_row": mid, "rows": mid, "source": f"assumed {mid:.0%}: the middle of {lo:.0%}..{hi:.0%} "
                f"({_device_kind(traces)}; the range this project measured, model/uncertainty.py); no SSD traces"}
        d_slow = d_mid
        slow["draft_source"] = f"assumed {d_mid:.0%}: the middle of {lo * DRAFT_SHARE:.0%}..{hi * DRAFT_SHARE:.0%}; no SSD traces"
    else:
        slow = _traces_interference(traces, target, report, probed) if separate else {
            "one_row": 0.0, "rows": 0.0, "source": "assumed 0: no AR / SD traces to compare the SSD verifies with "
                                                   "(the slowdown is inside the target's fit)"}
        slow["draft_source"] = (f"measured: SSD glue and branch decode +{d_slow:.0%} against SD drafting and jit backups"
                                if "concurrent_slowdown" in drep.params else
                                "assumed 0: no draft phases with the target idle (SD traces or jit backups) to compare with")
    slow["draft"] = d_slow
    report.latency["interference"] = slow
    ov = _overheads(traces)
    report.overheads = ov
    sd_remote = any(t.mode == "sd" for t in traces)
    return LatencyModel(target, draft, target_devices=1, round_overhead_ms=ov["round_overhead_ms"],
                        transfer_ms=ov["transfer_ms"], lookup_ms=ov["lookup_ms"],
                        fast_backup_ms=ov["fast_backup_ms"], sd_transfer=sd_remote,
                        sd_transfer_ms=ov["sd_transfer_ms"],
                        verify_slowdown_one_row=slow["one_row"], verify_slowdown_rows=slow["rows"],
                        draft_slowdown=d_slow)


def _traces_interference(traces: Sequence[Trace], target: ForwardLatency, report: CalibrationReport,
                         probed: bool) -> dict:
    """fit_interference; with a probe to replace it, a fit too far off is a warning and its slowdowns 0."""
    try:
        return fit_interference(traces, target)
    except ConfigError as e:
        if not probed:
            raise
        report.warnings.append(f"{str(e).split(': ', 1)[1]} (the profile's latencies and slowdowns are the probe's; "
                               "these runs were slowed by something the probe did not see: another process, or "
                               "another setup)")
        return {"one_row": 0.0, "rows": 0.0, "source": "not fitted: the SSD verifies do not fit the AR / SD traces"}


def _warn_fit(report: CalibrationReport, role: str, rep) -> None:
    """The warnings of the traces' fit of `role`'s latency (fit_warnings), in report.warnings and report.fit_warnings."""
    lines = fit_warnings(role, rep)
    report.fit_warnings[role] = lines
    report.warnings.extend(lines)


def _fit_dict(rep: FitReport, n: int, model: ForwardLatency) -> dict:
    return {"samples": n, "r2": rep.r2, "max_abs_rel_err": rep.max_abs_rel_err,
            "median_abs_rel_err": float(np.median(np.abs(rep.rel_residuals))),
            "params": model.to_dict(), "stderr": rep.stderr, "level": rep.level}


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else 0.0


def _overheads(traces: Sequence[Trace]) -> dict[str, float | None]:
    """Medians of the per-round overheads (ms): commit, lookup, fast backup, SSD's transfer (ssd_transfer_samples) and
    SD's (its rounds' wait beyond the drafting; None without SD rounds)."""
    commit, lookup, fast, transfer, sd_wait = [], [], [], [], []
    for t in traces:
        for r in t.rounds:
            ms = r.timings_ms
            commit.append(ms[Phase.COMMIT])
            if t.mode == "sd" and ms[Phase.DRAFT_SD] > 0:
                # the target waits for the request, the K draft steps and the reply: the wait beyond the steps
                sd_wait.append(max(ms[Phase.TARGET_WAIT] - ms[Phase.DRAFT_SD], 0.0))
            if t.mode != "ssd":
                continue
            lookup.append(ms[Phase.DRAFT_LOOKUP])
            if any(s.backup == "fast" and s.hit is False for s in r.seqs):
                fast.append(ms[Phase.DRAFT_BACKUP])
        if t.mode == "ssd":
            transfer += ssd_transfer_samples(t)
    return {"round_overhead_ms": _median(commit), "transfer_ms": max(_median(transfer), 0.0) if transfer else 0.0,
            "lookup_ms": _median(lookup), "fast_backup_ms": _median(fast),
            "sd_transfer_ms": _median(sd_wait) if sd_wait else None}


def ssd_transfer_samples(trace: Trace) -> list[float]:
    """Per SSD round that continues its batch: the target's wait for the reply beyond the draft's lookup, backup and
    its overrun of the previous verify (ms): the request + reply transfer.

    A round's record carries the glue and branch that ran beside its own verify, so the next round's wait is
    max(0, glue + branch - verify) + transfer + lookup + backup. Read without that overrun (e.g. a low quantile of
    the wait), a draft slower than the verify passes for a slow link: 49 ms instead of 1.5 ms on the pool40i traces
    (the probe's round trip there: 0.6-1.1 ms). A round any of whose sequences is new follows a prefill, not a
    verify, and is skipped.
    """
    out, prev = [], None
    for r in trace.rounds:
        ms = r.timings_ms
        if prev is not None and r.K > 0 and not any(s.first for s in r.seqs):
            p = prev.timings_ms
            overrun = max(p[Phase.DRAFT_GLUE] + p[Phase.DRAFT_BRANCH] - p[Phase.VERIFY], 0.0)
            out.append(ms[Phase.TARGET_WAIT] - ms[Phase.DRAFT_LOOKUP] - ms[Phase.DRAFT_BACKUP] - overrun)
        prev = r if r.K > 0 else None
    return out


def _neural(t: Trace, s: SeqRecord) -> bool:
    """Was this round's proposal drafted by the neural draft (not random fast-backup tokens)?"""
    return t.mode == "sd" or (t.mode == "ssd" and (s.hit or s.backup == "jit"))


def acceptance_groups(traces: Sequence[Trace], mix: RequestMix | None = None) -> dict[tuple[float, float], dict]:
    """Per (temperature, C): per-position tried/passed counts and bonus ranks after primary / fast backup, each
    with its request's weight (1, or under a workload mix its class's share over the group's requests of that class,
    scaled so the weights still sum to the group's number of requests)."""
    groups: dict = defaultdict(lambda: {"tried": defaultdict(int), "passed": defaultdict(int),
                                        "primary_ranks": [], "backup_ranks": [], "primary_weights": [],
                                        "backup_weights": [], "traces": set()})
    counted = [t for t in traces if t.mode != "ar" and t.header.forced_acceptance is None]
    weight = _group_weights(counted, mix)
    for ti, t in enumerate(counted):
        key = _group_key(t)
        g = groups[key]
        g["traces"].add(str(t.path))
        for r in t.rounds:
            K = _k(r)
            for s in r.seqs:
                w = weight.get((ti, s.seq), 1)  # counts stay integers without a mix
                if _neural(t, s):
                    for i in range(min(s.accepted + 1, K)):
                        g["tried"][i] += w
                        g["passed"][i] += w * (i < s.accepted)
                rank = s.bonus_rank
                if t.mode == "ssd" and rank is not None:
                    side = "primary" if _neural(t, s) else "backup"
                    g[f"{side}_ranks"].append(int(rank))
                    g[f"{side}_weights"].append(w)
    return dict(groups)


def _group_key(t: Trace) -> tuple[float, float]:
    return float(t.plan.get("temperature", 0.0)), float(t.plan.get("saguaro_c", 1.0))


def _group_weights(traces: Sequence[Trace], mix: RequestMix | None) -> dict[tuple[int, int], float]:
    """{(trace index, seq): weight} under a workload mix (acceptance_groups), {} without one."""
    if mix is None:
        return {}
    members: dict = defaultdict(list)
    for ti, t in enumerate(traces):
        for seq in t.sequences():
            members[_group_key(t)].append((ti, seq, t.tag(seq)))
    out = {}
    for (T, C), reqs in members.items():
        w = mix.weights([tag for _, _, tag in reqs], f"the runs at T = {T:g}, C = {C:g}") * len(reqs)
        out.update({(ti, seq): float(x) for (ti, seq, _), x in zip(reqs, w, strict=True)})
    return out


def wilson(passed: int, tried: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if tried == 0:
        return (0.0, 1.0)
    p = passed / tried
    den = 1 + z * z / tried
    mid = (p + z * z / (2 * tried)) / den
    half = z * math.sqrt(p * (1 - p) / tried + z * z / (4 * tried * tried)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def fit_hit_curve(ranks: Sequence[int], weights: Sequence[float] | None = None) -> tuple[HitCurve, dict]:
    """Weighted least-squares fit of miss(F) = min(1, c F^-r) to the empirical P(rank >= F), F = 1..32 (each rank
    weighted by its request's weight under a workload mix; the sample size is then the effective one)."""
    from scipy.optimize import curve_fit

    ranks = np.asarray(ranks)
    w = np.ones(len(ranks)) if weights is None else np.asarray(weights, dtype=float)
    n = float(w.sum() ** 2 / (w ** 2).sum())
    fs = np.arange(1, MAX_RANK_F + 1)
    miss = np.array([np.average(ranks >= f, weights=w) for f in fs])
    sigma = np.sqrt(np.clip(miss * (1 - miss), 1.0 / n, None) / n)

    def model(f, c, r):
        return np.minimum(1.0, c * f ** (-r))

    (c, r), cov = curve_fit(model, fs, miss, p0=(max(miss[0], 1e-3), 0.8), sigma=sigma,
                            bounds=([0.0, 0.0], [1.0, 20.0]))
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    pred = model(fs, c, r)
    info = {"samples": len(ranks), "miss_at_one": float(c), "r": float(r),
            "miss_at_one_ci95": [float(max(c - 1.96 * se[0], 0)), float(min(c + 1.96 * se[0], 1))],
            "r_ci95": [float(max(r - 1.96 * se[1], 0)), float(r + 1.96 * se[1])],
            "max_abs_err": float(np.abs(pred - miss).max()),
            "empirical_miss": {int(f): float(m) for f, m in zip(fs[:8], miss[:8], strict=True)}}
    return HitCurve(float(min(c, 1.0)), float(r)), info


def fit_acceptance(traces: Sequence[Trace], report: CalibrationReport,
                   mix: RequestMix | None = None) -> AcceptanceModel:
    """The acceptance model: derived from logged distributions where the traces have them (any T, C, F, per
    position), else one AcceptancePoint per (temperature, C) measured in sd / ssd traces (counts and ranks); under a
    workload mix, every rate weighs the requests to its class shares (model.mix)."""
    groups = acceptance_groups(traces, mix)
    if not groups:
        raise ConfigError("traces", "need sd or ssd traces (not only ar or forced-acceptance) to fit acceptance")
    measured = _measured_points(groups, report)
    drafted = [t for t in traces if t.mode != "ar" and t.header.forced_acceptance is None]
    _warn_truncated(drafted, report)
    logged = logged_positions(drafted)
    if logged is None:
        _warn_measured_only(measured, report)
        return AcceptanceModel(tuple(measured))
    downweight = str(drafted[0].plan.get("downweight", "top_f"))
    model, report.logged = derived_model(logged, downweight, mix=mix)
    for entry in report.acceptance:  # the derived rates next to the counted ones: a check of the whole derivation
        pt = model.at(entry["temperature"], entry["saguaro_c"])
        entry["derived_acceptance"] = [float(a) for a in pt.acceptance]
    if max(report.logged["run_temperatures"]) == 0:
        report.warnings.append("rates at T > 0 are derived from the contexts of T = 0 runs (greedy text, "
                               "usually easier to draft); record one T > 0 trace to check them")
    rows = len(model.points[0].acceptance)
    report.warnings.append(f"stopping positions >= {rows} reuse position {rows - 1}'s rates (fewer than "
                           f"{MIN_CONTEXTS} logged contexts beyond it)")
    return model


def _warn_truncated(traces: Sequence[Trace], report: CalibrationReport) -> None:
    """Traces sampled with top-k / top-p (ssd-run --top-k / --top-p): their counted acceptance is that of the
    truncated distributions, while rates derived from logged distributions (plain softmax at T = 1) are not."""
    runs = sorted({f"top_k={t.header.extra.get('top_k', 0)} top_p={t.header.extra.get('top_p', 1.0):g}"
                   for t in traces if t.header.extra.get("top_k", 0) or t.header.extra.get("top_p", 1.0) < 1.0})
    if runs:
        report.warnings.append(f"traces sampled with {', '.join(runs)}: counted acceptance is that of the truncated "
                               "distributions, while rates derived from logged distributions assume plain "
                               "softmax sampling (no truncation is modelled)")


def _warn_measured_only(points: list[AcceptancePoint], report: CalibrationReport) -> None:
    """Warning lines for a model built from counts and ranks only (no logged distributions)."""
    temps = sorted({p.temperature for p in points})
    report.warnings.append(f"acceptance measured at T = {', '.join(f'{t:g}' for t in temps)} only: other "
                           "temperatures are interpolated or clamped (extrapolated), other C values move by an "
                           "assumed synthetic Saguaro response; re-record with ssd-run --log-topn 20 (the default)")
    for e in report.acceptance:
        for kind in ("primary_hit", "backup_hit"):
            if e[kind].get("assumed"):
                report.warnings.append(f"T={e['temperature']:g} C={e['saguaro_c']:g}: {kind.replace('_', ' ')} "
                                       f"curve assumed ({e[kind]['note']}); SD traces carry no bonus ranks: "
                                       "add an SSD trace or traces with logged distributions")


def _measured_points(groups: dict, report: CalibrationReport) -> list[AcceptancePoint]:
    """One measured AcceptancePoint per (temperature, C) group (counts; hit curves from ranks or assumed)."""
    points = []
    for (T, C), g in sorted(groups.items()):
        n_pos = max(g["tried"]) + 1 if g["tried"] else 0
        acc = tuple(g["passed"][i] / g["tried"][i] for i in range(n_pos) if g["tried"][i] >= 10)
        if not acc:
            raise ConfigError("traces", f"too few drafted rounds at T={T}, C={C} to estimate acceptance")
        entry = {"temperature": T, "saguaro_c": C, "traces": sorted(g["traces"]),
                 "per_position": [{"position": i + 1, "acceptance": g["passed"][i] / g["tried"][i],
                                   "tried": g["tried"][i], "ci95": wilson(g["passed"][i], g["tried"][i])}
                                  for i in range(len(acc))]}
        primary, entry["primary_hit"] = _hit_or_default(g["primary_ranks"], None, g["primary_weights"])
        backup, entry["backup_hit"] = _hit_or_default(g["backup_ranks"], primary, g["backup_weights"])
        report.acceptance.append(entry)
        hit_source = "assumed" if entry["primary_hit"].get("assumed") else "measured"
        points.append(AcceptancePoint(T, acc, primary, backup, C, "measured", hit_source=hit_source))
    return points


def _hit_or_default(ranks: list[int], fallback: HitCurve | None,
                    weights: list[float] | None = None) -> tuple[HitCurve, dict]:
    if len(ranks) >= 20 and (weights is None or sum(1 for w in weights if w > 0) >= 20):
        return fit_hit_curve(ranks, weights)
    curve = fallback or HitCurve(0.5, 0.8)
    return curve, {"samples": len(ranks), "assumed": True, "miss_at_one": curve.miss_at_one, "r": curve.r,
                   "note": "too few ranked rounds: " + ("copied from the primary curve" if fallback
                                                       else "assumed miss_at_one=0.5, r=0.8")}


def _acceptance_provenance(model: AcceptanceModel, report: CalibrationReport) -> dict[str, str]:
    if report.logged is not None:
        lg = report.logged
        grid = (f"T in {{{', '.join(f'{t:g}' for t in lg['temperatures'])}}} x C in "
                f"{{{', '.join(f'{c:g}' for c in lg['saguaro_c'])}}}")
        return {"acceptance": f"derived: per-position acceptance from {lg['contexts']} logged contexts (top-"
                              f"{lg['top_n']} distributions of target and draft), {grid}, interpolated between",
                "acceptance.hit": "derived: per-position hit tables (after a rejection and after all accepted) "
                                  "from the same distributions, F = 0.." + str(lg["top_n"] - 1) + ", power law beyond",
                "acceptance.saguaro": "derived: the Saguaro math on the logged distributions at each C",
                "acceptance.truncation": _truncation_note(lg)}
    temps = sorted({p.temperature for p in model.points})
    assumed = [w for w in report.warnings if "assumed (" in w]
    return {"acceptance": f"measured: {len(model.points)} (temperature, C) groups of counted rounds; "
                          f"extrapolated: temperatures outside {temps[0]:g}..{temps[-1]:g} (clamped)",
            "acceptance.hit": ("assumed: " + "; ".join(assumed)) if assumed else
                              "measured: power-law fits to the bonus-token ranks of SSD traces",
            "acceptance.saguaro": "measured where traces exist at that C; assumed elsewhere (synthetic response)"}


def _truncation_note(lg: dict) -> str:
    """What the top-N truncation leaves of the derived acceptance (model.logged: a lower bound, corrected by the share
    of the bound that the counted acceptance of T > 0 runs shows)."""
    bound = f"top-{lg['top_n']} truncation: derived acceptance at most {lg['truncation_bound']:.3f} low (T = 1, C = 1; mean bound)"
    if not lg.get("truncation_counted"):
        return bound + "; uncorrected (assumed: no run at T > 0 counted acceptance on the logged contexts)"
    return (bound + f"; measured: the counted acceptance of {lg['truncation_counted']} verified draft tokens at T > 0 "
                    f"shows {lg['truncation_share']:.0%} of it, added back at every T in proportion to each context's bound")


def estimate_uncertainty(traces: Sequence[Trace], drafted: Sequence[Trace], target: ForwardLatency,
                         report: CalibrationReport, mix: RequestMix | None = None,
                         drifts: Mapping[str, Drift] | None = None,
                         residual: ProjectResidual | None = None) -> Uncertainty:
    """The spreads of model.uncertainty measured from the traces where they can be, assumed (and said) elsewhere;
    `drifts`: the project's drift per horizon to pool the traces' own repeats with (default model.drift's
    SHIPPED_DRIFTS); `residual`: the project's spread of runs around a fit and its weight, to pool the traces' own
    with (default model.residual's SHIPPED_RESIDUAL)."""
    src: dict[str, str] = {}
    sd, n_cal, n_run = _between_sequence_sd(drafted, mix)
    if sd is None:
        sd, src["acceptance_logit_sd"] = 0.5, "assumed 0.5: no trace with 2+ sequences of drafted rounds"
    else:
        within = ", and within classes: the mix fixes how many requests of each a run holds" if mix else ""
        worth = f"sequences' worth under the mix {mix.describe()}" if mix else "sequences"
        src["acceptance_logit_sd"] = (f"measured: SD {sd:.2f} of logit per-sequence acceptance (within traces{within}) "
                                      f"over {n_cal} {worth}")
    own = measured_residual(traces, target)  # AR / SD runs only (model.residual.run_residuals)
    fit = moderated(own, residual or SHIPPED_RESIDUAL)
    how = (f"the runs' spread around the fit {fit.source} = {fit.sd:.1%}" if own is not None else
           f"the runs' spread around the fit: the project's {fit.sd:.1%} (fewer than {MIN_RUNS} AR / SD traces to "
           f"measure it here; {fit.source})")
    spread = {}
    for horizon, key, when in (("later", "latency_run_sd", "a run more than an hour after the timed forwards"),
                               ("session", "latency_session_sd", "a run within the hour")):
        drift = calibration_drift(traces, horizon, drifts)
        spread[horizon] = math.hypot(fit.sd, drift.predictive_sd())
        src[key] = (f"{when}: {how} and {drift.sd:.1%} run-to-run drift ({drift.source}; {drift.predictive_sd():.1%} "
                    f"for the next run, on its {drift.dof} degrees of freedom): {spread[horizon]:.1%}")
    span = timed_span(traces)
    src["timed_at"] = (f"measured: the {len(traces)} runs started {span[0]} .. {span[1]}" if span else
                       "unknown: runs without a start time (a run at any time counts as later)")
    inter = report.latency["interference"]
    if inter["source"].startswith("measured") or "inside the target's fit" in inter["source"]:
        copied = "copies the other" in inter["source"]
        rng = ()
        isd = max(0.1 if copied else 0.03, float(inter.get("median_abs_rel_err", 0.03)),
                  abs(inter["one_row"] - inter["rows"]) / 2)
        src["interference"] = (f"measured: fitted slowdowns, SD {isd:.0%}"
                               + (" (one kind of round copied from the other)" if copied else ""))
    else:
        rng, isd = interference_range(traces), 0.03
        src["interference"] = (f"assumed uniform {rng[0]:.0%}..{rng[1]:.0%} ({_device_kind(traces)}; the draft's "
                               f"x{DRAFT_SHARE:g}): no SSD traces measured how much target and draft slow each other")
    hit_assumed = report.logged is None and any(e["primary_hit"].get("assumed") for e in report.acceptance)
    if hit_assumed:
        src["hit"] = "assumed: miss(1) ~ U[0.1, 0.9], r ~ U[0.3, 1.5] (no bonus ranks or distributions)"
    timed = _max_rows_tokens(traces)
    src["timed_rows_tokens"] = (f"measured: forwards of up to {timed[0]} (target) and {timed[1]} (draft) rows x tokens; "
                                f"beyond them latency is extrapolated, +{EXTRAPOLATION_SD:.0%} SD per doubling (assumed)")
    return Uncertainty(float(sd), max(n_cal, 1), max(n_run, 1), float(spread["later"]), rng, isd, hit_assumed, timed,
                       src, latency_session_sd=float(spread["session"]), timed_at=span)


def _device_kind(traces: Sequence[Trace]) -> str:
    cpu = all(str((t.header.devices or {}).get("target", "cpu")).startswith("cpu") for t in traces)
    return "CPU" if cpu else "GPU"


def interference_range(traces: Sequence[Trace]) -> tuple[float, float]:
    """The assumed range of the target's slowdown beside the busy draft for these traces' devices."""
    return CPU_INTERFERENCE if _device_kind(traces) == "CPU" else GPU_INTERFERENCE


def _max_rows_tokens(traces: Sequence[Trace]) -> tuple[int, int]:
    """The largest rows x tokens of one timed forward: (target verifies, the draft's SD / glue / branch steps)."""
    s = latency_samples(traces)
    return tuple(max((r * t for w in work for r, t, _ in w), default=1) for work in (s.target_work, s.draft_work))


def _between_sequence_sd(drafted: Sequence[Trace], mix: RequestMix | None = None) -> tuple[float | None, int, int]:
    """(SD of logit per-sequence acceptance pooled within traces, distinct sequences, median sequences per trace).
    Under a workload mix the spread is pooled within classes too: a run of the mix holds its classes' shares of
    requests, so only the spread inside a class varies from run to run; and the distinct sequences are what the
    requests are worth to the mix's weighted mean (RequestMix.effective_requests over the most requests of each
    class one trace decoded), not their count."""
    within, dof, runs = 0.0, 0, []
    held: dict[str, int] = {}  # per class ("" without a mix), the most sequences of it one trace decoded
    for t in drafted:
        counts: dict[int, list[int]] = defaultdict(lambda: [0, 0])
        for r in t.rounds:
            for s in r.seqs:
                if _neural(t, s):
                    c = counts[s.seq]
                    c[0] += min(s.accepted + 1, _k(r))
                    c[1] += s.accepted
        runs.append(len(counts))
        for tag, n in Counter(t.tag(seq) if mix is not None else "" for seq in counts).items():
            held[tag] = max(held.get(tag, 0), n)
        classes: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for seq, (tried, passed) in counts.items():
            if tried >= 5 and (mix is None or t.tag(seq) in mix.tags):
                classes[t.tag(seq) if mix is not None else ""].append((tried, passed))
        for seqs in classes.values():
            if len(seqs) < 2:
                continue
            # The whole per-sequence spread (between prompts + each sequence's own sampling noise): a predicted run's
            # mean acceptance carries both, over its own sequences.
            p = np.array([(ps + 0.5) / (tr + 1.0) for tr, ps in seqs])
            logit = np.log(p / (1 - p))
            within += float(np.var(logit, ddof=1)) * (len(seqs) - 1)
            dof += len(seqs) - 1
    if not runs:
        return None, 1, 1
    # the calibration's sample size: its distinct requests (a trace's, as runs on one pool repeat its prompts), or
    # under a mix what they are worth to the mix's weighted mean, class by class (traces of one class each add up)
    n_cal = held.get("", 0) if mix is None else mix.effective_requests(held)
    return (math.sqrt(within / dof) if dof else None), max(round(n_cal), 1), int(np.median(runs))


@contextmanager
def _fitting(what: str):
    """Run a fit quietly: numpy / scipy warnings are not the user's business (the result is checked), and a
    numerical failure becomes a one-line ConfigError instead of a traceback."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    except ConfigError:
        raise
    except (ArithmeticError, RuntimeError, ValueError, np.linalg.LinAlgError) as e:
        raise ConfigError("traces", f"the {what} fit failed on these traces ({type(e).__name__}: "
                                    f"{str(e).splitlines()[0][:80] if str(e) else 'no detail'}); are they from real runs?") from e


def fit_target(traces: Sequence[Trace]) -> ForwardLatency:
    """The target's latency fit alone, as calibrate fits it to these traces (model.residual measures the runs' spread
    around it)."""
    with _fitting("latency"):
        return fit_latency(traces, CalibrationReport([str(t.path) for t in traces])).target


def calibrate(paths: Sequence[str | Path], name: str | None = None,
              acceptance_from: Sequence[str | Path] | None = None,
              probe: Probe | None = None, mix: RequestMix | None = None) -> tuple[Profile, CalibrationReport]:
    """Fit a Profile to traces; returns it with the fit report.

    Latencies come from every trace (or, given a probe, from its measured tables: model.probed); acceptance and
    hit curves from `acceptance_from` (default: every trace), e.g. only the runs made on a whole prompt sample when
    others ran on a few prompts to time shapes. mix: weigh the requests to these class shares (model.mix).
    """
    if not paths:
        raise ConfigError("traces", "give at least one trace file (traces/*.jsonl)")
    return calibrate_traces([read_trace(p) for p in paths], paths, name, acceptance_from, probe, mix)


def _distinct(parsed: Sequence[Trace], paths: Sequence[str | Path], acceptance_from: Sequence[str | Path] | None):
    """(traces, paths, acceptance_from, warning lines) with a trace given twice (the same path, a copy, a link:
    the same records) counted once, as ssd_sim.io.sanity.distinct_traces; a dropped copy named in acceptance_from
    stands for the trace it repeats."""
    if len(paths) != len(parsed):
        raise ConfigError("traces", f"{len(paths)} names for {len(parsed)} traces: give one name per trace")
    kept, twin, lines = distinct_traces(parsed, [str(p) for p in paths])
    if acceptance_from is not None:
        dropped = {str(paths[i]): str(paths[k]) for i, k in twin.items()}
        acceptance_from = sorted({dropped.get(str(p), str(p)) for p in acceptance_from})
    return [parsed[i] for i in kept], [paths[i] for i in kept], acceptance_from, lines


def calibrate_traces(parsed: Sequence[Trace], paths: Sequence[str | Path], name: str | None = None,
                     acceptance_from: Sequence[str | Path] | None = None,
                     probe: Probe | None = None, mix: RequestMix | None = None,
                     drifts: Mapping[str, Drift] | None = None,
                     residual: ProjectResidual | None = None) -> tuple[Profile, CalibrationReport]:
    """calibrate on traces already parsed (e.g. an upload held in memory); `paths` name them (one per trace: the
    profile's sources, the default name's folder and what acceptance_from refers to). A trace given twice (the
    same records: the same path, a copy, a link) is counted once, and report.duplicates says so in one line each.
    `drifts`: the project's run-to-run drift per horizon (default SHIPPED_DRIFTS; bench/fidelity.py passes the drift
    measured without a split's predicted runs); `residual`: the project's spread of runs around a latency fit (default
    model.residual's SHIPPED_RESIDUAL; bench/fidelity.py passes it measured without the split's predicted runs)."""
    if not parsed:
        raise ConfigError("traces", "give at least one trace file (traces/*.jsonl)")
    traces, paths, acceptance_from, duplicates = _distinct(parsed, paths, acceptance_from)
    setup = check_setup(traces)
    host, host_note = common_host(traces)
    report = CalibrationReport([str(p) for p in paths], duplicates=duplicates)
    report.warnings.extend(w for p, t in zip(paths, traces, strict=True) if (w := stall_warning(t.rounds, str(p))))
    if probe is not None:
        check_probe(probe, setup, host)
    elif (guests := trace_guests(traces)) > 1:
        report.warnings.append(f"the traces ran on {guests} guests of one host kind (their hosts' boot_id): the "
                               "latencies are fitted over all of them, and one kind's guests ran the same runs up to "
                               f"{GUEST_SHIFT:.0%} apart; calibrate one guest's traces, or add a probe of the guest you "
                               "will run on (--probe)")
    timed = [steady(t) for t in traces]  # latency from steady rounds (no stall, no graph warm-up); tokens from all
    report.unsteady = unsteady_counts(traces, timed)
    with _fitting("latency"):
        latency = fit_latency(timed, report, probed=probe is not None)
        if probe is not None:
            latency = apply_probe(latency, probe, timed, report)
            host = probed_host(host, probe)
    chosen = {str(p) for p in acceptance_from} if acceptance_from is not None else None
    unknown = sorted(chosen - {str(p) for p in paths}) if chosen is not None else []
    if unknown:
        raise ConfigError("acceptance_from", f"{unknown[0]} is not one of the calibrated traces")
    acc_traces = [t for p, t in zip(paths, traces, strict=True) if chosen is None or str(p) in chosen]
    with _fitting("acceptance"):
        acceptance = fit_acceptance(acc_traces, report, mix)
    drafted = [t for t in acc_traces if t.mode != "ar" and t.header.forced_acceptance is None]
    if mix is not None and (line := left_out(mix, drafted)):
        report.left_out = line
        report.warnings.append(line)
    uncertainty = estimate_uncertainty(timed, drafted, latency.target, report, mix, drifts, residual)
    models = setup.get("models") or {}
    max_b = max(int(t.header.batch_size) for t in traces)
    prov = {"latency": "measured: least-squares fits to the target and the draft over "
                       f"{sum(report.latency[m]['samples'] for m in ('target', 'draft'))} timed phases",
            **_acceptance_provenance(acceptance, report),
            "latency.draft": report.latency["draft"].get("source", "measured: fitted to the draft's own phases"),
            "latency.interference": report.latency["interference"]["source"],
            "latency.draft_slowdown": report.latency["interference"]["draft_source"],
            "host": host_note,
            **({"acceptance.mix": mix_provenance(mix, drafted)} if mix is not None else {}),
            **(probe_provenance(probe, report) if probe is not None else {})}
    if probe is not None:
        uncertainty = probed_uncertainty(uncertainty, probe)
    profile = Profile(
        name=name or f"calibrated-{Path(paths[0]).parent.name or 'traces'}",
        latency=latency, acceptance=acceptance,
        description=f"calibrated from {len(traces)} traces",
        target_model=str(models.get("target", "")), draft_model=str(models.get("draft", "")),
        hardware=str(traces[0].header.machine), max_batch_size=max(2 * max_b, 8),
        sources=tuple(str(p) for p in paths), provenance=prov, host=host, uncertainty=uncertainty)
    return profile, report
