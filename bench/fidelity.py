"""Fidelity of the simulator on hold-out splits: calibrate on some real traces, predict other runs, compare.

    .venv/bin/python bench/fidelity.py                        # every split, one table each
    .venv/bin/python bench/fidelity.py --split prompts        # one split (repeatable)
    .venv/bin/python bench/fidelity.py --json                 # {"splits": [{"name", "runs", "median_abs_err_pct", ...}]}
    .venv/bin/python bench/fidelity.py --jobs 2               # two splits at a time (default: one per CPU, at most 8)

A split names the traces that calibrate a profile (`ssd-plan calibrate`, model.calibrate; optionally only some of
them for acceptance and hit rates, "acceptance_from") and the runs it must predict; the two lists are disjoint, and each split says what the two sides still share (prompts, temperature,
C, batch size, modes). Splits live in the manifests (schema ssd-traces-manifest/1, traces/README.md):
traces/cpu-fp32-splits/manifest.json "splits" (traces with logged distributions, ssd-run --log-topn) and the
older configuration hold-out of traces/cpu-fp32-grid ("calibrate" / "holdout", split "config").

A run is predicted by the discrete-event simulator with the calibrated profile, the run's own plan and mode,
and its workload replayed exactly: the runtime's static batches of plan.batch_size and each sequence's decode
tokens (prefill excluded on both sides). Outcomes are drawn from the calibrated acceptance model, never replayed
from the predicted trace (the prediction, its interval, its errors, the random halves, the floors and the decisions
by regret are ssd_sim.sim.holdout's, which `ssd-plan holdout` runs on a user's own traces). Goal (issue 10), on each split marked "goal": median |tok/s error| <= 5%, worst <= 10%.
A split must hold out text, not only files: a predicted run that shares more than 5% of its text with the
calibration (ssd_sim.io.overlap: logged contexts, else prompts at T = 0 or the same seed) makes the split a leak,
which is refused (skipped with a line on stderr when every split runs); --allow-leaks reports it marked, without a goal.
Each run also gets a 90% prediction interval (plan.intervals over the calibrated profile's uncertainty, for a run of
its number of sequences, at the run's horizon: "session" when it started within an hour of both ends of the span the
profile's latencies were timed over, else "later", model.drift; "interleaved" when the run was timed chunk by chunk
among the calibration's own runs, with no probe: the halves of an interleaved grid, model.drift.interleaved_with, whose
intervals carry no run-to-run drift, NO_DRIFT, only the runs' spread around the fit); the drift in it is the
project's measured again without the split's predicted runs (held_out_drifts: a predicted run repeated from its
calibration would otherwise set the drift its own interval uses), and so is the runs' spread around a latency fit
(held_out_residual, model.residual); a split reports the share of its runs inside theirs (issue 26's goal: 85-95%
over all splits) and the mean interval width. A split may name a probe of its host ("probe": ssd-run probe's file):
its latencies then come from the probe's measured tables (model.probed); --no-probe calibrates them from the traces'
rounds instead.
Decisions are judged by regret: among a split's predicted runs of one workload (same prompts, T, b), the run the
prediction ranks first against the run that measured fastest; a choice is good within 5% of the best.

Random halves of a prompt pool ("halves" splits, traces/cpu-fp32-pool): every run decoded the whole pool at b = 1,
one request after another, so a run cut to some of its requests (Trace.only_requests) is that configuration on those
prompts, timed in the same minutes. Each draw splits the pool's requests at random into halves A and B (numpy
default_rng([seed, draw])), calibrates on the A requests of the split's "calibrate" runs and predicts the B requests of
its "predict" runs; the draws' runs are pooled (each run is predicted once per draw, on its own B half). What such a
split shares and does not: no text (A and B are different prompts; the overlap check runs per draw), the same host
and session (drift between calibration and prediction is at most the length of one run; bench/drift.py sizes it; none
in an interleaved grid, whose runs were timed chunk by chunk in the same minutes: horizon "interleaved").
A halves split whose calibration ran another pool (of any size) says so ("halves": {"across_pools": true}):
half A of that pool calibrates the prediction of the predicted pool's half B (another workload; pool_requests).
Where the manifest gives the pool's request classes ("request_tags" in its setup: {class: [first seq, last seq]}, for
runs recorded before ssd-run wrote them into the trace header), each draw's calibration is weighted to half B's class
shares (model.mix: `ssd-plan calibrate --mix`): the prediction knows how many code and chat requests B holds, not their
text, as a user knows what traffic they serve. --no-mix calibrates on half A as it is. Besides the floor, a halves
split reports the class floor: half A's measured ms per token of each class charged for B's tokens of that class, the
best a prediction that knows B's classes can do without seeing B.

Across hosts ("workload_from" splits): the split's "calibrate" runs (and probe) give the latencies of the host the
predicted runs ran on; the "workload_from" runs, of another host or session, give acceptance and hit rates, composed
as `ssd-plan --profile P --acceptance-from W` composes them (model.workload_profile.with_acceptance). The predicted
runs may be cut to some prompts ("predict_prompts": canonical labels such as "code:3"); every calibration and workload
run is cut to the prompts no predicted run used, and the workload is weighted to the predicted requests' classes
(their prompt sets: code, chat), which a user knows of their traffic. A halves split may name "workload_from" runs of
the same pool on another host: per draw, their half A gives acceptance and hits, the calibration's own half A and
probe the latencies, and half B of the predicted runs is predicted.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import site
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from ssd_sim.io.overlap import LEAK_SHARE, prompt_ids, prompt_labels
from ssd_sim.io.probe import load_probe
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.calibrate import calibrate_traces, fit_target
from ssd_sim.model.drift import (
    HORIZONS,
    INTERLEAVED,
    NO_DRIFT,
    SHIPPED_DRIFTS,
    Drift,
    interleaved_with,
    project_drift,
    shipped_trace_paths,
)
from ssd_sim.model.mix import RequestMix
from ssd_sim.model.residual import SHIPPED_RESIDUAL, ProjectResidual, calibration_groups, project_residual
from ssd_sim.model.workload_profile import profile_acceptance, with_acceptance
from ssd_sim.sim import holdout
from ssd_sim.sim.holdout import (
    REGRET_OK,
    choices,
    floor_err,
    halves,
    mixed_floor_err,
    per_run,
    predict_runs,
    recommender,
)

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = tuple(ROOT / "traces" / d / "manifest.json" for d in (
    "cpu-fp32-splits", "cpu-fp32-grid", "cpu-fp32-halves", "cpu-fp32-pool", "cpu-fp32-pool40", "cpu-fp32-pool40i",
    "cpu-fp32-pool64i", "cpu-fp32-epyc-avx512", "cpu-fp32-xeon", "cpu-fp32-xeon-idle", "cpu-fp32-xeon-pool32i",
    "cpu-fp32-xeon-pool32i-later", "cpu-fp32-epyc-pool96i", "cpu-fp32-epyc-pool96i-later",
    "cpu-fp32-epyc-pool96t", "cpu-fp32-epyc-fresh96", "cpu-fp32-xeon-fresh96", "cpu-fp32-xeon-fresh96-later",
    "cpu-fp32-xeon-fresh96-third", "cpu-fp32-xeon-fresh96-fourth", "cpu-fp32-xeon-pool32i-day2",
    "cpu-fp32-zen4-fresh96", "cpu-fp32-zen4-pool40r", "cpu-fp32-zen4-pool40s", "cpu-fp32-zen4-fresh96-later",
    "cpu-fp32-zen4-fresh96-third", "cpu-fp32-zen4-mixed192", "cpu-fp32-zen4-mixed192-t0", "cpu-fp32-zen5-check",
    "cpu-fp32-zen5-mixed192"))
DRAWS = 10  # random halves per "halves" split unless the manifest or --draws says otherwise
GOAL_MEDIAN, GOAL_WORST = 5.0, 10.0


def splits(manifests=MANIFESTS) -> dict[str, dict]:
    """name -> {"what", "calibrate": [paths], "predict": [paths], "goal": bool} from every manifest."""
    out = {}
    for m in manifests:
        if not m.is_file():
            continue
        spec = json.loads(m.read_text())
        for name, s in spec.get("splits", {}).items():
            out[name] = {"what": s["what"], "goal": s.get("goal", True),
                         "calibrate": [m.parent / f for f in s["calibrate"]],
                         "acceptance_from": [m.parent / f for f in s["acceptance_from"]] if "acceptance_from" in s else None,
                         "probe": m.parent / s["probe"] if "probe" in s else None,
                         "predict": [m.parent / f for f in s["predict"]]}
            if "workload_from" in s:  # acceptance and hits from other runs, e.g. another host's (run_workload_split)
                out[name]["workload_from"] = [m.parent / f for f in s["workload_from"]]
                out[name]["predict_prompts"] = s.get("predict_prompts")
            if "halves" in s:  # random halves of the runs' requests: calibrate on A, predict B (module docstring)
                out[name]["halves"] = {"draws": int(s["halves"].get("draws", DRAWS)),
                                       "seed": int(s["halves"].get("seed", 0)),
                                       "across_pools": bool(s["halves"].get("across_pools", False))}
            if "request_tags" in spec.get("setup", {}):
                out[name]["request_tags"] = manifest_tags(spec["setup"]["request_tags"])
        if "calibrate" in spec and "holdout" in spec:
            out["config"] = {"what": "configuration hold-out: same 8 prompts (and at T = 0 the same tokens), "
                                     "other K / fan-out / batch / mode (traces without logged distributions)",
                             "goal": True, "calibrate": [m.parent / f for f in spec["calibrate"]], "acceptance_from": None,
                             "probe": None, "predict": [m.parent / f for f in spec["holdout"]]}
    return out


def manifest_tags(ranges: dict[str, list[int]]) -> list[str]:
    """A manifest's "request_tags" ({class: [first seq, last seq], ...}, inclusive) -> one class per sequence: the
    classes of runs recorded before ssd-run wrote them into the trace header."""
    n = max(last for _, last in ranges.values()) + 1
    tags = [""] * n
    for tag, (first, last) in ranges.items():
        tags[first:last + 1] = [tag] * (last - first + 1)
    return tags


def shared(cal: list[Trace], pred: list[Trace]) -> dict[str, list]:
    """What calibration and prediction traces have in common (prompts, T, C, b, modes): the split's caveats."""
    def keys(ts, f):
        return set().union(*(f(t) for t in ts))

    fields = {"prompts": prompt_ids,
              "temperature": lambda t: {float(t.plan.get("temperature", 0.0))},
              "saguaro_c": lambda t: {float(t.plan.get("saguaro_c", 1.0))} if t.mode != "ar" else set(),
              "batch_size": lambda t: {int(t.header.batch_size)},
              "mode": lambda t: {t.mode}}
    return {k: sorted(keys(cal, f) & keys(pred, f)) for k, f in fields.items()}


