"""Prediction intervals and decisions under uncertainty: tok/s of AR, SD and SSD over profiles drawn from the
profile's Uncertainty (model.uncertainty), with common draws for every mode so their differences are sharp.

P(SSD beats SD) is the share of draws where the SSD plan beats SD at its K under the objective: faster per sequence
(latency), or more total tok/s per device used (throughput-per-device: SSD's draft device counts, so SSD must be
faster per sequence by more than its devices / SD's). The planner recommends the mode with the highest mean objective
over the draws: the choice that minimises the expected regret (tok/s given up against the best mode) under the
profile's uncertainty. A call is close when P(SSD beats SD) lies between 1 - CONFIDENT and CONFIDENT; the decision
then names the measurement that would settle it (the source whose spread alone moves the SSD / SD ratio most, the
same for both objectives). Users who would rather give up speed than risk a slower mode rank plans by a low
quantile instead (--risk).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ssd_sim.model.drift import LEVEL  # the central prediction interval (the drift's t widening is set at it)
from ssd_sim.model.profile import Profile
from ssd_sim.model.uncertainty import (
    CPU_INTERFERENCE,
    GPU_INTERFERENCE,
    SOURCES,
    Uncertainty,
    drawn_profile,
    draws,
    for_forwards,
)
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict_ar, predict_sd, predict_ssd

DRAWS = 200  # profiles per interval: the 5% / 95% quantiles move by ~1.5% of the width between seeds
CONFIDENT = 0.8  # a call is confident when one of SSD / SD wins in at least 80% of the draws (4 to 1 odds)

SETTLE = {
    "workload": "calibrate on more prompts of your workload (the spread between prompts dominates)",
    "latency": "repeat the runs, interleaved (run-to-run timing noise dominates)",
    "latency-specs": "time the pair on this hardware: the latencies are a roofline with assumed efficiencies "
                     "(ssd-run calibrate-here there, then ssd-plan --profile)",
    "extrapolation": "time forwards of this plan's size: run one SSD trace of this plan (ssd-run --plan PLAN "
                     "--mode ssd --trace T) and recalibrate (its latency is extrapolated past the timed shapes)",
    "interference": "run one SSD trace of this plan (ssd-run --plan PLAN --mode ssd --trace T) and recalibrate: "
                    "how much the two models slow each other is not measured",
    "interference-measured": "record more SSD rounds of this plan (ssd-run --plan PLAN --mode ssd --trace T) or probe "
                             "longer (ssd-run probe --probe-repeats N) and recalibrate: the measured slowdowns of "
                             "the two models beside each other spread the most",
    "hit": "record SD or SSD traces with ssd-run --log-topn 20 (the default): the hit curve is assumed",
    "saguaro": "record traces with logged distributions (ssd-run --log-topn): C's effect is assumed",
}


def uncertainty_of(profile: Profile) -> Uncertainty:
    """The profile's Uncertainty, or stated defaults (all assumed) for profiles without one."""
    if profile.uncertainty is not None:
        return profile.uncertainty
    cpu = "cpu" in profile.hardware.lower() or (profile.host is not None and not profile.host.gpus)
    sd = (CPU_INTERFERENCE if cpu else GPU_INTERFERENCE)[1] / 4  # around the profile's own interference values
    return Uncertainty(interference=(), interference_sd=sd, sources={
        "all": f"assumed: defaults (no calibration): per-sequence logit SD 0.5 over 8 sequences, run latency "
               f"+-8%, interference SD {sd:.1%} around the profile's values"})


def at_horizon(profile: Profile, horizon: str) -> Profile:
    """The profile with the latency spread of a run at `horizon` (model.drift: "session" = within the hour of the
    calibration's timed forwards, "later" = hours later or unknown, every profile's own)."""
    u = uncertainty_of(profile)
    return profile if u.horizon == horizon else replace(profile, uncertainty=u.at_horizon(horizon))


