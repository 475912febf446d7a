"""Run-to-run drift of a host: how much the same run's forwards slow down or speed up from one run to the next.

A calibration fits one latency per shape, but the host a plan runs on later is not the host of that minute:
identical runs minutes apart differ, and runs hours apart differ more. Measured as the pooled within-group SD of
ln(median verify ms) over groups of repeat runs (traces of one setup: mode, plan, prompts, tokens, seed, models,
dtypes, batch, host). The SD of a log is a relative SD.

Drift depends on the time between the calibration's timed forwards and the run, so it is measured per horizon:
  session  the run starts within SESSION_MINUTES of the calibration's timed forwards (calibrate-here, then run):
           repeat groups whose runs all lie within SESSION_MINUTES of each other;
  later    anything else, or a time not known (the default: a plan is usually used hours or days later): the
           groups spread wider, and the groups repeated in the same sessions share those sessions' shift, so each
           cluster of sessions counts once (clustered_drift). Measured up to ~128 h apart (beyond 12.4 h by three
           clusters only, across guests of a host kind); beyond that it is the same number, assumed.
A run timed chunk by chunk among the calibration's own runs (an interleaved grid, bench/trace_grid.py: horizon
INTERLEAVED) has no run-to-run drift between them at all (NO_DRIFT); only the runs' spread around the fit is left.
Where the calibration's own traces hold repeats of a horizon, calibrate pools them with the shipped drift of that
horizon; otherwise it uses SHIPPED_DRIFTS, measured the same way over the repeat runs shipped in traces/
(project_drift; bench/drift.py prints them). Each rests on few degrees of freedom, so a run's drift is predicted by
Student's t on them (Drift.predictive_sd), not by a normal with the estimate as its known SD.
"""

from __future__ import annotations

import datetime
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.special import ndtri, stdtrit

from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace
from ssd_sim.io.values import parse_utc, utc_text

LEVEL = 0.9  # the central level of every prediction interval (plan.intervals), at which the drift's t widening is set
SESSION_MINUTES = 60.0  # "within the hour": a round boundary, not fitted (the shipped repeats lie 7-64 or 115-154 min apart)
HORIZONS = ("session", "later")
INTERLEAVED = "interleaved"  # a run's horizon when it was timed among the calibration's runs (interleaved_with)


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

    def predictive_sd(self, level: float = LEVEL) -> float:
        """The relative SD of a normal whose central `level` interval is that of the next run's drift as predicted
        from this estimate: sd x t_dof, not sd x z, since sd itself is estimated on `dof` degrees of freedom (the
        predictive of a normal with an unknown variance is a scaled t). 1.18 x sd on 6 degrees of freedom at 90%."""
        if self.dof < 1:
            return self.sd
        q = (1 + level) / 2
        return self.sd * float(stdtrit(self.dof, q) / ndtri(q))