class LeakingSplit(ValueError):
    """A split whose predicted runs share text with its calibration (ssd_sim.io.overlap)."""


def shared_text(name: str, cal: list[Trace], pred: dict[str, Trace]) -> tuple[dict[str, str], str | None]:
    """({run: how much text it shares}, None) for every predicted run, or with the reason the split leaks: the runs
    above LEAK_SHARE."""
    text, leaks = holdout.shared_text(cal, pred)
    reason = (f"split {name}: {len(leaks)} of {len(pred)} predicted runs share more than {LEAK_SHARE:.0%} of their "
              f"text with the calibration: {'; '.join(leaks)}") if leaks else None
    return text, reason


def check_holdout(name: str, cal: list[Trace], pred: dict[str, Trace]) -> dict[str, str]:
    """{run: how much text it shares} for every predicted run; LeakingSplit naming the runs above LEAK_SHARE."""
    text, leak = shared_text(name, cal, pred)
    if leak:
        raise LeakingSplit(leak)
    return text


def run_split(name: str, split: dict, allow_leaks: bool = False, use_probe: bool = True,
              draws: int | None = None, use_mix: bool = True) -> dict:
    """Calibrate on the split's traces (and its probe, unless use_probe is False), predict its runs; per-run and
    summary errors (%). A split whose runs share text with its calibration is refused (LeakingSplit) unless
    allow_leaks, which reports it marked as leaking. A "halves" split is evaluated on `draws` random halves of its
    runs' requests (default: the manifest's) and pooled (run_halves); with the manifest's request classes (and use_mix),
    each draw's calibration is weighted to its half B's class shares (model.mix)."""
    if "halves" in split:
        return run_halves(name, split, allow_leaks, use_probe, draws, use_mix)
    if "workload_from" in split:
        return run_workload_split(name, split, allow_leaks, use_probe, use_mix)
    cal = {p.name: read_trace(p) for p in split["calibrate"]}
    pred = {p.name: read_trace(p) for p in split["predict"]}
    acc = [p.name for p in split["acceptance_from"]] if split["acceptance_from"] is not None else None
    return evaluate(name, split, cal, pred, acc, allow_leaks, use_probe)


