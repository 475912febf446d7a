"""The plan report: what ssd-plan prints as --json and writes into a plan file, as a library function (the
dashboard and `ssd-run calibrate-here` build it here, not through a CLI)."""

from __future__ import annotations

import math

from ssd_sim.io.host import Host, current_host, host_warning
from ssd_sim.model.drift import GUEST_SHIFT, SHIPPED_DRIFTS
from ssd_sim.model.profile import Profile
from ssd_sim.model.table import MeasuredForward
from ssd_sim.plan.emit import engine_flags
from ssd_sim.plan.intervals import uncertainty_report
from ssd_sim.plan.plan import Plan, PlanFile
from ssd_sim.plan.planner import PlanResult, bound_notes


def build_report(profile: Profile, result: PlanResult, simulated: dict | None = None, source: dict | None = None) -> dict:
    """The JSON report: plan, predictions, engine flags and the reasoning."""
    ar, sd, ssd = result.ar, result.sd, result.ssd
    predicted = {
        "ar_tok_s": ar.per_seq_tok_s, "sd_tok_s": sd.per_seq_tok_s, "ssd_tok_s": ssd.per_seq_tok_s,
        "ar_total_tok_s": ar.total_tok_s, "sd_total_tok_s": sd.total_tok_s, "ssd_total_tok_s": ssd.total_tok_s,
        "ar_tok_s_per_device": ar.tok_s_per_device, "sd_tok_s_per_device": sd.tok_s_per_device,
        "ssd_tok_s_per_device": ssd.tok_s_per_device,
        "sd_num_speculative_tokens": sd.num_speculative_tokens,
        "p_hit": ssd.p_hit, "p_all_hit": ssd.p_all_hit, "e_hit": ssd.e_hit, "e_miss": ssd.e_miss,
        "ssd_verify_ms": ssd.verify_ms, "ssd_primary_ms": ssd.draft_ms, "ssd_backup_ms": ssd.backup_ms,
        "ssd_round_ms": ssd.round_ms, "speedup_ssd_vs_ar": ssd.per_seq_tok_s / ar.per_seq_tok_s,
        "speedup_ssd_vs_sd": ssd.per_seq_tok_s / sd.per_seq_tok_s,
        "speedup_ssd_vs_sd_bound": result.gain_bound, "gain_captured": _finite(result.gain_captured),
    }
    report = {
        "plan": result.plan.to_dict(),
        "profile": (source or {}).get("profile", {"name": profile.name}),
        "objective": result.objective,
        "recommended_mode": result.recommended_mode,
        "predicted": predicted,
        "binding": result.binding,
        "search_bounds": bound_notes(result),  # optima on a search bound (--max-k), one line each
        "b_star": None if math.isinf(result.b_star) else result.b_star,
        "b_star_closed_form": None if math.isinf(result.b_star_closed_form) else result.b_star_closed_form,
        "b_star_curve": result.crossover.to_dict() if result.crossover is not None else None,
        "budget_fit": result.budget_fit,
        "baselines": {"ar": ar.to_dict(), "sd": sd.to_dict()},
        "ssd": ssd.to_dict(),
        "engine_flags": engine_flags(profile, result.plan, sd, result.budget_cap),
        "configurations_scored": result.evaluated,
        "c_per_position_gain_pct": result.c_per_position_gain_pct,
    }
    if (source or {}).get("context_note"):
        report["context_note"] = source["context_note"]  # the latencies' context came from the workload's lengths
    if simulated:
        report["simulated"] = simulated
    unc = uncertainty_report(profile, result.plan, sd.num_speculative_tokens, result.objective)
    report["uncertainty"] = unc
    report["recommended_mode"] = unc["recommended_mode"]  # the decision under uncertainty, for the objective
    report["reference_engine"] = reference_engine_report(result, report["engine_flags"]["ssd-engine"],
                                                         report["recommended_mode"])
    report["host"] = host_report(profile)
    report["memory"] = memory_report(profile, [result.plan.batch_size], result.plan, report["recommended_mode"])
    tables = table_report(profile, result.plan, sd.num_speculative_tokens)
    if tables is not None:
        report["latency_tables"] = tables
    return report


def reference_engine_report(result: PlanResult, flags: dict, recommended: str) -> dict | None:
    """The recommendation as the reference engine would run the plan (emit.reference_plan: its budget is a multiple
    of K + 1, one C, no adaptive backup): SSD there only if SSD is recommended and the engine's SSD plan still beats
    SD under the objective (point predictions); None where the engine cannot run the pair."""
    if not flags.get("supported"):
        return None
    per_device = result.objective != "latency"
    ssd = flags["predicted_tok_s_per_device"] if per_device else flags["predicted_tok_s"]
    sd = result.sd.tok_s_per_device if per_device else result.sd.per_seq_tok_s
    changed = not math.isclose(flags["predicted_tok_s"], result.ssd.per_seq_tok_s, rel_tol=1e-9)
    mode = "ssd" if recommended == "ssd" and ssd > sd else ("sd" if recommended == "ssd" else recommended)
    return {"objective": result.objective, "ssd": ssd, "sd": sd, "prediction_changed": changed, "recommended_mode": mode}