# bench/drift.py over traces/ on 2026-12-06 (23:10 UTC, split by horizon 23:00 UTC on 2026-12-03, the later pairs
# added): 45 setups run 2-4 times (117 traces, five 2-core CPU hosts). Within the hour (12 setups, runs 7-51 min apart):
# 4.5%, 90% interval 3.5-6.4%, every setup counted. Later (33 setups, 64 min to 128 h apart) the setups are not
# independent repeats: they come from 8 clusters of sessions (session_clusters), 12 of them from the Xeon pair alone
# (traces/cpu-fp32-xeon-idle repeating cpu-fp32-xeon 2.5 h later, 0.70-0.87x the verify ms), and the setups of one
# cluster share its sessions' shift. Counted once per cluster (clustered_drift, project_drift): 10.1% on 15 degrees of
# freedom (the clusters' sessions - 1), 90% interval 7.8-14.6%: the Xeon pair 19.1%, traces/cpu-fp32-pool40i repeating
# cpu-fp32-pool40 2.5 h later and two of its setups repeated 60 h later on another guest of the Zen 4 kind
# (traces/cpu-fp32-zen4-pool40r, 0.73x the verify ms of pool40i) and 1.8 h after that on the same guest
# (traces/cpu-fp32-zen4-pool40s, 1.00-1.01x pool40r's) 15.2%, traces/cpu-fp32-epyc-avx512/check's three runs repeated
# 128 h later on another guest of the Zen 5 kind (traces/cpu-fp32-zen5-check/check, 1.16-1.28x the verify ms) 13.5%, the
# fresh96 grid's T = 0 runs repeated three times on the same Xeon guest (traces/cpu-fp32-xeon-fresh96-later 2.7 h later,
# 1.15-1.26x the verify ms; traces/cpu-fp32-xeon-fresh96-third 3.7 h later, 0.98-0.99x;
# traces/cpu-fp32-xeon-fresh96-fourth 4.9 h later, 1.00-1.02x) 8.9%, the EPYC pool's three sessions (2.8 h and 12.4 h
# apart) 3.6%, cpu-fp32-bench -> cpu-fp32-grid 3.4%, the Xeon pool grid repeated 3.9 h later and (two of its setups) 35 h
# later on another guest, traces/cpu-fp32-xeon-pool32i-day2, 0.8%, the Zen 4 fresh96 grid's T = 0 runs and SSD T = 1
# run repeated 8.9 h later on the same guest (traces/cpu-fp32-zen4-fresh96-later, 1.05-1.08x the verify ms) and its
# T = 0 runs a third time 1.3 h after that (traces/cpu-fp32-zen4-fresh96-third, 1.01-1.03x the first session's) 3.4%.
# Two changes came with the Zen 5 repeat: a hold-out check's runs in a folder's check/ now count (shipped_trace_paths),
# named by their folder (session_of: both check/ folders were one session "check"), and a plan field at its empty
# default (saguaro_c_list: [], written since 2026-12-02) no longer splits a setup (setup_key), which joined two
# repeat pairs of traces/cpu-fp32-splits within the hour (before: 4.8% over 10 setups, 23 runs, 3.7-7.1%). Until
# 2026-12-05 the later drift counted every setup (13.7% on 26 degrees of freedom, 11.2-17.8%: narrower than the
# evidence; clustered, 9.4% on 6 before the day-2 runs, 8.7% on 7 before the fresh96 repeats, 9.2% on 8, 9.1% on 9 and
# 8.8% on 10 between them and the Zen 4 repeat across guests, 10.1% on 11 before its repeat on the same guest, 10.5% on
# 12 before the Zen 4 fresh96 repeat, 10.2% on 13 before its third session, 9.8% on 14 before the Zen 5 repeat). A run's
# drift is predicted from these estimates by Student's t on their degrees of freedom (Drift.predictive_sd).
SHIPPED_DRIFTS = {
    "session": Drift(0.045, 12, 27, "measured over the repeat runs in this project's traces/ less than an hour apart "
                                    "(bench/drift.py: 12 setups, 27 runs 7-51 min apart; 90% interval 3.5-6.4%)"),
    "later": Drift(0.1013, 8, 23, "measured over the repeat runs in this project's traces/ more than an hour apart, "
                                  "each cluster of sessions counted once (bench/drift.py: 33 setups, 64 min to 128 h "
                                  "apart, in 8 clusters of 23 sessions; 90% interval 7.8-14.6%; beyond 128 h assumed "
                                  "the same)"),
}


# The largest shift between runs of one setup on two guests of one host kind in traces/: every verify of
# traces/cpu-fp32-zen4-pool40r at 0.73x cpu-fp32-pool40i's, 60 h apart (the same guest 1.8 h later within 1%,
# traces/cpu-fp32-zen4-pool40s; two Xeon guests 35 h apart within 2%, traces/cpu-fp32-xeon-pool32i-day2; two Zen 5
# guests 128 h apart 1.16-1.28x, i.e. 0.78-0.86x, traces/cpu-fp32-zen5-check). Three observations: what a warning
# cites, not a spread the intervals can use.
GUEST_SHIFT = 0.27


NO_DRIFT = Drift(0.0, 0, 0, "none: the run was timed chunk by chunk among the calibration's runs (interleaved), so "
                            "no run-to-run drift lies between them")