def _run_or_leak(name: str, split: dict, options: dict) -> dict | str:
    """run_split in a worker process; a LeakingSplit comes back as its message (str), raised again by the caller."""
    try:
        return run_split(name, split, **options)
    except LeakingSplit as e:
        return str(e)


class SplitRuns:
    """run_split of many splits at once in `jobs` worker processes (no more than there are splits), started in the given order; `result(name)` waits
    for one (re-raising its LeakingSplit). Workers are spawned, not forked (a parent that loaded torch must not fork
    its threads), with bench/ on their path; `close()` stops them at once, finished or not (an interrupt waits for
    nothing). Results are those of run_split in this process: every draw and simulation is seeded."""

    def __init__(self, named: dict[str, dict], jobs: int, **options):
        workers = max(1, min(jobs, len(named)))
        self.pool = multiprocessing.get_context("spawn").Pool(workers, initializer=site.addsitedir,
                                                              initargs=(str(Path(__file__).parent),))
        self.pending = {n: self.pool.apply_async(_run_or_leak, (n, s, options)) for n, s in named.items()}

    def result(self, name: str) -> dict:
        res = self.pending[name].get()
        if isinstance(res, str):
            raise LeakingSplit(res)
        return res

    def close(self) -> None:
        self.pool.terminate()
        self.pool.join()


