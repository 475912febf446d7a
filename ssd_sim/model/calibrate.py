"""Calibrate a Profile from runtime traces: `ssd-plan calibrate traces/*.jsonl -o PROFILE.json`.

Fits, with scipy:
- the target's ForwardLatency to every verification (rows = active sequences, tokens = K + 1; 1 in AR);
- the draft's ForwardLatency jointly to glue forwards (b x (K+1)), branch decodes (K steps of b x budget
  rows), SD drafting (K steps of b rows) and jit backups (K steps of the missed rows);
- per-round overheads (commit, transfer, lookup, fast backup) as medians of the phase timings;
- per (temperature, C): per-position acceptance (counts, Wilson 95% intervals) from neurally drafted
  rounds, and the primary / backup hit curves miss(F) = min(1, c F^-r) from the bonus-token ranks
  (every rank tells whether the round would have hit at every fan-out F, so one fan-out calibrates all).
All traces must come from one setup (models, dtypes, quantisation, devices); forced-acceptance runs only
inform latencies.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.latency import FitReport, ForwardLatency, LatencyModel, fit_forward_latency
from ssd_sim.model.profile import Profile

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

    def to_dict(self) -> dict:
        return {"traces": self.traces, "latency": self.latency, "overheads": self.overheads,
                "acceptance": self.acceptance}


def check_setup(traces: Sequence[Trace]) -> dict:
    """The shared setup of all traces; ConfigError if they mix models, dtypes, quantisation or devices.

    Each of SETUP_KEYS is a {"target": ..., "draft": ...} object; an AR trace has no draft (null), so the
    draft side is compared only between traces that have one.
    """
    setup: dict = {k: {} for k in SETUP_KEYS}
    origin: dict = {}
    for t in traces:
        for key in SETUP_KEYS:
            value = t.header.get(key) or {}
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


def _k(r: dict) -> int:
    return int(r["K"])


def _rows(r: dict) -> int:
    return int(r.get("batch", len(r["seqs"])))


def latency_samples(traces: Sequence[Trace]) -> tuple[list, list, list, list]:
    """(target workloads, target ms, draft workloads, draft ms) from the phase timings of every round."""
    tw, tms, dw, dms = [], [], [], []
    for t in traces:
        plan = t.plan
        budget = sum(plan.get("fan_out") or [1])
        for r in t.rounds:
            ms, b = r["timings_ms"], _rows(r)
            K = 0 if t.mode == "ar" else _k(r)
            if ms.get("verify", 0) > 0:
                tw.append([(b, K + 1, 1)])
                tms.append(ms["verify"])
            if t.mode == "sd" and ms.get("draft_sd", 0) > 0:
                dw.append([(b, 1, K)])
                dms.append(ms["draft_sd"])
            if t.mode != "ssd":
                continue
            if ms.get("draft_glue", 0) > 0:
                dw.append([(b, K + 1, 1)])
                dms.append(ms["draft_glue"])
            if ms.get("draft_branch", 0) > 0:
                dw.append([(b * budget, 1, K)])
                dms.append(ms["draft_branch"])
            missed = [s for s in r["seqs"] if s.get("hit") is False and s.get("backup") == "jit"]
            if missed and ms.get("draft_backup", 0) > 0:
                rows = b if plan.get("jit_redraft") == "batch" else len(missed)
                dw.append([(rows, 1, K)])
                dms.append(ms["draft_backup"])
    return tw, tms, dw, dms


def fit_latency(traces: Sequence[Trace], report: CalibrationReport) -> LatencyModel:
    """Target and draft ForwardLatency fits plus median overheads."""
    tw, tms, dw, dms = latency_samples(traces)
    if len(tms) < 3:
        raise ConfigError("traces", "need at least 3 rounds with verify timings to fit the target latency")
    target, trep = fit_forward_latency(tw, tms, free=FREE)
    report.latency["target"] = _fit_dict(trep, len(tms), target)
    if len(dms) >= 3:
        draft, drep = fit_forward_latency(dw, dms, free=FREE)
        report.latency["draft"] = _fit_dict(drep, len(dms), draft)
    else:
        raise ConfigError("traces", "need sd or ssd traces with draft timings to fit the draft latency")
    ov = _overheads(traces)
    report.overheads = ov
    sd_remote = any(t.mode == "sd" for t in traces)
    return LatencyModel(target, draft, target_devices=1, round_overhead_ms=ov["round_overhead_ms"],
                        transfer_ms=ov["transfer_ms"], lookup_ms=ov["lookup_ms"],
                        fast_backup_ms=ov["fast_backup_ms"], sd_transfer=sd_remote)


def _fit_dict(rep: FitReport, n: int, model: ForwardLatency) -> dict:
    return {"samples": n, "r2": rep.r2, "max_abs_rel_err": rep.max_abs_rel_err,
            "median_abs_rel_err": float(np.median(np.abs(rep.rel_residuals))),
            "params": model.to_dict(), "stderr": rep.stderr}


def _median(xs: list[float]) -> float:
    return float(np.median(xs)) if xs else 0.0


def _overheads(traces: Sequence[Trace]) -> dict[str, float]:
    """Medians of the per-round overheads (ms); transfer from the idle-draft rounds' wait."""
    commit, lookup, fast, wait = [], [], [], []
    for t in traces:
        for r in t.rounds:
            ms = r["timings_ms"]
            commit.append(ms.get("commit", 0.0))
            if t.mode != "ssd":
                continue
            lookup.append(ms.get("draft_lookup", 0.0))
            if any(s.get("backup") == "fast" and s.get("hit") is False for s in r["seqs"]):
                fast.append(ms.get("draft_backup", 0.0))
            # target_wait = transfer + lookup + backup (+ draft still busy): a low quantile isolates transfer
            wait.append(ms.get("target_wait", 0.0) - ms.get("draft_lookup", 0.0) - ms.get("draft_backup", 0.0))
    transfer = max(float(np.percentile(wait, 25)), 0.0) if wait else 0.0
    return {"round_overhead_ms": _median(commit), "transfer_ms": transfer, "lookup_ms": _median(lookup),
            "fast_backup_ms": _median(fast)}


