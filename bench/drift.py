"""Run-to-run drift of the hosts the shipped traces come from, and the runs' spread around each calibration's latency
fit: two tables, the numbers model.drift.SHIPPED_DRIFTS and model.residual.SHIPPED_RESIDUAL cite.

    .venv/bin/python bench/drift.py [FOLDER ...]      # default: every folder under traces/ but superseded/

Repeat runs are traces of one setup (model.drift.setup_key: mode, plan, prompts, tokens, seed, models, dtypes, batch,
host); per group the median verify ms of each run, the minutes between the first and the last, and the group's SD
of ln ms; then the pooled SD over every group with its 90% interval (chi-square on runs - groups degrees of freedom),
the same per horizon (groups within model.drift.SESSION_MINUTES: "session"; the others: "later") and per kind of run,
then the later repeats by the sessions they span (model.drift.session_clusters: setups repeated in the same sessions
share their shift) and the later drift with each cluster counted once (model.drift.clustered_drift): the one
model.drift.SHIPPED_DRIFTS holds (model.drift.project_drift); the F-tests above count every setup. Beside each cluster,
how far the draft's main step (model.drift.median_draft_ms) drifted apart from the verify in the same SD / SSD runs:
the drift is measured on the verify and applied to both models.
Then per calibration (model.residual.calibration_groups: folder, host, target setup) with 3 or more AR / SD runs, the SD
of the runs' median verify residual around the calibration's own target fit, pooled the same way, Bartlett's test of
whether they share one spread, and the prior degrees of freedom of their variances (model.residual.prior_dof).
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table
from scipy.stats import bartlett, chi2
from scipy.stats import f as f_dist

from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import fit_target
from ssd_sim.model.drift import (
    HORIZONS,
    clustered_drift,
    horizon_of,
    median_draft_ms,
    median_verify_ms,
    pooled_log_sd,
    repeat_groups,
    repeat_pairs,
    session_clusters,
    shipped_trace_paths,
    span_minutes,
    trace_paths,
)
from ssd_sim.model.residual import (
    calibration_groups,
    calibration_residuals,
    pooled_residual,
    prior_dof,
    run_residuals,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", help="trace folders (default: traces/* but superseded)")
    folders = ap.parse_args().folders
    root = Path(__file__).resolve().parent.parent / "traces"
    every = trace_paths([Path(f) for f in folders]) if folders else shipped_trace_paths(root)
    own = set(trace_paths([Path(f) for f in folders], subfolders=False) if folders
              else shipped_trace_paths(root, subfolders=False))  # each folder's calibration: not its check/ runs
    traces = {p: read_trace(p) for p in every}
    print_drift(list(traces.values()), folders or sorted({p.parent for p in every}))
    print_residuals([p for p in every if p in own], [t for p, t in traces.items() if p in own])


def print_drift(traces, folders) -> None:
    """The repeat groups' table, the pooled drift and its comparisons per horizon and per kind of run."""
    groups = repeat_groups(traces)
    table = Table(title=f"repeat runs in {len(folders)} folders ({len(traces)} traces)")
    for col in ("mode", "runs", "minutes apart", "horizon", "verify ms (median per run)", "SD of ln"):
        table.add_column(col, justify="right")
    ms = []
    for g in groups:
        ms.append([median_verify_ms(t) for t in g])
        logs = [math.log(x) for x in ms[-1]]
        minutes = span_minutes(g)
        table.add_row(g[0].mode, str(len(g)), "?" if minutes is None else f"{minutes:.1f}", horizon_of(minutes),
                      ", ".join(f"{x:.0f}" for x in ms[-1]), f"{statistics.pstdev(logs):.3f}")
    Console(width=120).print(table)
    if not ms:
        print("no setup was run twice")
        return
    print_pooled("pooled drift", ms)
    by_horizon = {h: [m for g, m in zip(groups, ms, strict=True) if horizon_of(span_minutes(g)) == h] for h in HORIZONS}
    compare(by_horizon, "one drift for every horizon")
    compare({"AR": [m for g, m in zip(groups, ms, strict=True) if g[0].mode == "ar"],
             "SD / SSD": [m for g, m in zip(groups, ms, strict=True) if g[0].mode != "ar"]}, "one pooled drift")
    print_clusters([g for g in groups if horizon_of(span_minutes(g)) == "later"])
    print_pairs(groups)