@functools.cache
def shipped_traces() -> tuple[tuple[Path, Trace], ...]:
    """Every trace under traces/ but superseded/ (what bench/drift.py measures SHIPPED_DRIFTS over), with its path."""
    return tuple((p.resolve(), read_trace(p)) for p in shipped_trace_paths(ROOT / "traces"))


@functools.cache
def _every_drift(horizon: str) -> Drift | None:
    """model.drift.project_drift over every shipped trace: what SHIPPED_DRIFTS rounds, measured once per process."""
    return project_drift([t for _, t in shipped_traces()], horizon)


@functools.cache
def _held_out(predicted: frozenset[Path]) -> dict[str, Drift]:
    kept = [t for p, t in shipped_traces() if p not in predicted]
    out = {}
    for horizon in HORIZONS:
        d, shipped = project_drift(kept, horizon), SHIPPED_DRIFTS[horizon]
        if d is None:  # nothing left to measure it: the project's, said to count the predicted runs
            out[horizon] = Drift(shipped.sd, shipped.groups, shipped.runs, shipped.source + "; no repeat runs are left "
                                 "without the split's predicted runs, so this drift counts them")
        elif d == _every_drift(horizon):
            out[horizon] = shipped  # no predicted run is a repeat
        else:
            groups, runs = ("clusters of sessions", "sessions") if horizon == "later" else ("setups", "runs")
            out[horizon] = Drift(d.sd, d.groups, d.runs, "measured over this project's repeat runs without the split's "
                                                         f"predicted runs ({d.groups} {groups}, {d.runs} {runs})")
    return out


def held_out_drifts(predicted: list[Path]) -> dict[str, Drift]:
    """model.drift's SHIPPED_DRIFTS measured again over the shipped traces less the predicted runs' files: a run whose
    repeat is in the calibration (or elsewhere) leaves that pair out, so no interval uses a drift its own run set."""
    return _held_out(frozenset(p.resolve() for p in predicted))


@functools.cache
def _fit_of(paths: tuple[str, ...]):
    return fit_target([t for p, t in shipped_traces() if str(p) in paths])


def _shipped_fit(traces: list[Trace]):
    """model.calibrate.fit_target of shipped traces, each set fitted once per process."""
    return _fit_of(tuple(str(t.path) for t in traces))


@functools.cache
def shipped_calibration_traces() -> tuple[tuple[Path, Trace], ...]:
    """The shipped traces of the folders' calibrations (model.residual's): each folder's own, not a hold-out check's
    runs in its subfolders (shipped_trace_paths(subfolders=False))."""
    own = {p.resolve() for p in shipped_trace_paths(ROOT / "traces", subfolders=False)}
    return tuple((p, t) for p, t in shipped_traces() if p in own)


def _held_out_residual(predicted: frozenset[Path]) -> ProjectResidual:
    kept = [(p, t) for p, t in shipped_calibration_traces() if p not in predicted]
    groups = calibration_groups([p for p, _ in kept], [t for _, t in kept])
    r = project_residual(groups, _shipped_fit, "measured over the AR / SD runs of this project's calibrations without "
                                               "the split's predicted runs")
    shipped = SHIPPED_RESIDUAL
    if r is None:  # too few calibrations are left to measure it: the project's, said to count the predicted runs
        return replace(shipped, spread=replace(shipped.spread, source=shipped.spread.source + "; too few calibrations "
                                               "are left without the split's predicted runs, so this counts them"))
    if (r.spread.groups, r.spread.runs) == (shipped.spread.groups, shipped.spread.runs):
        return shipped  # no predicted run is in a calibration that measures it
    return replace(r, spread=replace(r.spread, source=r.spread.source + f" ({r.spread.groups} calibrations, "
                                                                        f"{r.spread.runs} runs)"))


def held_out_residual(predicted: list[Path]) -> ProjectResidual:
    """model.residual's SHIPPED_RESIDUAL (spread and weight) measured again over the shipped calibrations less the
    predicted runs' files (each calibration refitted without them), so no interval uses a spread its own run set."""
    return _held_out_residual(frozenset(p.resolve() for p in predicted))


