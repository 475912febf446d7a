"""A calibration's latencies from a probe (measured tables) instead of curves fitted to the runs' rounds.

With a probe (`ssd-plan calibrate TRACES --probe P`, `ssd-run calibrate-here`) every latency quantity the probe
measures comes from it: the target's and the draft's forwards at every probed (rows, tokens) shape
(model.table.MeasuredForward, interpolated inside, a curve fitted to the table outside) and, without SSD traces, the
verify's slowdown beside a busy draft, the draft's beside a verify and the request + reply transfer. The
traces keep what only a run shows (per-round commit, lookups, fast backups, acceptance and hits; the transfer of a
whole round where SSD traces time it: the probe's channel round trip alone was 0.9 ms against 3.0 ms in an SSD
run's rounds on one host; the two slowdowns where SSD traces time them, against the tables at the rounds' own shapes,
model.interference.probed_interference: the probe's loops time them at other shapes) and cross-check the probe: each
AR / SD trace's median verify against the table (the drift between the probe and the runs, reported per trace),
and the traces' own fits of the slowdowns and the transfer beside the probe's.
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Sequence
from dataclasses import replace

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host, host_differences
from ssd_sim.io.probe import Probe
from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace
from ssd_sim.io.values import parse_utc, utc_text
from ssd_sim.model.drift import timed_span
from ssd_sim.model.interference import idle_verify_ratio, probed_interference
from ssd_sim.model.latency import LatencyModel, fit_warnings
from ssd_sim.model.table import MeasuredForward
from ssd_sim.model.uncertainty import EXTRAPOLATION_SD, Uncertainty


def check_probe(probe: Probe, setup: dict, host: Host | None) -> None:
    """ConfigError when the probe timed other models, dtypes or devices than the traces ran, or another host."""
    for role in ("target", "draft"):
        info = probe.models.get(role) or {}
        name = info.get("source") if info.get("source") != "tiny" else info.get("label")
        for key, got in (("models", name), ("dtype", info.get("dtype")), ("devices", info.get("device"))):
            want = (setup.get(key) or {}).get(role)
            if want is not None and got is not None and str(want) != str(got):
                raise ConfigError(f"probe.{key}", f"{probe.path} timed {role} {got!r} but the traces ran {want!r}: "
                                                  "probe the same setup (ssd-run probe with the traces' model flags)")
    if host is not None and probe.host is not None:
        diffs = host_differences(host, probe.host)
        if diffs:
            raise ConfigError("probe.host", f"{probe.path} was measured on another host than the traces "
                                            f"({'; '.join(diffs)}): probe and run on one host")


def apply_probe(fitted: LatencyModel, probe: Probe, traces: Sequence[Trace], report) -> LatencyModel:
    """`fitted` (from the traces) with the probe's tables, slowdowns and transfer; report.latency gains a
    "probe" entry with the cross-checks, and its target / draft / interference entries say they are probed."""
    (target, t_rep), (draft, d_rep) = MeasuredForward.fitted(probe.target), MeasuredForward.fitted(probe.draft)
    _replace_fit_warnings(report, {"target": (target, t_rep), "draft": (draft, d_rep)})
    drift = {t.path: r for t in traces if t.mode != "ssd" and (r := _verify_ratio(t, target)) is not None}
    report.latency["probe"] = {
        "path": probe.path, "context": probe.context, "temperature": probe.temperature,
        "target_shapes": len(probe.target), "draft_shapes": len(probe.draft),
        "sample_sd": probe.spread, "runs_vs_table": drift, "timed": probe_timing(probe, traces),
        "traces_fit": {"verify_slowdown_one_row": fitted.verify_slowdown_one_row,
                       "verify_slowdown_rows": fitted.verify_slowdown_rows,
                       "draft_slowdown": fitted.draft_slowdown, "transfer_ms": fitted.transfer_ms}}
    for role, fwd in (("target", target), ("draft", draft)):
        report.latency[role] = {**report.latency[role], "source": f"measured: probe table, {len(fwd.table)} shapes "
                                f"({fwd.probed_range()}) at {probe.context} cached tokens; curve fitted to the table "
                                "outside it", "table_range": fwd.probed_range()}
    slow = _interference(probe, traces, target, draft, drift)
    report.latency["interference"] = slow
    far = {p: r for p, r in drift.items() if abs(r - 1) > 0.15}
    if far:
        worst = max(far, key=lambda p: abs(far[p] - 1))
        report.warnings.append(f"the runs' verifies are {far[worst]:.2f}x the probe table in {worst} "
                               f"({len(far)} of {len(drift)} AR / SD traces beyond 15%): host drift between probe and "
                               "runs, or another context; probe again beside the runs")
    # the probe's round trip is the channel alone; an SSD trace's rounds also carry the request and reply handling
    ssd_rounds = any(t.mode == "ssd" for t in traces)
    report.latency["probe"]["transfer_from"] = "traces" if ssd_rounds else "probe"
    model = replace(fitted, target=target, draft=draft, transfer_ms=fitted.transfer_ms if ssd_rounds else probe.transfer_ms,
                    verify_slowdown_one_row=slow["one_row"], verify_slowdown_rows=slow["rows"],
                    draft_slowdown=slow["draft"], target_after_idle=probe.after_idle.get("target", ()),
                    draft_after_idle=probe.after_idle.get("draft", ()))
    _after_idle(probe, model, traces, drift, report)
    return model


def _interference(probe: Probe, traces: Sequence[Trace], target: MeasuredForward, draft: MeasuredForward,
                  ratios: dict[str, float]) -> dict:
    """report.latency's interference entry: measured on the SSD traces' rounds against the tables where the
    calibration has SSD runs timed among AR runs (model.interference.probed_interference: the slowdowns at the runs'
    own shapes; its source line also gives the probe's loop values, to compare), else the probe's loops."""
    loops = (f"the probe's loops: verify +{probe.one_row:.1%} beside one-row draft steps, +{probe.rows:.1%} beside "
             f"multi-row steps; draft +{probe.draft_slowdown:.1%} beside a verify")
    spread = max(probe.spread.values(), default=0.03)
    rounds = probed_interference(traces, target, draft, idle_verify_ratio(ratios, traces),
                                 {"one_row": probe.one_row, "rows": probe.rows})
    if rounds is not None:
        return {**rounds, "median_abs_rel_err": max(spread, rounds["median_abs_rel_err"]), "from": "traces",
                "source": f"{rounds['source']} ({loops}, at other shapes)"}
    return {"one_row": probe.one_row, "rows": probe.rows, "draft": probe.draft_slowdown, "median_abs_rel_err": spread,
            "from": "probe",
            "source": f"measured by the probe: verify +{probe.one_row:.0%} beside one-row draft steps, +{probe.rows:.0%} "
                      "beside multi-row steps (no SSD traces timed among AR runs measure the runs' own overlap)",
            "draft_source": f"measured by the probe: draft steps and glue +{probe.draft_slowdown:.0%} beside a verify"}


def _replace_fit_warnings(report, fits: dict[str, tuple[MeasuredForward, object]]) -> None:
    """The traces' latency-fit warnings (a bound, too few sizes) concern curves the probe's tables replace: drop them,
    and warn instead where the tables' own extrapolation curve is not pinned (it serves only outside the table)."""
    stale = report.latency_fit_lines
    report.warnings[:] = [w for w in report.warnings if w not in stale]
    for role, (fwd, rep) in fits.items():
        report.warnings.extend(fit_warnings(role, rep, probed=fwd.probed_range()))


AFTER_IDLE_WARN = 0.05  # SD's verifies this much further above the table than AR's (beyond the priced wake): warn


def _after_idle(probe: Probe, model: LatencyModel, traces: Sequence[Trace], ratios: dict[str, float],
                report) -> None:
    """report.latency["probe"]["after_idle"]: the probe's wakes (LatencyModel.target_after_idle) and their source line; and
    the traces' cross-check, report.latency["probe"]["sd_vs_ar"]: the SD traces' median verify-to-table ratio over the
    AR traces' (the probe times forwards back to back, as AR runs; an SD verify follows the target's sleep while the
    draft drafts), beside "sd_wake_priced", the same ratio as the probe's wakes predict it. A warning when the traces'
    excess is more than AFTER_IDLE_WARN beyond the priced one (all of it, for a probe without after-idle forwards)."""
    wakes = probe.after_idle
    line = ("; ".join(f"{role} " + ", ".join(f"{e:+.0f} ms after {g:g} ms" for g, e in wakes[role])
                      for role in ("target", "draft")) if wakes else "")
    report.latency["probe"]["after_idle"] = {
        "target": list(wakes.get("target", ())), "draft": list(wakes.get("draft", ())),
        "source": (f"measured by the probe: a forward right after a sleep costs, over one back to back, {line}; "
                   "SD and SSD pay it after their waits" if wakes else
                   "not measured (a probe without after-idle forwards): 0 ms assumed; `ssd-run probe` times it")}
    by_mode = {m: [t for t in traces if t.mode == m and t.path in ratios] for m in ("ar", "sd")}
    if not by_mode["ar"] or not by_mode["sd"]:
        return
    excess = statistics.median(ratios[t.path] for t in by_mode["sd"]) / idle_verify_ratio(ratios, traces)
    priced = statistics.median(_priced_sd_ratio(t, model) for t in by_mode["sd"])
    report.latency["probe"].update(sd_vs_ar=excess, sd_wake_priced=priced)
    if excess - priced > AFTER_IDLE_WARN:
        report.warnings.append(
            f"SD's verifies ran {excess - 1:.0%} further above the probe table than AR's"
            + (f", the probe's after-idle forwards explain {priced - 1:.0%}" if wakes else "")
            + ": on this host a forward after an idle wait (SD's verify, the draft's first step) costs more than the "
            + ("probe's back-to-back loops (rerun `ssd-run probe` to time it)" if not wakes else "probe measured")
            + f"; SD and late SSD rounds pay it and the predictions do not: their tok/s may be up to "
              f"~{excess - priced:.0%} high")


def _priced_sd_ratio(t: Trace, model: LatencyModel) -> float:
    """1 + the target's wake after the trace's median wait (its drafting) over the table's median verify (ratio)."""
    rounds = [r for r in t.rounds if r.timings_ms[Phase.VERIFY] > 0]
    gap = statistics.median(r.timings_ms.get(Phase.TARGET_WAIT, 0.0) for r in rounds)
    verify = statistics.median(float(model.target(r.batch, r.K + 1)) for r in rounds)
    return 1.0 + float(model.wake_ms("target", gap)) / verify


def probe_timing(probe: Probe, traces: Sequence[Trace]) -> str:
    """One line: when the traces' runs and the probe were timed, and that the latency (and the intervals' horizon) is
    the probe's; "" when the probe or a trace records no start."""
    span = timed_span(traces)
    if not probe.started_at or not span:
        return ""
    hours = (parse_utc(probe.started_at) - parse_utc(span[1])).total_seconds() / 3600
    when = (f"{hours:.1f} h after the traces' last run" if hours >= 0 else f"{-hours:.1f} h before the traces' last run")
    return (f"the traces' runs started {span[0]} .. {span[1]}, the probe {probe.started_at} ({when}): the latencies "
            "are the probe's, acceptance and hit rates the traces', and intervals count their horizon from the probe")


def _verify_ratio(t: Trace, target: MeasuredForward) -> float | None:
    """The trace's median (measured verify / probe table at the round's shape); None with fewer than 5 rounds."""
    ratios = [r.timings_ms[Phase.VERIFY] / float(target(r.batch, (0 if t.mode == "ar" else r.K) + 1))
              for r in t.rounds if r.timings_ms[Phase.VERIFY] > 0]
    return float(statistics.median(ratios)) if len(ratios) >= 5 else None


def probe_provenance(probe: Probe, report) -> dict[str, str]:
    """The provenance lines a probed calibration replaces."""
    lat = report.latency
    return {"latency": f"measured: probe {probe.path} (target {lat['target']['table_range']}, draft "
                       f"{lat['draft']['table_range']}; samples' SD {probe.spread.get('target', 0):.1%} / "
                       f"{probe.spread.get('draft', 0):.1%})",
            "latency.draft": lat["draft"]["source"],
            "latency.interference": lat["interference"]["source"],
            "latency.draft_slowdown": lat["interference"]["draft_source"],
            "latency.transfer": _transfer_line(probe, lat["probe"]),
            "latency.after_idle": lat["probe"]["after_idle"]["source"]}


def _transfer_line(probe: Probe, entry: dict) -> str:
    traces_ms = entry["traces_fit"]["transfer_ms"]
    if entry["transfer_from"] == "traces":
        return (f"measured in the SSD traces' rounds: {traces_ms:.2f} ms per request + reply (the probe's channel round "
                f"trip alone: {probe.transfer_ms:.2f} ms at T = {probe.temperature:g})")
    return (f"measured by the probe: {probe.transfer_ms:.2f} ms per request + reply at b = 1, T = {probe.temperature:g} "
            "(the channel alone: a lower bound; no SSD trace timed a whole round's handling)")


def probed_uncertainty(u: Uncertainty, probe: Probe) -> Uncertainty:
    """The spreads with the probe's timed range (latency is extrapolated only beyond the probed shapes)."""
    probed = probe.max_rows_tokens()
    timed = tuple(max(a, b) for a, b in zip(u.timed_rows_tokens or (1, 1), probed, strict=True))
    src = {**u.sources, "timed_rows_tokens": f"measured: the probe timed forwards of up to {probed[0]} (target) and "
                                              f"{probed[1]} (draft) rows x tokens, the traces {u.timed_rows_tokens}; "
                                              f"beyond them latency is extrapolated (assumed +{EXTRAPOLATION_SD:.0%} SD "
                                              "per doubling)"}
    if probe.started_at:  # the latency's level is the probe's: its time is the calibration's
        start = parse_utc(probe.started_at)
        span = utc_text(start), utc_text(start + datetime.timedelta(seconds=probe.wall_s))
        src["timed_at"] = f"measured: the probe ran {span[0]} .. {span[1]}"
        return replace(u, timed_rows_tokens=timed, sources=src, timed_at=span)
    src["timed_at"] = src.get("timed_at", "") + " (the probe records no start time: the runs' times stand for it)"
    return replace(u, timed_rows_tokens=timed, sources=src)
