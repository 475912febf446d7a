"""The runs' spread around a calibration's latency fit: how far one run's median verify time sits from the fitted
target curve at that run's own shapes (relative). A calibration fits one latency per (rows, tokens); a run on other
prompts, at another K or batch size, lands above or below it by this much even within the same session. The drift of
the plan's horizon (model.drift) is added to it in quadrature.

Measured per calibration as the SD over its AR / SD runs (at least MIN_ROUNDS timed verifies each) of each run's
median relative verify residual (SSD runs are left out: their verifies overlap the draft's work, which the
interference fit absorbs). Over the calibrations shipped in traces/ (one per folder, host and target setup:
calibration_groups) two numbers are measured (ProjectResidual; bench/drift.py prints them, tests/bench/test_fidelity.py
checks SHIPPED_RESIDUAL):
  spread   the SD pooled over the calibrations by degrees of freedom (the RMS spread of a run of some calibration):
           a calibration with fewer than MIN_RUNS AR / SD runs measures none and uses it;
  weight   what the project's spread is worth, in degrees of freedom, against a calibration's own: the prior degrees
           of freedom of an empirical-Bayes moderated variance (Smyth 2004, limma's fitFDist: the method of moments
           on the calibrations' log variances). Calibrations that share one spread give a weight of all their degrees
           of freedom; calibrations whose spreads differ a small one, so a calibration's own spread counts for most.
A calibration that measured its own pools it with the project's at that weight (moderated).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from scipy.optimize import brentq
from scipy.special import digamma, polygamma

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace
from ssd_sim.model.drift import Drift, pooled
from ssd_sim.model.latency import ForwardLatency

MIN_RUNS = 3  # AR / SD runs a calibration needs to measure its own spread (an SD with 2 degrees of freedom)
MIN_ROUNDS = 10  # timed verifies a run needs for its median residual to count


@dataclass(frozen=True)
class ProjectResidual:
    """The project's spread of runs around a latency fit (relative SD) and its weight against a calibration's own."""

    spread: Drift  # pooled over the project's calibrations (groups = calibrations, runs = AR / SD runs)
    weight: float  # degrees of freedom the spread counts for when pooled with a calibration's own (prior_dof)


# bench/drift.py over traces/ on 2026-12-05 (22:56 UTC): the 14 shipped calibrations with 3 or more AR / SD runs (AMD
# and Intel 2-core CPU hosts; four folders record no host), 82 runs. Pooled 4.7% (90% interval 4.1-5.5% were they one
# spread), but one calibration alone measured 0.3% (cpu-fp32-epyc-fresh96: 4 runs, interleaved) to 10.0%
# (cpu-fp32-halves, whose host drifted 12% within 30 minutes): they differ (Bartlett p = 4e-16), and the prior degrees
# of freedom come out 1.09, so a calibration's own spread counts for most of its moderated one. Cross-check (with the
# 10 calibrations before cpu-fp32-epyc-pool96t: 5.2%, 1.2 degrees of freedom): that prior's predictive 90% half-width
# for a calibration that measured nothing (t with 1.2 degrees of freedom) is 8.0%, a normal one's with 5.2% 8.6%. It
# replaced an assumed 8% where a calibration has fewer than 3 AR / SD runs (the interleaved pool grids with AR and SD
# K = 2 only; cpu-fp32-epyc-pool96t and the three fresh96 grids have both at two temperatures, 4 runs each). Before
# cpu-fp32-zen4-fresh96: 4.8% over 13 calibrations and 78 runs, weight 1.11; before cpu-fp32-xeon-fresh96 (0.7%): 4.9%
# over 12 and 74, weight 1.10; before cpu-fp32-epyc-fresh96: 5.1% over 11 and 70, weight 1.25.
SHIPPED_RESIDUAL = ProjectResidual(
    Drift(0.047, 14, 82, "measured over the AR / SD runs of this project's calibrations in traces/ (bench/drift.py: "
                         "14 calibrations, 82 runs; they differ, 0.3-10.0% each)"),
    1.09)


def run_residuals(traces: Sequence[Trace], target: ForwardLatency) -> list[float]:
    """Each AR / SD run's median relative verify residual around `target` (verify ms / fitted ms - 1), for the runs
    with at least MIN_ROUNDS timed verifies; SSD runs are skipped."""
    med = []
    for t in traces:
        if t.mode == "ssd":
            continue
        rel = [r.timings_ms[Phase.VERIFY] / float(target(r.batch, (0 if t.mode == "ar" else r.K) + 1)) - 1.0
               for r in t.rounds if r.timings_ms.get(Phase.VERIFY, 0) > 0]
        if len(rel) >= MIN_ROUNDS:
            med.append(float(np.median(rel)))
    return med


def measured_residual(traces: Sequence[Trace], target: ForwardLatency) -> Drift | None:
    """The spread of one calibration's runs around its fit (SD, one group); None with fewer than MIN_RUNS runs."""
    med = run_residuals(traces, target)
    if len(med) < MIN_RUNS:
        return None
    return Drift(float(np.std(med, ddof=1)), 1, len(med),
                 f"measured over the calibration's {len(med)} AR / SD runs (SD of each run's median verify residual "
                 "around the fit)")