def evaluate(name: str, split: dict, cal: dict[str, Trace], pred: dict[str, Trace], acceptance_from: list[str] | None,
             allow_leaks: bool, use_probe: bool, mix: RequestMix | None = None,
             workload: dict[str, Trace] | None = None) -> dict:
    """One calibration ({name: trace}) and the prediction of every run in `pred` ({name: trace}): the split's report.
    mix: the calibration weighted to these request classes (the predicted runs' own: what their user knows).
    workload: other runs ({name: trace}) whose acceptance and hits replace the calibration's, as `ssd-plan --profile
    P --acceptance-from W` does (model.workload_profile.with_acceptance); the mix then weights them, not `cal`."""
    others = list(cal.values()) + list((workload or {}).values())  # all the text the prediction was given
    text, leak = shared_text(name, others, pred)
    if leak and not allow_leaks:
        raise LeakingSplit(leak)
    probe = load_probe(split["probe"]) if use_probe and split.get("probe") else None
    # Runs timed chunk by chunk among the calibration's (an interleaved grid's halves, latencies from those runs, not
    # a probe) have no run-to-run drift between them: their intervals carry the runs' spread around the fit only.
    timed = list(cal.values())
    same = probe is None and all(interleaved_with(t, timed) for t in pred.values())
    drifts = held_out_drifts(split["predict"])
    profile, report = calibrate_traces(timed, list(cal), name=f"fidelity-{name}",
                                       acceptance_from=acceptance_from, probe=probe,
                                       mix=None if workload else mix,
                                       drifts={**drifts, "session": NO_DRIFT} if same else drifts,
                                       residual=held_out_residual(split["predict"]))
    if workload:
        source, wreport = calibrate_traces(list(workload.values()), list(workload), name=f"fidelity-{name}-workload",
                                           mix=mix)
        profile = with_acceptance(profile, profile_acceptance(source))
        unused = wreport.latency_fit_lines  # of a latency this profile does not take
        report.warnings.extend(f"workload: {w}" for w in wreport.warnings if w not in unused)
    runs = predict_runs(profile, pred, same, text)
    return summary_of(name, split, runs, leak, {
        "calibrate": list(cal), "probe": probe.path if probe else None, "acceptance_from": acceptance_from or [],
        "workload_from": list(workload or {}), "mix_of_predicted": mix.describe() if mix else None,
        "shared": shared(others, list(pred.values())),
        "warnings": report.warnings,
        "choices": choices(runs, recommender(profile, pred))})


def summary_of(name: str, split: dict, runs: list[dict], leak: str | None, extra: dict) -> dict:
    """A split's report: its runs, their |tok/s error| median and worst, the interval coverage and mean width."""
    errs = [abs(r["tok_s_err_pct"]) for r in runs]
    widths = [(r["interval_90"][1] - r["interval_90"][0]) / r["predicted_tok_s"] * 100 for r in runs]
    return {"name": name, "what": split["what"], "goal": split["goal"] and leak is None, "leak": leak,
            "coverage_90": sum(r["inside"] for r in runs) / len(runs), "mean_width_pct": statistics.mean(widths),
            **extra, "runs": runs, "median_abs_err_pct": statistics.median(errs), "worst_abs_err_pct": max(errs)}


def pool_requests(cal: dict[str, Trace], pred: dict[str, Trace],
                  across: bool = False) -> tuple[list[int], list[int], list[str]]:
    """The requests the calibration's runs and the predicted runs decoded (two lists), and the prompt pools: one, the
    same prompts on both sides; or, where the split says so (`across`: "halves": {"across_pools": true}), two: the
    calibration ran another pool (of any size), whose half A calibrates the prediction of the predicted pool's half B
    (another workload, no text shared). ValueError if the runs of a side decoded different requests, a side mixes
    pools, or the sides' pools differ unannounced."""
    sides = []
    for side in (cal, pred):
        seqs = {name: frozenset(q.seq for r in t.rounds for q in r.seqs) for name, t in side.items()}
        first = next(iter(seqs.values()))
        sides.append((first, [name for name, s in seqs.items() if s != first]))
    sources = [{t.header.prompt_source for t in side.values()} for side in (cal, pred)]
    odd = sides[0][1] + sides[1][1]
    same = sides[0][0] == sides[1][0] and sources[0] == sources[1]
    if odd or any(len(s) != 1 for s in sources) or (not same and not across):
        raise ValueError(f"a halves split needs runs over one prompt pool (two, one per side, with \"across_pools\"); "
                         f"{odd or 'the prompt sources'} differ")
    return sorted(sides[0][0]), sorted(sides[1][0]), list(dict.fromkeys(next(iter(s)) for s in sources))


