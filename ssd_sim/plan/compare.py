"""A measured trace beside the prediction for the plan it ran (the dashboard's Traces page).

Units: tok/s, tokens, ms; rates in [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ssd_sim.io.trace import PHASES, Trace, summarize
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict


def trace_series(trace: Trace, window: int = 20) -> dict:
    """Per-round arrays of a trace: round, mean acceptance length (accepted + 1, tokens), SSD hit
    share of the round's lookups (nan without lookups), rolling hit rate over `window` rounds, and
    ms per phase (PHASES)."""
    rounds = trace.rounds
    idx, acc_len, hits, looks = [], [], [], []
    phases: dict[str, list[float]] = {ph: [] for ph in PHASES}
    for r in rounds:
        seqs = r.seqs
        idx.append(int(r.round))
        acc_len.append(float(np.mean([s.accepted + 1 for s in seqs])) if seqs else math.nan)
        looked = [s for s in seqs if s.hit is not None and not s.first]
        hits.append(sum(bool(s.hit) for s in looked))
        looks.append(len(looked))
        for ph in PHASES:
            phases[ph].append(float(r.timings_ms.get(ph, 0.0)))
    h, n = np.asarray(hits, dtype=float), np.asarray(looks, dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_round = np.where(n > 0, h / np.where(n > 0, n, 1), np.nan)
        w = max(int(window), 1)
        ch, cn = np.concatenate([[0], np.cumsum(h)]), np.concatenate([[0], np.cumsum(n)])
        lo = np.maximum(np.arange(1, len(h) + 1) - w, 0)
        roll_n = cn[1:] - cn[lo]
        rolling = np.where(roll_n > 0, (ch[1:] - ch[lo]) / np.where(roll_n > 0, roll_n, 1), np.nan)
    return {"round": idx, "accept_len": acc_len, "hit_rate": per_round.tolist(),
            "rolling_hit_rate": rolling.tolist(), "phase_ms": phases}


def trace_plan(trace: Trace) -> Plan:
    """The plan a trace ran: the header's plan with the trace's batch size and mode."""
    plan = Plan.from_dict(trace.plan)
    return plan.replace(batch_size=int(trace.header.batch_size), mode=trace.mode)


def predicted_vs_measured(profile: Profile, trace: Trace, simulated: dict | None = None) -> dict:
    """Measured metrics of a trace beside the analytic prediction for its plan on `profile`.

    `simulated`: optional SimMetrics.to_dict() of a simulated run of the same plan. Returns
    {"metrics": TraceMetrics dict, "prediction": Prediction dict, "rows": [(name, predicted, measured,
    simulated or None)]} with rows for decode tok/s (all sequences), mean acceptance length (tokens,
    bonus included) and, in SSD mode, the cache hit rate.
    """
    pred = predict(profile, trace_plan(trace))
    m = summarize(trace)
    sim = simulated or {}
    rows = [("tok/s (all sequences)", pred.total_tok_s, m.tok_s, sim.get("total_tok_s")),
            ("mean acceptance length (tokens)", pred.tokens_per_round, m.mean_accept_len, sim.get("mean_accept_len"))]
    if trace.mode == "ssd":
        rows.append(("cache hit rate", pred.p_hit, m.hit_rate, sim.get("hit_rate")))
    return {"metrics": m.to_dict(), "prediction": pred.to_dict(), "rows": rows}


def position_curves(trace: Trace, profile: Profile) -> dict:
    """Per stopping position: acceptance and next-round hit rate of the trace, measured (counted rounds), derived
    from its own logged distributions (None without them) and predicted by the profile for its plan.

    acceptance: positions 0..K-1 (P(accept the token drafted there | reached)); hit: positions 0..K (P(the next
    round hits | this round stopped at k) with the fan-out the trace's plan cached there; SSD traces only measure it).
    """
    from ssd_sim.model.logged import logged_positions, response
    from ssd_sim.plan.predict import plan_point

    plan = trace_plan(trace)
    K = plan.K
    m = summarize(trace)
    out = {"position": list(range(K + 1)), "measured_acceptance": [float(a) for a in m.per_position_acceptance][:K],
           "measured_hit": _measured_hit_by_position(trace, K)}
    pt = plan_point(profile, plan)
    out["profile_acceptance"] = [float(pt.acceptance[min(k, len(pt.acceptance) - 1)]) for k in range(K)]
    out["profile_hit"] = [float(h) for h in pt.primary_hit.hit(list(plan.fan_out))]
    lp = logged_positions([trace])
    if lp is None:
        out["derived_acceptance"] = out["derived_hit"] = None
        return out
    # the distributions alone (no truncation share from this trace's own counts: they are the "measured" column)
    r = response(replace(lp, counted=None), plan.temperature, plan.saguaro_c, plan.downweight, min_contexts=10)
    rows = len(r.acceptance)
    out["derived_acceptance"] = [float(r.acceptance[min(k, rows - 1)]) for k in range(K)]
    f_cap = r.reject.shape[1] - 1
    out["derived_hit"] = [float((r.reject if k < K else r.accepted)[min(k, rows - 1), min(plan.fan_out[k], f_cap)])
                          for k in range(K + 1)]
    return out


def _measured_hit_by_position(trace: Trace, K: int) -> list[float | None]:
    """SSD: share of rounds stopping at k whose bonus was cached (bonus_rank < fan_out); None where none did."""
    hit, n = [0] * (K + 1), [0] * (K + 1)
    for r in trace.rounds:
        for s in r.seqs:
            if s.bonus_rank is None or s.fan_out is None or s.accepted > K:
                continue
            n[s.accepted] += 1
            hit[s.accepted] += s.bonus_rank < s.fan_out
    return [h / c if c else None for h, c in zip(hit, n, strict=True)]