def _neural(t: Trace, s: dict) -> bool:
    """Was this round's proposal drafted by the neural draft (not random fast-backup tokens)?"""
    return t.mode == "sd" or (t.mode == "ssd" and (s.get("hit") or s.get("backup") == "jit"))


def acceptance_groups(traces: Sequence[Trace]) -> dict[tuple[float, float], dict]:
    """Per (temperature, C): per-position tried/passed counts and bonus ranks after primary / fast backup."""
    groups: dict = defaultdict(lambda: {"tried": defaultdict(int), "passed": defaultdict(int),
                                        "primary_ranks": [], "backup_ranks": [], "traces": set()})
    for t in traces:
        if t.mode == "ar" or t.header.get("forced_acceptance") is not None:
            continue
        key = (float(t.plan.get("temperature", 0.0)), float(t.plan.get("saguaro_c", 1.0)))
        g = groups[key]
        g["traces"].add(str(t.path))
        for r in t.rounds:
            K = _k(r)
            for s in r["seqs"]:
                if _neural(t, s):
                    for i in range(min(s["accepted"] + 1, K)):
                        g["tried"][i] += 1
                        g["passed"][i] += i < s["accepted"]
                rank = s.get("bonus_rank")
                if t.mode == "ssd" and rank is not None:
                    g["primary_ranks" if _neural(t, s) else "backup_ranks"].append(int(rank))
    return dict(groups)