def run_halves(name: str, split: dict, allow_leaks: bool, use_probe: bool, draws: int | None = None,
               use_mix: bool = True) -> dict:
    """evaluate() on random halves of the runs' requests, draw by draw, pooled: every draw's runs, choices and
    warnings; the median / worst error and the coverage over all of them; per run, its spread over the draws.
    With request classes (the manifest's) and use_mix, each draw is calibrated for its half B's class shares: the
    prediction knows how many code and chat requests B holds (not their text), as a user knows their traffic.
    With "workload_from" (runs of the same pool on another host), their half A of each draw gives the acceptance and
    hits, the calibration's own runs and probe the latencies (evaluate's workload)."""
    h = split["halves"]
    tags = split.get("request_tags")
    cal_all = {p.name: tagged(read_trace(p), tags) for p in split["calibrate"]}
    pred_all = {p.name: tagged(read_trace(p), tags) for p in split["predict"]}
    work_all = {f"{p.parent.name}/{p.name}": tagged(read_trace(p), tags) for p in split.get("workload_from", [])}
    weigh = use_mix and all(t.header.request_tags for t in {**cal_all, **pred_all, **work_all}.values())
    cal_seqs, seqs, pools = pool_requests(cal_all, pred_all, h.get("across_pools", False))
    work_seqs = pool_requests(work_all, pred_all, h.get("across_pools", False))[0] if work_all else []
    acc = [p.name for p in split["acceptance_from"]] if split["acceptance_from"] is not None else None
    reports = []
    for d in range(h["draws"] if draws is None else draws):
        a, b = halves(seqs, d, h["seed"])  # the predicted pool's: B is predicted, A gives the floors
        a_cal = halves(cal_seqs, d, h["seed"])[0]  # = a on one pool
        cal = {f"{n}[A{d}]": t.only_requests(a_cal, f"A{d}") for n, t in cal_all.items()}
        pred = {f"{n}[B{d}]": t.only_requests(b, f"B{d}") for n, t in pred_all.items()}
        a_work = halves(work_seqs, d, h["seed"])[0]  # another host's runs of the pool: their half A's acceptance
        workload = {f"{n}[A{d}]": t.only_requests(a_work, f"A{d}") for n, t in work_all.items()} or None
        mix = RequestMix.of_requests(next(iter(pred_all.values())).tag(q) for q in b) if weigh else None
        res = evaluate(name, split, cal, pred, [f"{n}[A{d}]" for n in acc] if acc else None, allow_leaks, use_probe,
                       mix, workload)
        reports.append(res)
        for r in res["runs"]:
            r["draw"], r["run"] = d, r["trace"].rsplit("[", 1)[0]
            r["floor_err_pct"] = floor_err(pred_all[r["run"]], a, b)
            if weigh:
                r["mixed_floor_err_pct"] = mixed_floor_err(pred_all[r["run"]], a, b)
    runs = [r for res in reports for r in res["runs"]]
    leaks = [res["leak"] for res in reports if res["leak"]]
    warnings = list(dict.fromkeys(w for res in reports for w in res["warnings"]))
    floor = [abs(r["floor_err_pct"]) for r in runs]
    mixed = [abs(r["mixed_floor_err_pct"]) for r in runs if r.get("mixed_floor_err_pct") is not None]
    return summary_of(name, split, runs, leaks[0] if leaks else None, {
        "mix": weigh, **({"mixed_floor_median_abs_err_pct": statistics.median(mixed),
                          "mixed_floor_worst_abs_err_pct": max(mixed)} if mixed else {}),
        "calibrate": list(cal_all), "probe": reports[0]["probe"], "acceptance_from": acc or [],
        "workload_from": list(work_all), "shared": reports[0]["shared"], "warnings": warnings,
        "choices": [c for res in reports for c in res["choices"]],
        "draws": len(reports), "pool": len(seqs), "pools": pools, "per_run": per_run(runs),
        "floor_median_abs_err_pct": statistics.median(floor), "floor_worst_abs_err_pct": max(floor)})


def run_workload_split(name: str, split: dict, allow_leaks: bool, use_probe: bool, use_mix: bool = True) -> dict:
    """evaluate() with the acceptance and hits of the split's "workload_from" runs (e.g. another host's) on the
    latencies of its "calibrate" runs and probe (workload_sides)."""
    cal, workload, pred, mix = workload_sides(name, split, use_mix)
    return evaluate(name, split, cal, pred, None, allow_leaks, use_probe, mix, workload)


def workload_sides(name: str, split: dict, use_mix: bool = True):
    """A "workload_from" split's (calibrate, workload, predict, mix): the predicted runs cut to "predict_prompts" where
    given; every calibration and workload run cut to the prompts no predicted run used (the same text has one label:
    overlap.canonical_prompt); with use_mix, the mix of the predicted requests' classes (their prompt sets: a user
    knows their traffic is code, not its text), which weights the workload runs."""
    keep = set(split["predict_prompts"]) if split.get("predict_prompts") else None
    pred = {p.name: class_tagged(read_trace(p)) for p in split["predict"]}
    if keep is not None:
        pred = {f"{n}[{name}]": cut_prompts(t, lambda label: label in keep, name) for n, t in pred.items()}
    used = set().union(*(prompt_ids(t) for t in pred.values()))

    def load(paths):
        return {f"{p.parent.name}/{p.name}": cut_prompts(class_tagged(read_trace(p)), lambda label: label not in used,
                                                         "unseen") for p in paths}

    tags = [t.tag(q) for t in pred.values() for q in t.sequences()]
    mix = RequestMix.of_requests(tags) if use_mix and all(tags) else None
    return load(split["calibrate"]), load(split["workload_from"]), pred, mix