def sample(profile: Profile, plan: Plan, sd_k: int, n: int = DRAWS, seed: int = 0, run_sequences: int | None = None,
           only: str | None = None, ar: bool = True) -> dict[str, np.ndarray]:
    """tok/s per sequence of AR, SD (K = sd_k) and the SSD plan, its p_hit, tokens per round and round ms, per draw.
    ar=False leaves AR out (its entry is nan), for callers that compare SSD with SD only."""
    u = uncertainty_of(profile)
    d = draws(u, n, seed, run_sequences, only, rows_tokens(plan))
    # common draws, each mode's latency extrapolated only past the forwards that mode runs
    d_ar, d_sd = (for_forwards(u, d, f) for f in (ar_rows_tokens(plan), sd_rows_tokens(plan, sd_k)))
    out = {k: np.empty(n) for k in ("ar", "sd", "ssd", "p_hit", "tokens_per_round", "round_ms")}
    if not ar:
        out["ar"][:] = np.nan
    for i in range(n):
        ssd = predict_ssd(drawn_profile(profile, u, d, i), plan)
        if ar:
            out["ar"][i] = predict_ar(drawn_profile(profile, u, d_ar, i), plan.batch_size).per_seq_tok_s
        sd = predict_sd(drawn_profile(profile, u, d_sd, i), plan.batch_size, sd_k, plan.temperature)
        out["sd"][i] = sd.per_seq_tok_s
        out["ssd"][i] = ssd.per_seq_tok_s
        out["p_hit"][i], out["tokens_per_round"][i], out["round_ms"][i] = ssd.p_hit, ssd.tokens_per_round, ssd.round_ms
    return out


def rows_tokens(plan: Plan) -> tuple[int, int]:
    """The largest forwards of the SSD plan, in rows x tokens: (target verify, draft glue or branch step)."""
    b = plan.batch_size
    return b * (plan.K + 1), max(b * plan.budget, b * (plan.K + 1))


def sd_rows_tokens(plan: Plan, sd_k: int) -> tuple[int, int]:
    """SD's largest forwards at K = sd_k: the verify of K + 1 tokens per row, and the draft step that feeds 2 tokens
    per row (the K-th draft token and the bonus, after a round in which a row accepted all K)."""
    b = plan.batch_size
    return b * (sd_k + 1), b * 2


def ar_rows_tokens(plan: Plan) -> tuple[int, int]:
    """AR's forwards: one token per row on the target; no draft forward (1 extrapolates nothing)."""
    return plan.batch_size, 1


def interval(x: np.ndarray, level: float = LEVEL) -> dict[str, float]:
    """Mean, median and the central `level` interval of draws x."""
    lo, mid, hi = np.quantile(x, [(1 - level) / 2, 0.5, (1 + level) / 2])
    return {"mean": float(np.mean(x)), "p50": float(mid), "low": float(lo), "high": float(hi), "level": level}


OBJECTIVE_LABEL = {"latency": "tok/s per sequence", "throughput-per-device": "tok/s per device"}


@dataclass(frozen=True)
class Decision:
    """AR, SD or SSD under uncertainty: the mode with the highest mean objective over the draws, P(SSD beats SD) under
    the objective, whether the call is close and what would settle it. p_ssd_beats_sd is always per sequence,
    p_ssd_beats_sd_per_device per device used; p_objective is the one of the two the decision was taken on."""

    p_ssd_beats_sd: float
    recommended_mode: str  # ssd | sd | ar
    dominant: str  # the uncertainty source that moves SSD / SD most on its own
    settle: str  # the measurement that would settle it
    p_ssd_beats_sd_per_device: float = float("nan")
    objective: str = "latency"
    expected: tuple[float, float, float] = (float("nan"),) * 3  # mean objective of AR, SD, SSD over the draws

    @property
    def p_objective(self) -> float:
        return self.p_ssd_beats_sd if self.objective == "latency" else self.p_ssd_beats_sd_per_device

    @property
    def close(self) -> bool:
        """Neither SSD nor SD wins in CONFIDENT of the draws."""
        return 1.0 - CONFIDENT < self.p_objective < CONFIDENT

    def to_dict(self) -> dict:
        return {"p_ssd_beats_sd": self.p_ssd_beats_sd, "p_ssd_beats_sd_per_device": self.p_ssd_beats_sd_per_device,
                "decided_on": OBJECTIVE_LABEL[self.objective], "p_objective": self.p_objective,
                "recommended_mode": self.recommended_mode, "rule": "highest mean over the draws",
                "expected": dict(zip(("ar", "sd", "ssd"), self.expected, strict=True)),
                "close_call": self.close, "confident_from": CONFIDENT,
                "dominant_uncertainty": self.dominant, "settle": self.settle}