def trace_paths(folders: Sequence[Path], subfolders: bool = True) -> list[Path]:
    """*.jsonl in each folder and (subfolders) in its subfolders: a hold-out check's runs, which repeat setups
    (traces/cpu-fp32-epyc-avx512/check, repeated on another guest in traces/cpu-fp32-zen5-check/check) but belong to
    no calibration (model.residual's calibrations are the folders' own traces: subfolders=False)."""
    return [p for f in folders for p in [*sorted(f.glob("*.jsonl")), *(sorted(f.glob("*/*.jsonl")) if subfolders else [])]]


def shipped_trace_paths(traces_root: Path, subfolders: bool = True) -> list[Path]:
    """The trace files SHIPPED_DRIFTS is measured over: trace_paths of every folder of traces_root but superseded/."""
    return trace_paths([f for f in sorted(traces_root.iterdir()) if f.is_dir() and f.name != "superseded"], subfolders)


def setup_key(trace: Trace) -> str:
    """What makes two traces repeats of one run: everything but the time it was made."""
    h = trace.header
    host = (h.host or {}).get("cpu_id")
    plan = {k: v for k, v in h.plan.items() if v not in (None, [])}  # a field at its empty default, written or not
    return json.dumps([h.mode, plan, h.prompt_source, h.num_prompts, h.max_new_tokens, h.seed, h.models, h.dtype,
                       h.quantize, h.devices, h.batch_size, h.forced_acceptance, host], sort_keys=True, default=str)


def median_verify_ms(trace: Trace) -> float | None:
    """The median target verify time of a trace's rounds (ms); None without timed verifies."""
    times = [r.timings_ms.get(Phase.VERIFY) for r in trace.rounds]
    times = [t for t in times if t]
    return statistics.median(times) if times else None


def median_draft_ms(trace: Trace) -> float | None:
    """The median of the draft's main step over a trace's rounds (ms): SD's sequential draft (draft_sd), SSD's branch
    decode (draft_branch); None for AR or without timed steps. What the draft's drift is read from (bench/drift.py)."""
    phase = {"sd": Phase.DRAFT_SD, "ssd": Phase.DRAFT_BRANCH}.get(trace.mode)
    times = [t for r in trace.rounds if (t := r.timings_ms.get(phase))] if phase else []
    return statistics.median(times) if times else None


def started(trace: Trace) -> datetime.datetime | None:
    """When the trace's run started (UTC), None when its header does not say."""
    return parse_utc(trace.header.started_at)


def _first_last(traces: Sequence[Trace]) -> tuple[datetime.datetime, datetime.datetime] | None:
    """The first and the last start of these traces; None when any start is not recorded."""
    stamps = [started(t) for t in traces]
    return None if not stamps or None in stamps else (min(stamps), max(stamps))


def span_minutes(traces: Sequence[Trace]) -> float | None:
    """Minutes between the first and the last start of these traces; None when any start is not recorded."""
    ends = _first_last(traces)
    return None if ends is None else (ends[1] - ends[0]).total_seconds() / 60


def timed_span(traces: Sequence[Trace]) -> tuple[str, str] | tuple[()]:
    """(first, last) start of these traces as ISO UTC strings; () when any start is not recorded."""
    ends = _first_last(traces)
    return () if ends is None else (utc_text(ends[0]), utc_text(ends[1]))


def minutes_from(span: Sequence[str], when: datetime.datetime | None) -> float | None:
    """The most minutes between `when` and either end of a timed span (what a latency fitted over the span can
    have drifted by at `when`); None when either is unknown."""
    if not span or when is None:
        return None
    return max(abs((when - parse_utc(e)).total_seconds()) for e in span) / 60


def horizon_of(minutes: float | None) -> str:
    """"session" for a time within SESSION_MINUTES, "later" beyond it or when the time is not known (None)."""
    return "session" if minutes is not None and minutes <= SESSION_MINUTES else "later"