def cut_prompts(trace: Trace, wanted, label: str) -> Trace:
    """The run cut to its requests whose canonical prompt label passes `wanted` (itself when all do or when its
    prompts have no labels: the overlap check then decides)."""
    labels = prompt_labels(trace)
    if labels is None:
        return trace
    seqs = trace.sequences()
    keep = [q for q in seqs if q < len(labels) and wanted(labels[q])]
    if len(keep) == len(seqs):
        return trace
    if not keep:
        raise ValueError(f"{trace.path}: none of its prompts is left after the cut ({label})")
    return trace.only_requests(keep, label)


def class_tagged(trace: Trace) -> Trace:
    """The trace with each request's class set to its built-in prompt set ("code:3" -> "code") where its header
    records none (runs recorded before ssd-run wrote request_tags)."""
    labels = prompt_labels(trace)
    if trace.header.request_tags or labels is None:
        return trace
    return trace.with_tags(label.split(":", 1)[0] for label in labels)


def tagged(trace: Trace, tags: list[str] | None) -> Trace:
    """The trace with the manifest's request classes where its header records none."""
    return trace.with_tags(tags) if tags and not trace.header.request_tags else trace


def print_table(res: dict) -> None:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"\n## split {res['name']}: {res['what']}")
    if res["leak"]:
        print(f"NOT A HOLD-OUT (reported with --allow-leaks, no goal): {res['leak']}")
    print(f"calibrated on {len(res['calibrate'])} traces: {', '.join(res['calibrate'])}"
          + (f"; latencies from the probe {res['probe']}" if res["probe"] else ""))
    if res["acceptance_from"]:
        print(f"acceptance and hit rates from {', '.join(res['acceptance_from'])} only")
    if res.get("workload_from"):
        print(f"acceptance and hit rates from other runs: {', '.join(res['workload_from'])}"
              + (f", weighted to the predicted requests' classes ({res['mix_of_predicted']})"
                 if res["mix_of_predicted"] else ""))
    print("shared with the predicted runs: " + "; ".join(f"{k} {v}" for k, v in res["shared"].items() if v))
    for w in res["warnings"]:
        print(f"warning: {w}")
    if "per_run" in res:
        across = f" (half A of {res['pools'][0]}, half B of {res['pools'][1]})" if len(res["pools"]) > 1 else ""
        print(f"{res['draws']} random halves of {res['pool']} requests: calibrated on half A of each draw, predicted "
              f"on half B{across}" + (", the calibration weighted to B's request classes (B's code / chat shares, not its "
                             "text; --no-mix: unweighted)" if res["mix"] else ""))
        head = ("run", "draws", "median err %", "median |err| %", "worst |err| %", "ms/round err %", "floor worst %",
                "class floor worst %", "inside 90%")
        rows = [(run, str(v["draws"]), f"{v['median_err_pct']:+.1f}", f"{v['median_abs_err_pct']:.1f}",
                 f"{v['worst_abs_err_pct']:.1f}", f(v["median_round_ms_err_pct"], "+.1f"),
                 f"{v['floor_worst_abs_err_pct']:.1f}",
                 f(v["mixed_floor_worst_abs_err_pct"], ".1f"), f"{v['coverage_90']:.0%}")
                for run, v in res["per_run"].items()]
    else:
        head = ("run", "mode", "K", "b", "T", "C", "tok/s meas", "pred", "90% interval", "err %", "ms/round err %",
                "acc.len meas", "pred", "hit meas", "pred")
        rows = [(r["trace"], r["mode"], str(r["K"]), str(r["batch_size"]), f"{r['temperature']:g}",
                 f"{r['saguaro_c']:g}", f(r["measured_tok_s"], ".3f"), f(r["predicted_tok_s"], ".3f"),
                 f"{r['interval_90'][0]:.2f}-{r['interval_90'][1]:.2f}" + ("" if r["inside"] else " (out)"),
                 f(r["tok_s_err_pct"], "+.1f"), f(r["round_ms_err_pct"], "+.1f"),
                 f(r["measured_mean_accept_len"], ".2f"), f(r["predicted_mean_accept_len"], ".2f"),
                 f(r["measured_hit_rate"], ".3f"), f(r["predicted_hit_rate"], ".3f")) for r in res["runs"]]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    goal = f"goal: median <= {GOAL_MEDIAN:g}%, worst <= {GOAL_WORST:g}%" if res["goal"] else "no goal (reported)"
    print(f"tok/s: median |error| {res['median_abs_err_pct']:.1f}%, worst {res['worst_abs_err_pct']:.1f}% ({goal}); "
          f"90% intervals hold {res['coverage_90']:.0%} of the runs (goal over all splits: 85-95%), mean width "
          f"{res['mean_width_pct']:.0f}%")
    if "per_run" in res:
        print(f"floor (each run's own half A as the prediction of its half B, the best a prediction can do without "
              f"seeing B): median |error| {res['floor_median_abs_err_pct']:.1f}%, worst {res['floor_worst_abs_err_pct']:.1f}%")
        if "mixed_floor_worst_abs_err_pct" in res:
            print(f"class floor (half A's measured ms per token of each class, charged for B's tokens of that class: "
                  f"what is left to a prediction that knows B's classes): median |error| "
                  f"{res['mixed_floor_median_abs_err_pct']:.1f}%, worst {res['mixed_floor_worst_abs_err_pct']:.1f}%")
    if "per_run" in res and res["choices"]:
        cs = res["choices"]
        regrets, rec = [c["regret_pct"] for c in cs], [c["recommended_regret_pct"] for c in cs]
        print(f"choices: {len(cs)} workloads (halves x temperatures); within {REGRET_OK:g}% of the best measured run: "
              f"the predicted best in {sum(c['ok'] for c in cs)} (median regret {statistics.median(regrets):.1f}%, "
              f"worst {max(regrets):.1f}%), the recommended (decision rule) in {sum(c['recommended_ok'] for c in cs)} "
              f"(median regret {statistics.median(rec):.1f}%, worst {max(rec):.1f}%)")
        return
    for c in res["choices"]:
        p = "-" if c["p_ssd_beats_sd"] is None else f"{c['p_ssd_beats_sd']:.2f}"
        print(f"choice among {c['candidates']} runs of one workload: measured best {c['best']}; predicted best "
              f"{c['pick']}: regret {c['regret_pct']:.1f}% ({'within' if c['ok'] else 'beyond'} {REGRET_OK:g}%); "
              f"recommended {c['recommended']} (P(SSD beats SD) {p}): regret {c['recommended_regret_pct']:.1f}%")