def print_clusters(later) -> None:
    """The later repeats by cluster of sessions (model.drift.session_clusters): groups repeated in the same sessions
    share those sessions' shift, so the F-tests above, which count every setup, overstate what they rest on. Per
    cluster its setups' SD, AR's and SD / SSD's apart; then the drift with each cluster counted once."""
    table = Table(title="later repeats by the sessions they span (setups of one cluster share its shift)")
    for col in ("sessions", "setups", "SD of ln (all)", "AR", "SD / SSD", "draft - verify"):
        table.add_column(col, justify="right")
    for sessions, c in session_clusters(later).items():
        table.add_row(" -> ".join(sessions), str(len(c)), _sd(c), _sd([g for g in c if g[0].mode == "ar"]),
                      _sd([g for g in c if g[0].mode != "ar"]), _apart(draft_against_verify(c)))
    Console(width=150).print(table)
    pairs = draft_against_verify(later)
    v, d = zip(*pairs, strict=True) if pairs else ((), ())
    if len(pairs) > 2 and _rms(v) > 0 and _rms(d) > 0:  # a correlation needs both to vary
        print(f"the draft's drift against the verify's in the same SD / SSD runs ({len(pairs)} runs, each as ln ms about "
              f"its setup's mean): correlation {statistics.correlation(v, d):.2f}, RMS verify {_rms(v):.1%}, draft "
              f"{_rms(d):.1%}, draft - verify {_apart(pairs)}")
    d = clustered_drift(later)
    if d is not None:
        lo, hi = interval90(d.sd, d.dof)
        print(f"later drift with each cluster of sessions counted once (model.drift.SHIPPED_DRIFTS): SD {d.sd:.1%} "
              f"over {d.groups} clusters, {d.runs} sessions, {d.dof} degrees of freedom; 90% interval {lo:.1%}-{hi:.1%}; "
              f"the next run's, by Student's t on them: {d.predictive_sd():.1%} (Drift.predictive_sd)")


PAIR_GAPS = ((60, "within the hour"), (180, "1-3 h"), (720, "3-12 h"), (math.inf, "12 h or more"))  # upper end, minutes


def print_pairs(groups) -> None:
    """Every pair of repeat runs by the time between its own two starts (model.drift.repeat_pairs), not its group's
    span: how far runs an hour apart moved when their setup was also run hours before. Per band the pairs, the
    session pairs they come from, how many ran on one guest or two (the hosts' boot_id; ? = not recorded, traces
    before 2026-12-06), the per-run SD those pairs imply (RMS ln ratio / sqrt 2) and the largest shift. The
    pairs of one group or session pair share their shifts: a diagnostic, not the estimate SHIPPED_DRIFTS holds."""
    pairs = repeat_pairs(groups)
    table = Table(title="repeat pairs by the time between their own starts (not independent)")
    for col in ("apart", "pairs", "session pairs", "cross-session pairs", "one / two guests / ?", "SD per run",
                "largest shift"):
        table.add_column(col, justify="right")
    bands: dict[str, list] = {}
    for p in pairs:  # each pair in the first band whose upper end it does not pass
        bands.setdefault(next(label for hi, label in PAIR_GAPS if p.minutes <= hi), []).append(p)
    for _, label in PAIR_GAPS:
        if not (band := bands.get(label)):
            continue
        rms = math.sqrt(statistics.fmean(p.log_ratio ** 2 for p in band) / 2)
        cross = sum(p.sessions[0] != p.sessions[1] for p in band)
        worst = max(band, key=lambda p: abs(p.log_ratio))
        guests = "{} / {} / {}".format(*(sum(p.same_guest is v for p in band) for v in (True, False, None)))
        table.add_row(label, str(len(band)), str(len({p.sessions for p in band})), str(cross), guests, f"{rms:.1%}",
                      f"{math.exp(worst.log_ratio) - 1:+.1%} ({worst.minutes:.0f} min: {' -> '.join(worst.sessions)})")
    Console(width=160).print(table)


def draft_against_verify(groups) -> list[tuple[float, float]]:
    """(verify, draft) per SD / SSD run of these repeat groups: each run's ln median ms (model.drift.median_verify_ms,
    median_draft_ms) less its group's mean, so the two models' drift in the same runs can be compared."""
    out = []
    for g in groups:
        ms = [(median_verify_ms(t), median_draft_ms(t)) for t in g]
        if g[0].mode == "ar" or not all(v and d for v, d in ms):
            continue
        lv, ld = [math.log(v) for v, _ in ms], [math.log(d) for _, d in ms]
        out.extend((a - statistics.fmean(lv), b - statistics.fmean(ld)) for a, b in zip(lv, ld, strict=True))
    return out