def repeat_groups(traces: Sequence[Trace], horizon: str | None = None) -> list[list[Trace]]:
    """Traces grouped by setup_key, only groups of two or more (in the order first seen); with a horizon, only the
    groups whose runs' span (span_minutes) falls in it."""
    groups: dict[str, list[Trace]] = {}
    for t in traces:
        if median_verify_ms(t) is not None:
            groups.setdefault(setup_key(t), []).append(t)
    return [g for g in groups.values() if len(g) >= 2 and horizon in (None, horizon_of(span_minutes(g)))]


@dataclass(frozen=True)
class RepeatPair:
    """Two runs of one setup: minutes between their starts and ln of the later run's median verify over the earlier's."""

    minutes: float
    log_ratio: float
    sessions: tuple[str, str]  # the two runs' sessions (session_of), earlier first
    same_guest: bool | None = None  # one boot of one guest (the hosts' boot_id); None where either is not recorded


def guest_of(trace: Trace) -> str:
    """The boot id of the guest a trace ran on ('' when its host record does not say: traces before 2026-12-06)."""
    return str((trace.header.host or {}).get("boot_id", ""))


def repeat_pairs(groups: Sequence[Sequence[Trace]]) -> list[RepeatPair]:
    """Every pair of runs within each repeat group whose starts are both recorded, by the time between them: the
    horizon of one pair, not of its group's whole span (a setup run at 0 h, 2.7 h and 3.7 h holds a pair an hour
    apart). The pairs of one group are not independent; a diagnostic, not an estimate."""
    out = []
    for g in groups:
        runs = sorted((at, math.log(median_verify_ms(t)), session_of(t), guest_of(t))
                      for t in g if (at := started(t)) is not None)
        for i, (t0, ln0, s0, g0) in enumerate(runs):
            out.extend(RepeatPair((t1 - t0).total_seconds() / 60, ln1 - ln0, (s0, s1), g0 == g1 if g0 and g1 else None)
                       for t1, ln1, s1, g1 in runs[i + 1:])
    return out


def pooled_log_sd(groups: Sequence[Sequence[float]]) -> float:
    """sqrt(sum over groups of sum (ln x - mean_g ln x)^2 / (runs - groups)): the pooled SD of ln x within groups."""
    ss = sum(sum((math.log(x) - statistics.fmean(map(math.log, g))) ** 2 for x in g) for g in groups)
    dof = sum(len(g) for g in groups) - len(groups)
    if dof < 1:
        raise ValueError("need a group of at least two runs")
    return math.sqrt(ss / dof)


def measured_drift(traces: Sequence[Trace], horizon: str | None = None) -> Drift | None:
    """The drift of these traces' own repeat runs (of one horizon, or all); None when no such setup was run twice."""
    groups = repeat_groups(traces, horizon)
    if not groups:
        return None
    ms = [[median_verify_ms(t) for t in g] for g in groups]
    runs = sum(map(len, ms))
    return Drift(pooled_log_sd(ms), len(ms), runs,
                 f"measured over the calibration's repeat runs ({len(ms)} setups, {runs} runs)")


def session_of(trace: Trace) -> str:
    """The recording session a trace belongs to: the folder it was read from, named from below a `traces` folder where
    its path has one ("cpu-fp32-pool"; a subfolder "cpu-fp32-zen5-check/check", so two folders' check/ runs are two
    sessions), else by its own name; "?" when it has no path."""
    if not trace.path:
        return "?"
    parent = Path(trace.path).parent
    tops = [i for i, name in enumerate(parent.parts[:-1]) if name == "traces"]
    return "/".join(parent.parts[tops[-1] + 1:]) if tops else parent.name


def session_clusters(groups: Sequence[Sequence[Trace]]) -> dict[tuple[str, ...], list[Sequence[Trace]]]:
    """Repeat groups clustered by the sessions their runs span: {sorted sessions: the groups}, in the order first
    seen. Groups that share a session (session_of a run) fall in one cluster, transitively: a setup repeated in
    sessions a, b and another in a, b, c share a and b's shift, so the cluster spans a, b, c. The groups of one
    cluster are one observation of how far its sessions drift apart, not one each."""
    merged: list[tuple[set[str], list[Sequence[Trace]]]] = []
    for g in groups:
        sessions, members = {session_of(t) for t in g}, [g]
        for other in [m for m in merged if m[0] & sessions]:
            merged.remove(other)
            sessions |= other[0]
            members = other[1] + members
        merged.append((sessions, members))
    first = {id(g): i for i, g in enumerate(groups)}
    merged.sort(key=lambda m: min(first[id(g)] for g in m[1]))
    return {tuple(sorted(sessions)): sorted(members, key=lambda g: first[id(g)]) for sessions, members in merged}