def main(argv: list[str] | None = None) -> int:
    every = splits()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", action="append", choices=sorted(every), help="run only this split (repeatable)")
    ap.add_argument("--json", action="store_true", help="print one JSON object: {\"splits\": [...]}")
    ap.add_argument("--allow-leaks", action="store_true",
                    help="report splits whose predicted runs share text with the calibration (marked, no goal) "
                         "instead of refusing them")
    ap.add_argument("--no-probe", action="store_true",
                    help="calibrate latencies from the traces' rounds only, ignoring the splits' probes (to compare)")
    ap.add_argument("--no-mix", action="store_true",
                    help="halves splits: calibrate on half A as it is, not weighted to half B's request classes")
    ap.add_argument("--draws", type=int, help=f"random halves per halves split (default: the manifest's, else {DRAWS})")
    ap.add_argument("--jobs", type=int, default=min(8, os.cpu_count() or 1),
                    help="splits run at once, one worker process each (~0.4 GB; default: the CPU count, at most 8); "
                         "the results do not depend on it")
    args = ap.parse_args(argv)
    if args.draws is not None and args.draws < 1:
        ap.error(f"--draws must be an integer >= 1, got {args.draws}")
    if args.jobs < 1:
        ap.error(f"--jobs must be an integer >= 1, got {args.jobs}")
    names = args.split or list(every)
    pending = SplitRuns({n: every[n] for n in names}, args.jobs, allow_leaks=args.allow_leaks,
                        use_probe=not args.no_probe, draws=args.draws, use_mix=not args.no_mix)
    results = []
    try:
        for n in names:
            try:
                results.append(pending.result(n))
            except LeakingSplit as e:
                if args.split:  # asked for by name: refuse in one line
                    raise SystemExit(f"fidelity: {e}; a hold-out must share no text (--allow-leaks reports it "
                                     f"anyway)") from None
                print(f"refused: {e}", file=sys.stderr)
    except KeyboardInterrupt:
        raise SystemExit("fidelity: interrupted; no table printed") from None
    finally:
        pending.close()
    runs = [r for res in results if res["goal"] for r in res["runs"]]
    picks = [c for res in results if res["goal"] for c in res["choices"]]
    pooled = {"runs": len(runs), "coverage_90": sum(r["inside"] for r in runs) / len(runs),
              "choices": len(picks), "choices_within_5pct": sum(c["ok"] for c in picks),
              "recommended_within_5pct": sum(c["recommended_ok"] for c in picks),
              "by_horizon": {h: [sum(r["inside"] for r in part), len(part)] for h in (*HORIZONS, INTERLEAVED)
                             if (part := [r for r in runs if r["horizon"] == h])}} if runs else {}
    if args.json:
        print(json.dumps({"splits": results, "pooled_goal_splits": pooled}, indent=2, default=str))
    else:
        for res in results:
            print_table(res)
        if pooled:
            print(f"\nall splits with a goal: 90% intervals hold {pooled['coverage_90']:.0%} of {pooled['runs']} runs "
                  f"(a run in several splits or draws counts in each); within {REGRET_OK:g}% of the best measured run: "
                  f"the predicted best in {pooled['choices_within_5pct']} of {pooled['choices']} workloads, the "
                  f"recommended in {pooled['recommended_within_5pct']}; by horizon: " + ", ".join(
                      f"{h} {k} of {n}" for h, (k, n) in pooled["by_horizon"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