def decide(profile: Profile, plan: Plan, sd_k: int, samples: dict[str, np.ndarray], n: int = 50,
           objective: str = "latency") -> Decision:
    """Recommend the mode (ar / sd / ssd) with the highest mean objective over the draws `samples`: the Bayes choice
    for a loss of tok/s given up. AR and SD use the same devices, so per sequence and per device rank them alike; an
    AR entry of nan (samples drawn with ar=False) leaves AR out."""
    if objective not in OBJECTIVE_LABEL:
        raise ValueError(f"objective must be one of {tuple(OBJECTIVE_LABEL)}, got {objective!r}")
    p_seq = float(np.mean(samples["ssd"] > samples["sd"]))
    # per device: SSD's total tok/s over target + draft devices against SD's over the target's (b cancels)
    sd_devices = profile.latency.target_devices
    ssd_devices = sd_devices + plan.draft_devices
    p_dev = float(np.mean(samples["ssd"] * sd_devices > samples["sd"] * ssd_devices))
    per = (1.0, 1.0, 1.0) if objective == "latency" else (1 / sd_devices, 1 / sd_devices, 1 / ssd_devices)
    modes = ("ar", "sd", "ssd")
    expected = tuple(float(np.mean(samples[m]) * w) for m, w in zip(modes, per, strict=True))
    rec = max((i for i, e in enumerate(expected) if np.isfinite(e)), key=lambda i: expected[i])
    spread = {}
    for src in SOURCES:
        s = sample(profile, plan, sd_k, n, seed=1, only=src, ar=False)
        spread[src] = float(np.std(np.log(s["ssd"] / s["sd"])))
    dominant = max(spread, key=spread.get)
    from_specs = dominant == "latency" and profile.host is None and "roofline" in profile.provenance
    measured = dominant == "interference" and not uncertainty_of(profile).interference
    key = "latency-specs" if from_specs else "interference-measured" if measured else dominant
    return Decision(p_seq, modes[rec], dominant, SETTLE[key], p_dev, objective, expected)


def quantile_tok_s(profile: Profile, plans: list[Plan], q: float, n: int = 100, seed: int = 0) -> list[float]:
    """The q-quantile of SSD tok/s per sequence of each plan over common draws (for --risk)."""
    u = uncertainty_of(profile)
    d = draws(u, n, seed)
    vals = np.empty((len(plans), n))
    by_forwards: dict[tuple[int, int], list[tuple[int, Plan]]] = {}
    for j, plan in enumerate(plans):
        by_forwards.setdefault(rows_tokens(plan), []).append((j, plan))
    for forwards, mine in by_forwards.items():  # the same draws, extrapolated past each plan's own forwards
        at = for_forwards(u, d, forwards)
        for i in range(n):
            p = drawn_profile(profile, u, at, i)
            for j, plan in mine:
                vals[j, i] = predict_ssd(p, plan).per_seq_tok_s
    return [float(np.quantile(v, q)) for v in vals]


def uncertainty_report(profile: Profile, plan: Plan, sd_k: int, objective: str = "latency",
                       seed: int = 0) -> dict:
    """Intervals of every predicted quantity, P(SSD beats SD) and the decision under the objective, as the JSON
    report holds them."""
    s = sample(profile, plan, sd_k, seed=seed)
    d = decide(profile, plan, sd_k, s, objective=objective)
    u = uncertainty_of(profile)
    out = {k: interval(v) for k, v in s.items()}
    out.update(d.to_dict())
    out.update(draws=len(s["ssd"]), run_sequences=u.run_sequences, horizon=u.horizon, timed_at=list(u.timed_at),
               session_spread_measured=u.latency_session_sd is not None, sources=dict(u.sources),
               note=f"intervals: tok/s per sequence, spanning the profile's uncertainty (model/uncertainty.py); the "
                    f"decision compares SSD with SD in {OBJECTIVE_LABEL[objective]} (the objective) at the same draws")
    return out


def horizon_note(u: dict) -> str:
    """One line: which run an uncertainty_report's latency spread is for, against the profile's timed forwards."""
    when = f" (timed {u['timed_at'][0]} .. {u['timed_at'][1]})" if u["timed_at"] else ""
    if u["horizon"] == "session":
        return f"intervals for a run within the hour of the profile's timed forwards{when}; a run later drifts more"
    return f"intervals for a run more than an hour after the profile's timed forwards{when}"


def scaled_interval(profile: Profile, plan: Plan, mode: str, value: float, run_sequences: int | None = None,
                    level: float = LEVEL) -> tuple[float, float]:
    """The interval of a tok/s `value` from elsewhere (a simulation of the plan in `mode`): value times the analytic
    interval's ends relative to the analytic point, for a run of `run_sequences` sequences."""
    s = sample(profile, plan, plan.K, run_sequences=run_sequences)
    point = {"ar": predict_ar(profile, plan.batch_size).per_seq_tok_s,
             "sd": predict_sd(profile, plan.batch_size, plan.K, plan.temperature).per_seq_tok_s,
             "ssd": predict_ssd(profile, plan).per_seq_tok_s}[mode]
    iv = interval(s[mode], level)
    return value * iv["low"] / point, value * iv["high"] / point