def wilson(passed: int, tried: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (95% by default)."""
    if tried == 0:
        return (0.0, 1.0)
    p = passed / tried
    den = 1 + z * z / tried
    mid = (p + z * z / (2 * tried)) / den
    half = z * math.sqrt(p * (1 - p) / tried + z * z / (4 * tried * tried)) / den
    return (max(0.0, mid - half), min(1.0, mid + half))


def fit_hit_curve(ranks: Sequence[int]) -> tuple[HitCurve, dict]:
    """Weighted least-squares fit of miss(F) = min(1, c F^-r) to the empirical P(rank >= F), F = 1..32."""
    from scipy.optimize import curve_fit

    ranks = np.asarray(ranks)
    n = len(ranks)
    fs = np.arange(1, MAX_RANK_F + 1)
    miss = np.array([(ranks >= f).mean() for f in fs])
    sigma = np.sqrt(np.clip(miss * (1 - miss), 1.0 / n, None) / n)

    def model(f, c, r):
        return np.minimum(1.0, c * f ** (-r))

    (c, r), cov = curve_fit(model, fs, miss, p0=(max(miss[0], 1e-3), 0.8), sigma=sigma,
                            bounds=([0.0, 0.0], [1.0, 20.0]))
    se = np.sqrt(np.clip(np.diag(cov), 0, None))
    pred = model(fs, c, r)
    info = {"samples": n, "miss_at_one": float(c), "r": float(r),
            "miss_at_one_ci95": [float(max(c - 1.96 * se[0], 0)), float(min(c + 1.96 * se[0], 1))],
            "r_ci95": [float(max(r - 1.96 * se[1], 0)), float(r + 1.96 * se[1])],
            "max_abs_err": float(np.abs(pred - miss).max()),
            "empirical_miss": {int(f): float(m) for f, m in zip(fs[:8], miss[:8], strict=True)}}
    return HitCurve(float(min(c, 1.0)), float(r)), info


def fit_acceptance(traces: Sequence[Trace], report: CalibrationReport) -> AcceptanceModel:
    """One AcceptancePoint per (temperature, C) seen in sd / ssd traces."""
    groups = acceptance_groups(traces)
    if not groups:
        raise ConfigError("traces", "need sd or ssd traces (not only ar or forced-acceptance) to fit acceptance")
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
        primary, entry["primary_hit"] = _hit_or_default(g["primary_ranks"], None)
        backup, entry["backup_hit"] = _hit_or_default(g["backup_ranks"], primary)
        report.acceptance.append(entry)
        points.append(AcceptancePoint(T, acc, primary, backup, C, "calibrated"))
    return AcceptanceModel(tuple(points))


def _hit_or_default(ranks: list[int], fallback: HitCurve | None) -> tuple[HitCurve, dict]:
    if len(ranks) >= 20:
        return fit_hit_curve(ranks)
    curve = fallback or HitCurve(0.5, 0.8)
    return curve, {"samples": len(ranks), "assumed": True, "miss_at_one": curve.miss_at_one, "r": curve.r,
                   "note": "too few ranked rounds: " + ("copied from the primary curve" if fallback
                                                       else "assumed miss_at_one=0.5, r=0.8")}


def calibrate(paths: Sequence[str | Path], name: str | None = None) -> tuple[Profile, CalibrationReport]:
    """Fit a Profile to traces; returns it with the fit report."""
    if not paths:
        raise ConfigError("traces", "give at least one trace file (traces/*.jsonl)")
    traces = [read_trace(p) for p in paths]
    setup = check_setup(traces)
    report = CalibrationReport([str(p) for p in paths])
    latency = fit_latency(traces, report)
    acceptance = fit_acceptance(traces, report)
    models = setup.get("models") or {}
    max_b = max(int(t.header.get("batch_size", 1)) for t in traces)
    prov = {"latency": f"calibrated: least-squares fits to {len(report.latency)} models over "
                       f"{sum(v['samples'] for v in report.latency.values())} timed phases",
            "acceptance": f"calibrated: {len(acceptance.points)} (temperature, C) groups from traces",
            "acceptance.saguaro": "calibrated where traces exist at that C; synthetic response elsewhere"}
    profile = Profile(
        name=name or f"calibrated-{Path(paths[0]).parent.name or 'traces'}",
        latency=latency, acceptance=acceptance,
        description=f"calibrated from {len(traces)} traces",
        target_model=str(models.get("target", "")), draft_model=str(models.get("draft", "")),
        hardware=str(traces[0].header.get("machine", "")), max_batch_size=max(2 * max_b, 8),
        sources=tuple(str(p) for p in paths), provenance=prov)
    return profile, report