def _rms(xs) -> float:
    """Root mean square (0 for none)."""
    return math.sqrt(statistics.fmean(x * x for x in xs)) if xs else 0.0


def _apart(pairs) -> str:
    """'RMS of draft - verify (runs)', or '-' for none."""
    return f"{_rms([d - v for v, d in pairs]):.1%} ({len(pairs)})" if pairs else "-"


def _sd(groups) -> str:
    """'SD (setups)' of these repeat groups' ln verify ms, or '-' for none."""
    if not groups:
        return "-"
    return f"{pooled_log_sd([[median_verify_ms(t) for t in g] for g in groups]):.1%} ({len(groups)})"


def print_residuals(paths: list[Path], traces) -> None:
    """Per calibration with MIN_RUNS AR / SD runs or more: the SD of their median verify residual around its target
    fit; then pooled, with its 90% chi-square interval (what SHIPPED_RESIDUAL cites)."""
    table = Table(title="the runs' spread around each calibration's latency fit")
    for col in ("folder", "host", "traces", "AR / SD runs", "median residuals", "SD"):
        table.add_column(col, justify="right")
    parts, samples = [], []
    for ts, target, d in calibration_residuals(calibration_groups(paths, traces), fit_target):
        parts.append(d)
        meds = run_residuals(ts, target)
        samples.append(meds)
        table.add_row(Path(ts[0].path).parent.name, ((ts[0].header.host or {}).get("cpu_id") or "?")[:12],
                      str(len(ts)), str(d.runs), ", ".join(f"{m:+.1%}" for m in meds), f"{d.sd:.1%}")
    Console(width=140).print(table)
    total = pooled_residual(parts, "")
    if total is None or len(parts) < 3:
        print("fewer than 3 calibrations have enough AR / SD runs (model.residual.MIN_RUNS)")
        return
    lo, hi = interval90(total.sd, total.dof)
    print(f"pooled spread around the fit SD {total.sd:.1%} over {total.groups} calibrations, {total.runs} runs, "
          f"{total.dof} degrees of freedom; 90% interval {lo:.1%}-{hi:.1%} were they one spread")
    p = bartlett(*samples).pvalue
    d0 = prior_dof(parts)
    print(f"do they share one spread? Bartlett p = {p:.2g}; prior degrees of freedom (limma fitFDist) {d0:.2f}: the "
          f"weight of the project's spread against a calibration's own")


def interval90(sd: float, dof: int) -> tuple[float, float]:
    """The 90% chi-square interval of an SD measured with `dof` degrees of freedom."""
    return sd * math.sqrt(dof / chi2.ppf(0.95, dof)), sd * math.sqrt(dof / chi2.ppf(0.05, dof))


def print_pooled(label: str, ms) -> None:
    """The pooled SD of these groups' ln ms with its 90% chi-square interval, and what it rests on."""
    dof = sum(map(len, ms)) - len(ms)
    sd = pooled_log_sd(ms)
    lo, hi = interval90(sd, dof)
    print(f"{label} SD {sd:.1%} over {len(ms)} setups, {sum(map(len, ms))} runs, {dof} degrees of freedom; "
          f"90% interval {lo:.1%}-{hi:.1%}")


def compare(parts: dict[str, list], same: str) -> None:
    """Two parts' pooled drifts and the F-test of their variances: whether the difference is measured or noise
    (`same`: what a p above 0.05 leaves)."""
    for name, part in parts.items():
        if sum(map(len, part)) - len(part) < 1:
            print(f"{name}: no repeats")
            return
        print_pooled(f"{name}: drift", part)
    (na, a), (nb, b) = parts.items()
    (sa, da), (sb, db) = [(pooled_log_sd(x), sum(map(len, x)) - len(x)) for x in (a, b)]
    ratio = (sb / sa) ** 2
    p = 2 * min(f_dist.sf(ratio, db, da), f_dist.cdf(ratio, db, da))
    print(f"F-test, {nb} against {na}: ratio of variances {ratio:.2f}, two-sided p = {p:.2g}"
          + (f" (not distinguishable: {same})" if p > 0.05 else ""))


if __name__ == "__main__":
    main()