def clustered_drift(groups: Sequence[Sequence[Trace]]) -> Drift | None:
    """The drift with each cluster of sessions (session_clusters) counted once: per cluster the pooled SD of its
    groups (pooled_log_sd), pooled over the clusters by their independent contrasts (sessions - 1 each), which are
    its degrees of freedom. None without a cluster of two or more sessions."""
    parts = [(len(sessions) - 1, pooled_log_sd([[median_verify_ms(t) for t in g] for g in c]))
             for sessions, c in session_clusters(groups).items() if len(sessions) >= 2]
    if not parts:
        return None
    dof = sum(w for w, _ in parts)
    sd = math.sqrt(sum(w * v ** 2 for w, v in parts) / dof)
    runs = sum(w + 1 for w, _ in parts)
    return Drift(sd, len(parts), runs, f"measured over {len(parts)} clusters of sessions ({runs} sessions), "
                                       "each counted once")


def project_drift(traces: Sequence[Trace], horizon: str) -> Drift | None:
    """The drift SHIPPED_DRIFTS holds, measured over these traces: within the hour, every repeat group counted
    (measured_drift: runs of one session, nothing shared between groups but the host); later, each cluster of
    sessions counted once (clustered_drift: the groups of one cluster share its sessions' shift). None without
    repeats of that horizon."""
    if horizon == "later":
        return clustered_drift(repeat_groups(traces, horizon))
    return measured_drift(traces, horizon)


def interleaved_with(trace: Trace, timed: Sequence[Trace]) -> bool:
    """True when `trace` was timed chunk by chunk among `timed` (all of them): runs of one interleaved grid
    (bench/trace_grid.py writes "interleave" > 1 into each run's header), recorded in one session (the same folder,
    session_of; a trace read from no file is in none) and started within SESSION_MINUTES of each other. Their forwards
    then share the same minutes, so no run-to-run drift lies between them (NO_DRIFT)."""
    def chunks(t: Trace) -> int:
        n = t.header.extra.get("interleave", 1)
        return n if isinstance(n, int) and not isinstance(n, bool) else 1

    n, here = chunks(trace), session_of(trace)
    return (n > 1 and bool(timed) and here != "?" and all(chunks(t) == n and session_of(t) == here for t in timed)
            and horizon_of(span_minutes([trace, *timed])) == "session")


def pooled(own: Drift | None, base: Drift, weight: float | None = None) -> Drift:
    """`own` pooled with `base` by degrees of freedom (own dominates once it has many): the variance-weighted SD a
    calibration uses when it measured some of a spread itself; `base` alone when it measured none. `weight`: the
    degrees of freedom `base` counts for (default its own; model.residual gives less)."""
    if own is None:
        return base
    w = base.dof if weight is None else weight
    var = (own.dof * own.sd ** 2 + w * base.sd ** 2) / (own.dof + w)
    return Drift(math.sqrt(var), own.groups + base.groups, own.runs + base.runs,
                 f"{own.source}: {own.sd:.1%}, pooled with the project's {base.sd:.1%} ({base.dof} degrees of "
                 f"freedom against {own.dof})")


def calibration_drift(traces: Sequence[Trace], horizon: str, shipped: Mapping[str, Drift] | None = None) -> Drift:
    """The drift a calibration's intervals use at a horizon: its own repeats of that horizon pooled with the project's
    (`shipped`, default SHIPPED_DRIFTS) by degrees of freedom (pooled), else the project's alone."""
    if horizon not in HORIZONS:
        raise ValueError(f"horizon must be one of {HORIZONS}, got {horizon!r}")
    return pooled(measured_drift(traces, horizon), (shipped or SHIPPED_DRIFTS)[horizon])