def pooled_residual(parts: Sequence[Drift], source: str) -> Drift | None:
    """Several calibrations' spreads pooled by degrees of freedom (sum dof x SD^2 / sum dof); None without any."""
    dof = sum(p.dof for p in parts)
    if not parts or dof < 1:
        return None
    sd = math.sqrt(sum(p.dof * p.sd ** 2 for p in parts) / dof)
    return Drift(sd, sum(p.groups for p in parts), sum(p.runs for p in parts), source)


def prior_dof(parts: Sequence[Drift]) -> float:
    """The prior degrees of freedom of the calibrations' variances (limma's fitFDist, method of moments): the excess
    variance of their log variances over what sampling alone gives, matched to trigamma(d0 / 2). No excess (they
    share one spread): all their degrees of freedom. Needs 3 calibrations or more."""
    parts = [p for p in parts if p.sd > 0]  # a spread of exactly 0 (identical runs) has no log
    if len(parts) < 3:
        raise ValueError("need 3 calibrations or more with a spread above 0 to measure how much their spreads differ")
    dof = np.array([p.dof for p in parts], dtype=float)
    e = np.log([p.sd ** 2 for p in parts]) - digamma(dof / 2) + np.log(dof / 2)
    excess = float(np.var(e, ddof=1) - np.mean(polygamma(1, dof / 2)))
    if excess <= 1e-6:  # trigamma(x) ~ 1 / x: beyond a million degrees of freedom they share one spread
        return float(dof.sum())
    return min(float(dof.sum()), 2 * brentq(lambda x: float(polygamma(1, x)) - excess, 1e-8, 1e8))


def moderated(own: Drift | None, project: ProjectResidual) -> Drift:
    """A calibration's own spread pooled with the project's at its weight in degrees of freedom; the project's alone
    when the calibration measured none."""
    if own is None:
        return project.spread
    return replace(pooled(own, project.spread, project.weight),
                   source=f"{own.source}: {own.sd:.1%}, pooled with the project's {project.spread.sd:.1%} counted as "
                          f"{project.weight:.1f} degrees of freedom against {own.dof} (the project's calibrations "
                          "differ: model.residual)")


def calibration_key(path: Path, trace: Trace) -> str:
    """What makes traces one calibration of the project's: their folder, host and target setup (an AR run has no
    draft, so the draft side does not split them)."""
    h = trace.header

    def target(v):
        return v.get("target") if isinstance(v, dict) else v

    return json.dumps([str(path.parent), (h.host or {}).get("cpu_id"), target(h.models), target(h.dtype),
                       target(h.quantize), target(h.devices)], sort_keys=True, default=str)


def calibration_groups(paths: Sequence[Path], traces: Sequence[Trace]) -> list[list[Trace]]:
    """The traces grouped into calibrations (calibration_key), in the order first seen."""
    groups: dict[str, list[Trace]] = {}
    for p, t in zip(paths, traces, strict=True):
        groups.setdefault(calibration_key(p, t), []).append(t)
    return list(groups.values())


def calibration_residuals(calibrations: Sequence[Sequence[Trace]], fit: Callable[[Sequence[Trace]], ForwardLatency]
                          ) -> list[tuple[Sequence[Trace], ForwardLatency, Drift]]:
    """(traces, target fit, spread) of each calibration that measures one (MIN_RUNS AR / SD runs or more); `fit`
    gives a calibration's target latency (model.calibrate.fit_target); one whose traces it refuses is skipped."""
    out = []
    for ts in calibrations:
        if sum(t.mode != "ssd" for t in ts) < MIN_RUNS:
            continue
        try:
            target = fit(ts)
        except ConfigError:  # traces calibrate refuses (e.g. AR runs alone: no draft to fit) measure nothing
            continue
        if d := measured_residual(ts, target):
            out.append((ts, target, d))
    return out


def project_residual(calibrations: Sequence[Sequence[Trace]], fit: Callable[[Sequence[Trace]], ForwardLatency],
                     source: str) -> ProjectResidual | None:
    """The spread pooled over the calibrations that measure one (calibration_residuals) and its weight (prior_dof);
    None when fewer than 3 measure one above 0."""
    parts = [d for _, _, d in calibration_residuals(calibrations, fit)]
    if sum(p.sd > 0 for p in parts) < 3:
        return None
    return ProjectResidual(pooled_residual(parts, source), prior_dof(parts))
