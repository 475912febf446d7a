"""Run-to-run drift of a host: how much the same run's forwards slow down or speed up from one run to the next.

A calibration fits one latency per shape, but the host a plan runs on later is not the host of that minute:
identical runs minutes apart differ. Measured as the pooled within-group SD of ln(median verify ms) over groups of
repeat runs (traces of one setup: mode, plan, prompts, tokens, seed, models, dtypes, batch, host). The SD of a log is
a relative SD. Where the calibration's own traces hold repeats, calibrate measures it from them; otherwise it uses
SHIPPED_DRIFT, measured the same way over the repeat runs shipped in traces/ (bench/drift.py prints them).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace


@dataclass(frozen=True)
class Drift:
    """Pooled relative SD of repeat runs' median verify time, with what it rests on."""

    sd: float  # relative (SD of ln ms)
    groups: int  # setups run more than once
    runs: int  # traces in those groups
    source: str  # one line: where it was measured

    @property
    def dof(self) -> int:
        return self.runs - self.groups


# bench/drift.py over traces/ on 2026-12-03, 20:30 UTC: 26 setups run 2-3 times (55 traces, 7-154 minutes apart, four
# 2-core CPU hosts). Pooled SD 13.2%, 90% interval 10.9-16.9% (chi-square, 29 degrees of freedom). It was 6.3% over the
# 14 setups before traces/cpu-fp32-xeon-idle repeated twelve of traces/cpu-fp32-xeon's runs 2.5 h later on a host of
# the same kind (the same CPU id): verifies ran 0.79x (AR) and 0.70-0.87x (SD, SSD) of the earlier ones. The 14
# setups before that included cpu-fp32-pool40's AR, SD and SSD runs repeated 115-141 minutes later by cpu-fp32-pool40i
# (6% and 16-19% slower). Drift over hours dominates: the 11 setups within 64 minutes gave 4.7%.
SHIPPED_DRIFT = Drift(0.132, 26, 55, "measured over the repeat runs in this project's traces/ (bench/drift.py: 26 "
                                     "setups, 55 runs 7-154 min apart, four CPU hosts; 90% interval 10.9-16.9%)")


def setup_key(trace: Trace) -> str:
    """What makes two traces repeats of one run: everything but the time it was made."""
    h = trace.header
    host = (h.host or {}).get("cpu_id")
    return json.dumps([h.mode, h.plan, h.prompt_source, h.num_prompts, h.max_new_tokens, h.seed, h.models, h.dtype,
                       h.quantize, h.devices, h.batch_size, h.forced_acceptance, host], sort_keys=True, default=str)


def median_verify_ms(trace: Trace) -> float | None:
    """The median target verify time of a trace's rounds (ms); None without timed verifies."""
    times = [r.timings_ms.get(Phase.VERIFY) for r in trace.rounds]
    times = [t for t in times if t]
    return statistics.median(times) if times else None


def repeat_groups(traces: Sequence[Trace]) -> list[list[Trace]]:
    """Traces grouped by setup_key, only groups of two or more (in the order first seen)."""
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        if median_verify_ms(t) is not None:
            groups.setdefault(setup_key(t), []).append(t)
    return [g for g in groups.values() if len(g) >= 2]


def pooled_log_sd(groups: Sequence[Sequence[float]]) -> float:
    """sqrt(sum over groups of sum (ln x - mean_g ln x)^2 / (runs - groups)): the pooled SD of ln x within groups."""
    ss = sum(sum((math.log(x) - statistics.fmean(map(math.log, g))) ** 2 for x in g) for g in groups)
    dof = sum(len(g) for g in groups) - len(groups)
    if dof < 1:
        raise ValueError("need a group of at least two runs")
    return math.sqrt(ss / dof)


def measured_drift(traces: Sequence[Trace]) -> Drift | None:
    """The drift of these traces' own repeat runs; None when no setup was run twice."""
    groups = repeat_groups(traces)
    if not groups:
        return None
    ms = [[median_verify_ms(t) for t in g] for g in groups]
    runs = sum(map(len, ms))
    return Drift(pooled_log_sd(ms), len(ms), runs,
                 f"measured over the calibration's repeat runs ({len(ms)} setups, {runs} runs)")


def session_drift(traces: Sequence[Trace]) -> Drift:
    """The drift a calibration's intervals use: its own repeats pooled with SHIPPED_DRIFT by degrees of freedom
    (its own dominate once it has many), else SHIPPED_DRIFT alone."""
    own = measured_drift(traces)
    if own is None:
        return SHIPPED_DRIFT
    base = SHIPPED_DRIFT
    var = (own.dof * own.sd ** 2 + base.dof * base.sd ** 2) / (own.dof + base.dof)
    return Drift(math.sqrt(var), own.groups + base.groups, own.runs + base.runs,
                 f"{own.source}: {own.sd:.1%}, pooled with the project's {base.sd:.1%} ({base.dof} degrees of "
                 f"freedom against {own.dof})")
