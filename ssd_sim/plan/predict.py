"""Analytic predictions (tok/s) of AR, SD and SSD for a Profile, with batch-dependent latencies.

SSD round model (one round = one target verification), for b sequences:
    hit round  = transfer + lookup + max(T_v, T_p)
    miss round = transfer + lookup + T_b + max(T_v, T_p)     (the draft runs the backup before replying)
A round is a hit round when every sequence hits (Corollary 16: probability pi^b with independent hits). After a
jit backup that redrafted every row (probability (1 - pi)^b, or 1 - pi^b with jit_redraft = "batch") the glue feeds
one token per row, so max(T_v, T_p) is the one after it (LatencyModel.glue_ms, after_jit).
Hit chain per sequence: after a cache-served round the next hits with h_p = sum_k P_p(k) (1 - miss_p(F^p_k));
after a backup-served round with h_b = sum_k P_b(k) (1 - miss_b(F^b_k)). The stationary share of cache-served
rounds is pi = h_b / (1 - h_p + h_b). Tokens per round per sequence: pi E_hit + (1 - pi) E_miss.
T_v is the verification as it runs while the draft speculates: slowed by the profile's interference, if
any (LatencyModel.ssd_verify_ms); SD and AR verifications run with the draft idle.
With zero overheads and interference, T_p <= T_v and h_p = h_b this is exactly analytic.ssd_speedup times the
AR rate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ssd_sim.model.acceptance import AcceptancePoint
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan


@dataclass(frozen=True)
class Prediction:
    """Predicted steady-state performance of one configuration. Units: tok/s, ms, tokens."""

    mode: str  # ar | sd | ssd
    batch_size: int
    num_speculative_tokens: int  # K (0 for ar)
    per_seq_tok_s: float
    total_tok_s: float
    devices: int  # accelerators used: target devices (+ draft devices for SSD)
    tok_s_per_device: float
    round_ms: float  # mean time per round (ms)
    tokens_per_round: float  # per sequence, bonus included (= mean acceptance length)
    verify_ms: float  # T_v at this batch (ms)
    draft_ms: float  # SD: drafting per round; SSD: primary speculation T_p (ms)
    backup_ms: float = 0.0  # SSD: backup latency on a miss round (ms)
    p_hit: float | None = None  # SSD: stationary per-sequence hit probability
    p_all_hit: float | None = None  # SSD: probability that the whole batch hits
    e_hit: float | None = None  # SSD: tokens per round when served from the cache
    e_miss: float | None = None  # SSD: tokens per round when served by the backup
    backup: str | None = None  # SSD: backup used at this batch size

    def to_dict(self) -> dict:
        return asdict(self)


def predict_ar(profile: Profile, batch_size: int = 1) -> Prediction:
    """Autoregressive decoding: one target step per token."""
    lat = profile.latency
    step = float(lat.ar_step_ms(batch_size))
    per_seq = 1e3 / step
    dev = lat.target_devices
    return Prediction("ar", batch_size, 0, per_seq, per_seq * batch_size, dev, per_seq * batch_size / dev,
                      step, 1.0, step, 0.0)


def predict_sd(profile: Profile, batch_size: int, K: int, temperature: float = 0.0) -> Prediction:
    """Synchronous SD: K draft steps then one verification of K + 1 tokens, draft colocated with the target
    (the first step feeds 2 tokens after a round that accepted all K: LatencyModel.sd_draft_ms)."""
    lat = profile.latency
    acc = profile.acceptance.at(temperature, 1.0)
    verify = float(lat.sd_verify_ms(batch_size, K, acc.pmf(K)[K]))
    draft = float(lat.sd_draft_ms(batch_size, K, acc.pmf(K)[K]))
    e = acc.expected_tokens(K)
    per_seq = e / (verify + draft) * 1e3
    dev = lat.target_devices
    return Prediction("sd", batch_size, K, per_seq, per_seq * batch_size, dev, per_seq * batch_size / dev,
                      verify + draft, e, verify, draft)


def backup_outcomes(acc: AcceptancePoint, K: int, backup: str):
    """(P(k) after the backup's proposal, its hit curve for the next round, E tokens) for jit or fast.

    jit drafts with the same model and sampler as the primary; fast proposes random tokens, which are
    (almost) never accepted, so k = 0 and the bonus is a plain target sample (the backup hit curve).
    """
    if backup == "jit":
        return acc.pmf(K), acc.primary_hit, acc.expected_tokens(K)
    pmf = np.zeros(K + 1)
    pmf[0] = 1.0
    return pmf, acc.backup_hit, 1.0


def round_times(profile: Profile, b: int, K: int, budget, draft_devices: int = 1) -> dict:
    """The parts of the SSD round that do not depend on hit rates or the backup, vectorised over budgets (ms):
    t_v (the verify as slowed while the draft works), t_p (primary speculation) and base (transfer + lookup +
    max(t_v, t_p)); base_jit: base after a jit backup of every row. ssd_rates takes them precomputed, so a search
    over C and backups at one (b, K) shares them."""
    lat = profile.latency
    budget = np.asarray(budget, dtype=float)
    t_v = lat.ssd_verify_ms(b, K, budget, draft_devices) * np.ones_like(budget)  # slowed while the draft works
    t_p = lat.primary_ms(b, K, budget, draft_devices)
    over = lat.transfer_ms + lat.lookup_ms
    base = over + np.maximum(t_v, t_p)
    if lat.jit_glue_full:  # the glue is the same after a jit backup
        return {"t_v": t_v, "t_p": t_p, "base": base, "base_jit": base}
    t_vj = lat.ssd_verify_ms(b, K, budget, draft_devices, after_jit=True) * np.ones_like(budget)
    t_pj = lat.primary_ms(b, K, budget, draft_devices, after_jit=True)
    return {"t_v": t_v, "t_p": t_p, "base": base, "base_jit": over + np.maximum(t_vj, t_pj)}


def ssd_rates(profile: Profile, b: int, K: int, budget, h_p, h_b, e_hit: float, e_miss: float,
              backup: str, jit_redraft: str = "rows", draft_devices: int = 1, times: dict | None = None) -> dict:
    """The SSD round model, vectorised over arrays of (budget, h_p, h_b). Returns arrays (ms, tok/s).
    times: round_times(profile, b, K, budget, draft_devices), when the caller has them."""
    lat = profile.latency
    h_p, h_b = np.asarray(h_p, dtype=float), np.asarray(h_b, dtype=float)
    pi = h_b / np.maximum(1.0 - h_p + h_b, 1e-12)
    p_all = pi**b
    times = times or round_times(profile, b, K, budget, draft_devices)
    t_v, t_p = times["t_v"], times["t_p"]
    if backup == "fast":
        t_b, p_redraft = np.full_like(pi, lat.fast_backup_ms), 0.0
    else:
        # Per-row redraft: expected number of missed rows given at least one miss.
        rows = np.full_like(pi, b) if jit_redraft == "batch" else b * (1 - pi) / np.maximum(1 - p_all, 1e-12)
        t_b = lat.jit_backup_ms(np.maximum(rows, 1.0), K)
        p_redraft = 1.0 - p_all if jit_redraft == "batch" else (1.0 - pi) ** b  # every row redrafted
    base = times["base"]
    round_ms = base + p_redraft * (times["base_jit"] - base) + (1.0 - p_all) * t_b
    tokens = pi * e_hit + (1.0 - pi) * e_miss
    per_seq = tokens / round_ms * 1e3
    return {"pi": pi, "p_all": p_all, "t_v": t_v, "t_p": t_p, "t_b": t_b, "round_ms": round_ms,
            "tokens": tokens, "per_seq": per_seq}


def predict(profile: Profile, plan: Plan, mode: str | None = None) -> Prediction:
    """The analytic prediction of a plan run in `mode` (ar | sd | ssd; default the plan's own mode)."""
    mode = mode or plan.mode
    if mode == "ar":
        return predict_ar(profile, plan.batch_size)
    if mode == "sd":
        return predict_sd(profile, plan.batch_size, plan.K, plan.temperature)
    return predict_ssd(profile, plan)


def effective_saguaro_c(plan: Plan) -> float:
    """The C that actually acts: the draft token at position k+1 is sampled with the top-F_k tokens
    down-weighted, so a plan that caches no guess at any drafted position (F_k = 0 for k < K, in both
    lists) samples exactly as C = 1 does. Greedy drafting (T = 0) ignores C too.
    (Where only some F_k are 0 the model still applies C's effect to every position: an approximation.)"""
    drafted = plan.fan_out[:-1] + plan.fan_out_miss[:-1]
    return plan.saguaro_c if plan.temperature > 0 and any(drafted) else 1.0


def plan_point(profile: Profile, plan: Plan) -> AcceptancePoint:
    """The acceptance point an SSD plan runs at: at(T, C), or per drafting position with a C list
    (AcceptanceModel.at_positions). A position caching no guess (and with nothing down-weighted) drafts
    as C = 1 does there."""
    if not plan.saguaro_c_list or plan.temperature == 0:
        return profile.acceptance.at(plan.temperature, effective_saguaro_c(plan), plan.downweight)
    extra = 1 if plan.downweight == "top_f_plus_1" else 0
    cs = [c if plan.fan_out[k] + extra or plan.fan_out_miss[k] + extra else 1.0
          for k, c in enumerate(plan.saguaro_c_list)]
    return profile.acceptance.at_positions(plan.temperature, cs, plan.downweight)


def predict_ssd(profile: Profile, plan: Plan) -> Prediction:
    """SSD with the plan's K, fan-out lists, Saguaro C, backup policy, batch size and draft devices."""
    b, K = plan.batch_size, plan.K
    acc = plan_point(profile, plan)
    backup = plan.backup_for(b)
    pmf_b, curve_b, e_miss = backup_outcomes(acc, K, backup)
    h_p = float(acc.pmf(K) @ acc.primary_hit.hit(np.asarray(plan.fan_out)))
    h_b = float(pmf_b @ curve_b.hit(np.asarray(plan.fan_out_miss)))
    e_hit = acc.expected_tokens(K)
    r = ssd_rates(profile, b, K, plan.budget, h_p, h_b, e_hit, e_miss, backup, plan.jit_redraft,
                  plan.draft_devices)
    per_seq = float(r["per_seq"])
    dev = profile.latency.target_devices + plan.draft_devices
    return Prediction("ssd", b, K, per_seq, per_seq * b, dev, per_seq * b / dev, float(r["round_ms"]),
                      float(r["tokens"]), float(r["t_v"]), float(r["t_p"]), float(r["t_b"]), float(r["pi"]),
                      float(r["p_all"]), e_hit, e_miss, backup)