def table_report(profile: Profile, plan: Plan, sd_k: int) -> dict | None:
    """For a probed profile: the probed ranges and the forwards of this plan (and its baselines) that lie outside
    them, whose latency is extrapolated (a curve fitted to the table); None for a profile without tables."""
    lat = profile.latency
    if not any(isinstance(m, MeasuredForward) for m in (lat.target, lat.draft)):
        return None
    b, K = plan.batch_size, plan.K
    rows = -(-b * plan.budget // plan.draft_devices)
    asks = [(lat.target, "AR step", b, 1), (lat.target, "SD verify", b, sd_k + 1), (lat.target, "SSD verify", b, K + 1),
            (lat.draft, "SD draft step", b, 1), (lat.draft, "SSD glue", b, K + 1),
            (lat.draft, "SSD branch step", rows, 1)]
    outside = [f"{what} ({r} rows x {t} tokens)" for model, what, r, t in asks
               if isinstance(model, MeasuredForward) and not bool(model.covers(r, t))]
    out = {role: m.probed_range() for role, m in (("target", lat.target), ("draft", lat.draft))
           if isinstance(m, MeasuredForward)}
    out["outside"] = outside
    out["warning"] = (f"latency extrapolated past the probed shapes for {', '.join(outside)} (probed: target "
                      f"{out.get('target', '-')}, draft {out.get('draft', '-')}): probe these shapes "
                      "(ssd-run probe --probe-batch / --probe-max-k / --probe-branch-rows) and recalibrate"
                      if outside else None)
    return out


def memory_report(profile: Profile, batch_sizes: list[int], plan: Plan | None = None, mode: str = "ssd") -> dict:
    """The most sequences whose KV caches fit in `mode` (model.memory; SSD with `plan`'s branch rows), each mode's
    count, where they come from, and a one-line warning naming the batch sizes above `mode`'s, where the counts are
    derived from the shapes and the GPUs (a spec profile's; a preset's or calibration's max_batch_size is the range
    it was measured over, not memory: no counts per mode, no warning)."""
    mem = profile.memory
    if mem is None:
        why = profile.provenance.get("max_batch_size") or None
        return {"max_batch_size": profile.max_batch_size, "source": why, "by_mode": None, "over": [], "warning": None}
    branch = (plan.K, plan.budget, plan.draft_devices) if plan is not None else (0, 0, 1)
    counts, why = mem.by_mode(None, *branch), mem.explain(None, *branch)
    over = sorted({b for b in batch_sizes if b > counts[mode]})
    sizes = f"batch size {over[0]} does not" if len(over) == 1 else f"batch sizes {', '.join(map(str, over))} do not"
    warning = (f"{sizes} fit {mode.upper()} (at most {counts[mode]} sequences): {why.removeprefix('derived: ')}; the "
               "prediction there reads KV caches "
               "the devices cannot hold: lower -b or the context, or raise --tp / choose a larger --draft-gpu"
               if over else None)
    return {"max_batch_size": counts[mode], "source": why, "by_mode": counts, "over": over, "warning": warning}


def plan_file(result: PlanResult, report: dict) -> PlanFile:
    """The plan file ssd-plan -o writes: the plan plus the rest of the report."""
    return PlanFile(result.plan, {k: v for k, v in report.items() if k != "plan"})


def host_report(profile: Profile, here: Host | None = None) -> dict:
    """Where the profile was measured, this host (`here`, read when not given), and the one-line warning when they
    differ (or None)."""
    here, measured = here or current_host(), profile.measured_host()  # measured: also a trace line without a record
    return {"measured_on": measured.to_dict() if measured is not None else None, "here": here.to_dict(),
            "warning": host_warning(profile.name, measured, here, GUEST_FIX, _timed_end(profile))}


def _timed_end(profile: Profile) -> str:
    """When the profile's forwards were last timed (ISO UTC), '' when it does not say."""
    u = profile.uncertainty
    return u.timed_at[-1] if u is not None and u.timed_at else ""


# Not a host difference: one host kind's guests ran the same runs 27% apart (model.drift.GUEST_SHIFT), more than the
# later intervals' drift holds, and so is a slow episode on one guest (1.15-1.26x, traces/cpu-fp32-xeon-fresh96-later):
# re-timing is the remedy for both.
GUEST_FIX = (f": repeats of one run hours apart or on another guest moved up to {GUEST_SHIFT:.0%} in this project's "
             f"traces, beyond the later intervals' drift ({SHIPPED_DRIFTS['later'].sd:.1%} SD); re-time this guest "
             "before a run: `ssd-run probe -o probe.json`, then `ssd-plan calibrate TRACES --probe probe.json`")


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None
