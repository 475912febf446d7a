"""Predictions checked on requests the calibration never saw: calibrate on half A of every run's requests, predict
half B of each with the simulator, and score each prediction and its 90% interval against what half B measured.

`check_halves` is `ssd-plan holdout` (a user's own traces, random halves drawn again and again); the pieces below it
(predicting one run, its interval, its errors, the floors, the decisions judged by regret) are also what
`bench/fidelity.py` scores the project's shipped splits with. Units: tok/s, ms, % (errors are (predicted - measured) /
measured x 100).

A run cut to some of its requests (Trace.only_requests) is that configuration on those prompts, timed in the same
minutes, so a halves check shares no text (the overlap check runs per draw) but the host and session: it measures the
model and the text, not the host's drift between a calibration and a run hours later (model.drift; `ssd-plan
--horizon later` gives intervals for that).
"""

from __future__ import annotations

import statistics
import zlib
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.overlap import LEAK_SHARE, CalibrationText, prompt_ids, prompt_labels
from ssd_sim.io.probe import Probe
from ssd_sim.io.trace import Trace, summarize
from ssd_sim.model.calibrate import calibrate_traces
from ssd_sim.model.drift import (
    INTERLEAVED,
    NO_DRIFT,
    SHIPPED_DRIFTS,
    horizon_of,
    interleaved_with,
    minutes_from,
    started,
)
from ssd_sim.model.mix import RequestMix
from ssd_sim.model.profile import Profile
from ssd_sim.plan.compare import trace_plan
from ssd_sim.plan.intervals import at_horizon, decide, sample, scaled_interval
from ssd_sim.sim.des import outcome_source, plan_for_mode, simulate
from ssd_sim.sim.workload import Workload

MIN_SIM_ROUNDS = 10_000  # simulated sequence-rounds per prediction (Monte Carlo SE of the predicted tok/s ~0.6%)
REGRET_OK = 5.0  # a choice is good when the run it picks measured within this % of the best measured run


def static_batches(trace: Trace) -> list[list[int]]:
    """Decode tokens of every sequence, grouped in the runtime's static batches of batch_size (seq order)."""
    tokens: dict[int, int] = {}
    for r in trace.rounds:
        for s in r.seqs:
            tokens[s.seq] = tokens.get(s.seq, 0) + s.committed
    b = int(trace.header.batch_size)
    ids = sorted(tokens)
    return [[tokens[i] for i in ids[j:j + b]] for j in range(0, len(ids), b)]


def replicates_for(trace: Trace, least: int = 10) -> int:
    """How many times to simulate a run so the prediction carries >= MIN_SIM_ROUNDS sequence-rounds (at least
    `least`): a 24-request half of 16-token requests has ~120 rounds, and 10 replicates of it left a ~1.7% seed-to-seed
    spread in the predicted tok/s (measured: 10 seed sets of 240 requests, SD K = 4)."""
    rounds = sum(len(r.seqs) for r in trace.rounds)
    return max(least, -(-MIN_SIM_ROUNDS // max(rounds, 1)))


def predict_run(profile: Profile, trace: Trace, replicates: int | None = None, seed: int = 0) -> dict:
    """Simulated decode tok/s, mean acceptance length (tokens per round) and hit rate of the trace's run.

    Each static batch decodes exactly the run's decode tokens per sequence (no prefill: prompt_tokens = 0, so
    no first token comes from a prefill either), in its own simulation, as the runtime runs it (a prefill between
    batches absorbs the draft's leftover speculation; b = 1 requests simulated back to back would each wait for it:
    ~1.5% slower SSD). Simulated `replicates` times (default: replicates_for; seeds seed, seed + 1, ...) and pooled, so
    the prediction is the model's expectation for this workload, not one noisy draw of it.
    """
    plan = trace_plan(trace)
    reps = replicates_for(trace) if replicates is None else replicates
    source = outcome_source(profile, plan_for_mode(profile, plan, trace.mode))  # the same tables for every replicate
    total_ms = tokens = rounds = accept_len = hit = hit_rounds = 0.0
    for i, lengths in enumerate(static_batches(trace) * reps):
        wl = Workload("fixed", len(lengths), len(lengths), output_tokens=max(lengths), prompt_tokens=0,
                      output_lengths=tuple(lengths))
        m = simulate(profile, plan, mode=trace.mode, seed=seed + i, workload=wl, outcomes=source).metrics
        total_ms += m.sim_ms
        tokens += sum(lengths)
        rounds += m.rounds
        accept_len += m.mean_accept_len * m.rounds
        if m.hit_rate is not None:
            hit += m.hit_rate * m.rounds
            hit_rounds += m.rounds
    return {"tok_s": tokens / total_ms * 1e3, "mean_accept_len": accept_len / rounds,
            "hit_rate": hit / hit_rounds if hit_rounds else None}


def run_seed(run: str) -> int:
    """The first simulation seed of a predicted run: a hash of its label (file name and draw), so the predictions' Monte
    Carlo errors are independent from run to run. With seed 0 for every run they moved together: on the Zen 4 fresh96
    grid (in sample) seed 0 put SD's and SSD's T = 0 acceptance length 0.7% over the model's expectation, five other seeds
    -0.4% to +0.2%, and every SD / SSD prediction at T = 0 shared that draw of the uniforms."""
    return zlib.crc32(run.encode()) % (1 << 31)


def run_interval(profile: Profile, trace: Trace, simulated: float) -> tuple[float, float]:
    """The 90% interval of the run's tok/s (plan.intervals.scaled_interval around the simulated value, for a run of
    this many sequences)."""
    n_seq = len(trace.sequences())
    return scaled_interval(profile, trace_plan(trace), trace.mode, simulated, max(n_seq, 1))


def err_pct(pred: float | None, meas: float | None) -> float | None:
    """(pred - meas) / meas in %, None where either is missing or meas is 0."""
    if pred is None or meas is None or meas == 0:
        return None
    return 100.0 * (pred - meas) / meas


def round_ms_err(pred_tok_s: float, pred_accept: float, meas_tok_s: float, meas_accept: float) -> float | None:
    """The error (%) of the predicted time per round (mean acceptance length / tok/s, ms x rows): the latency side of a
    tok/s error, apart from the acceptance (SSD's round includes the backups of its misses, so hit rates still enter)."""
    if not (pred_tok_s and meas_tok_s and pred_accept and meas_accept):
        return None
    return err_pct(pred_accept / pred_tok_s, meas_accept / meas_tok_s)


def profile_horizon(horizon: str) -> str:
    """The profile's horizon (model.drift.HORIZONS) whose spread a run's interval uses: an interleaved run's is the
    session spread of a profile calibrated with NO_DRIFT."""
    return "session" if horizon == INTERLEAVED else horizon


def shared_text(cal: Iterable[Trace], pred: Mapping[str, Trace]) -> tuple[dict[str, str], list[str]]:
    """({run: how much text it shares with the calibration}, [the runs above LEAK_SHARE, each with its share])."""
    text = CalibrationText(list(cal))
    found = {run: text.overlap(t) for run, t in pred.items()}
    return ({run: o.describe() for run, o in found.items()},
            [f"{run} ({o.describe()})" for run, o in found.items() if o.leaks])


def predict_runs(profile: Profile, pred: Mapping[str, Trace], interleaved: bool,
                 shared: Mapping[str, str] | None = None) -> list[dict]:
    """Every predicted run ({label: trace}) against what it measured: tok/s, mean acceptance length, hit rate, the
    time per round, the 90% interval at the run's horizon ("interleaved" when timed chunk by chunk among the
    calibration's runs, else "session" or "later" from when the profile's forwards were timed) and whether it held."""
    runs = []
    for run, trace in pred.items():
        meas, guess = summarize(trace), predict_run(profile, trace, seed=run_seed(run))
        minutes = minutes_from(profile.uncertainty.timed_at, started(trace))
        horizon = INTERLEAVED if interleaved else horizon_of(minutes)
        low, high = run_interval(at_horizon(profile, profile_horizon(horizon)), trace, guess["tok_s"])
        runs.append({
            "interval_90": [low, high], "inside": bool(low <= meas.tok_s <= high), "horizon": horizon,
            "minutes_from_timed": minutes,
            "trace": run, "mode": trace.mode, "K": trace.plan.get("num_speculative_tokens", 0) if trace.mode != "ar" else 0,
            "batch_size": trace.header.batch_size, "temperature": trace.plan.get("temperature", 0.0),
            "saguaro_c": trace.plan.get("saguaro_c", 1.0), "fan_out": trace.plan.get("fan_out") if trace.mode == "ssd" else None,
            "measured_tok_s": meas.tok_s, "predicted_tok_s": guess["tok_s"], "tok_s_err_pct": err_pct(guess["tok_s"], meas.tok_s),
            "measured_mean_accept_len": meas.mean_accept_len, "predicted_mean_accept_len": guess["mean_accept_len"],
            "mean_accept_len_err_pct": err_pct(guess["mean_accept_len"], meas.mean_accept_len),
            "round_ms_err_pct": round_ms_err(guess["tok_s"], guess["mean_accept_len"], meas.tok_s, meas.mean_accept_len),
            "measured_hit_rate": meas.hit_rate, "predicted_hit_rate": guess["hit_rate"],
            "shared_text": (shared or {}).get(run),
            "workload": (tuple(sorted(prompt_ids(trace))), trace.plan.get("temperature", 0.0), trace.header.batch_size),
        })
    return runs


def halves(seqs: list[int], draw: int, seed: int = 0) -> tuple[list[int], list[int]]:
    """Draw `draw` of the random halves of `seqs`: (A, B), each sorted; A gets the smaller half of an odd pool."""
    perm = np.random.default_rng([seed, draw]).permutation(sorted(seqs))
    n = len(perm) // 2
    return sorted(int(q) for q in perm[:n]), sorted(int(q) for q in perm[n:])


def floor_err(trace: Trace, a: list[int], b: list[int]) -> float:
    """The error (%) of the best prediction that does not see half B: this very configuration's measured tok/s on
    half A, taken as the prediction for half B. What no model can beat on average: the request-to-request spread of
    the pool (and the drift within one run), which a half of short requests does not average out."""
    return err_pct(summarize(trace.only_requests(a, "A")).tok_s, summarize(trace.only_requests(b, "B")).tok_s)


def mixed_floor_err(trace: Trace, a: list[int], b: list[int]) -> float | None:
    """floor_err for a prediction that knows B's classes: half A's measured ms per token of each class, charged for
    B's tokens of that class (post-stratified). The error (%) left is the spread within classes."""
    def per_class(seqs: list[int]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for q in seqs:
            out.setdefault(trace.tag(q), []).append(q)
        return out

    in_a, in_b = per_class(a), per_class(b)
    if not in_b.keys() <= in_a.keys():
        return None  # a class of B that A never ran: nothing to charge it at
    ms = sum(summarize(trace.only_requests(qs, "B")).tokens / summarize(trace.only_requests(in_a[c], "A")).tok_s
             for c, qs in in_b.items())
    whole = summarize(trace.only_requests(b, "B"))
    return err_pct(whole.tokens / ms, whole.tok_s)


def per_run(runs: list[dict]) -> dict[str, dict]:
    """Per run of a halves check, over its draws: median and worst |tok/s error|, the median signed error, the median
    error of the time per round (round_ms_err), the worst error of the floor (floor_err) and the share of draws inside
    the 90% interval."""
    out: dict[str, dict] = {}
    for r in runs:
        out.setdefault(r["run"], {"errs": [], "inside": [], "floor": [], "mixed": [], "round": []})
        out[r["run"]]["errs"].append(r["tok_s_err_pct"])
        if r.get("round_ms_err_pct") is not None:
            out[r["run"]]["round"].append(r["round_ms_err_pct"])
        out[r["run"]]["inside"].append(r["inside"])
        out[r["run"]]["floor"].append(r["floor_err_pct"])
        if r.get("mixed_floor_err_pct") is not None:
            out[r["run"]]["mixed"].append(r["mixed_floor_err_pct"])
    return {run: {"draws": len(v["errs"]), "median_err_pct": statistics.median(v["errs"]),
                  "median_abs_err_pct": statistics.median(abs(e) for e in v["errs"]),
                  "worst_abs_err_pct": max(abs(e) for e in v["errs"]),
                  "median_round_ms_err_pct": statistics.median(v["round"]) if v["round"] else None,
                  "floor_worst_abs_err_pct": max(abs(e) for e in v["floor"]),
                  "mixed_floor_worst_abs_err_pct": max((abs(e) for e in v["mixed"]), default=None),
                  "coverage_90": sum(v["inside"]) / len(v["inside"])} for run, v in out.items()}


def choices(runs: list[dict], recommend: Callable[[list[dict]], tuple[dict, float | None]] | None = None) -> list[dict]:
    """Per workload (same prompts, T, b) with two or more predicted runs: the run the prediction ranks first, the run
    that measured fastest, and the regret = the % of tok/s lost by taking the predicted pick. With `recommend` (a
    function of the workload's runs -> (run, P(SSD beats SD))), also the run the planner's decision rule
    recommends and its regret."""
    groups: dict[tuple, list[dict]] = {}
    for r in runs:
        groups.setdefault(r["workload"], []).append(r)
    out = []
    for rs in groups.values():
        if len(rs) < 2:
            continue
        pick = max(rs, key=lambda r: r["predicted_tok_s"])
        best = max(rs, key=lambda r: r["measured_tok_s"])
        regret = 100.0 * (1.0 - pick["measured_tok_s"] / best["measured_tok_s"])
        c = {"pick": pick["trace"], "best": best["trace"], "regret_pct": regret, "ok": regret <= REGRET_OK,
             "candidates": len(rs)}
        if recommend is not None:
            rec, p_ssd = recommend(rs)
            rec_regret = 100.0 * (1.0 - rec["measured_tok_s"] / best["measured_tok_s"])
            c.update(recommended=rec["trace"], recommended_regret_pct=rec_regret,
                     recommended_ok=rec_regret <= REGRET_OK, p_ssd_beats_sd=p_ssd)
        out.append(c)
    return out


def recommender(profile: Profile, traces: Mapping[str, Trace]) -> Callable[[list[dict]], tuple[dict, float | None]]:
    """The planner's decision rule over one workload's predicted runs (for `choices`): the predicted-best SSD run, the
    predicted-best SD run and AR over the profile's uncertainty draws (plan.intervals.decide, for a run of the
    workload's sequences); of the modes the workload has runs of, the one with the highest mean tok/s over the draws.
    A workload without both an SSD and an SD run gets its predicted best (P = None)."""
    def recommend(rs: list[dict]) -> tuple[dict, float | None]:
        best = {m: max((r for r in rs if r["mode"] == m), key=lambda r: r["predicted_tok_s"], default=None)
                for m in ("ar", "sd", "ssd")}
        if best["ssd"] is None or best["sd"] is None:
            return max(rs, key=lambda r: r["predicted_tok_s"]), None
        trace = traces[best["ssd"]["trace"]]
        plan = trace_plan(trace)
        n_seq = len(trace.sequences())
        sd_k = int(best["sd"]["K"])
        at = at_horizon(profile, profile_horizon(best["ssd"]["horizon"]))
        d = decide(at, plan, sd_k, sample(at, plan, sd_k, run_sequences=max(n_seq, 1)))
        ran = [m for m in ("ar", "sd", "ssd") if best[m] is not None]  # the modes the workload has runs of
        mode = max(ran, key=lambda m: d.expected[("ar", "sd", "ssd").index(m)])
        return best[mode], d.p_ssd_beats_sd
    return recommend


MIN_HALF = 24  # requests per half below which a check's worst error is mostly the requests' own spread (README)


def batch_one(traces: Mapping[str, Trace]) -> tuple[dict[str, Trace], list[str]]:
    """The runs a hold-out of requests can cut ({name: trace} at batch size 1) and a line for each one left out: a
    batched round's time belongs to all its rows, so a run of b > 1 cannot be split by request (calibrate-here's
    b = 2 SSD run, for instance). ConfigError when none is left."""
    kept = {n: t for n, t in traces.items() if int(t.header.batch_size) == 1}
    left = [f"{n} (batch size {t.header.batch_size}: a batched round's time belongs to all its rows, so it cannot be "
            "cut by request)" for n, t in traces.items() if n not in kept]
    if not kept:
        raise ConfigError("traces", f"every run ran at batch size > 1 ({', '.join(traces)}): a hold-out of requests "
                                    "cuts runs of batch size 1; record some with ssd-run -b 1")
    return kept, left


def prompt_keys(trace: Trace) -> dict[int, str]:
    """{seq: the prompt it ran}: its canonical built-in label (io.overlap.prompt_labels: "code:6"), else its prompt
    file and index ("my.jsonl#6")."""
    labels, src = prompt_labels(trace), str(trace.header.prompt_source)
    return {q: labels[q] if labels is not None and q < len(labels) else f"{src}#{q}" for q in trace.sequences()}


def request_pool(traces: Mapping[str, Trace]) -> tuple[list[int], dict[str, dict[int, int]]]:
    """The prompts every run decoded: their sequence numbers in the first run, and per run the map from those to its
    own (runs over different slices of one built-in set meet on the prompts they share: calibrate-here's runs over
    code prompts 0-6 and 0-22 share four). ConfigError, naming the pools, when fewer than 4 are shared."""
    keys = {n: prompt_keys(t) for n, t in traces.items()}
    common = set.intersection(*(set(k.values()) for k in keys.values()))
    if len(common) < 4:
        pools: dict[tuple, list[str]] = {}
        for n, t in traces.items():
            pools.setdefault((str(t.header.prompt_source), len(keys[n])), []).append(n)
        said = "; ".join(f"{len(names)} over {size} requests of {src} ({', '.join(names[:3])}"
                         f"{', ...' if len(names) > 3 else ''})" for (src, size), names in pools.items())
        raise ConfigError("traces", f"the runs share {len(common)} prompts ({said}): a hold-out needs at least 4 (2 per "
                                    "half); give runs over one prompt file or set, with more prompts (ssd-run "
                                    "--num-prompts N)")
    first = next(iter(keys))
    seqs = sorted(q for q, k in keys[first].items() if k in common)
    own = {n: {k: q for q, k in m.items()} for n, m in keys.items()}
    return seqs, {n: {q: own[n][keys[first][q]] for q in seqs} for n in traces}


def check_halves(traces: Mapping[str, Trace], draws: int = 5, seed: int = 0, probe: Probe | None = None,
                 weigh: bool = True, allow_leaks: bool = False) -> dict:
    """`ssd-plan holdout`: per draw, calibrate on half A of every run's requests (and the probe), predict half B of
    each run (check_draw); pooled over the draws. Runs of batch size > 1 are left out (batch_one), and said so.
    weigh: each draw's calibration weighted to half B's request classes where every trace records them (model.mix),
    as a user knows what traffic they serve. The report: every run of every draw, per run over the draws, the median
    and worst |tok/s error| (%), the interval coverage, the decisions by regret, the floors and the warnings."""
    if not 1 <= draws <= 1000:
        raise ConfigError("draws", f"{draws} random halves: give 1 to 1000")
    if not 0 <= seed < 2**63:
        raise ConfigError("seed", f"{seed}: give a seed from 0 to 2^63 - 1")
    traces, left_out = batch_one(traces)
    seqs, seq_in = request_pool(traces)
    weigh = weigh and all(t.header.request_tags for t in traces.values())
    cut = [f"{n} ({len(t.sequences()) - len(seqs)} of its {len(t.sequences())})" for n, t in traces.items()
           if len(t.sequences()) > len(seqs)]
    warnings = [f"the runs share {len(seqs)} prompts, so the requests of other prompts are left out: "
                + ", ".join(cut)] if cut else []
    rows, picks, leaks = [], [], []
    for d in range(draws):
        draw = check_draw(traces, seq_in, halves(seqs, d, seed), d, probe, weigh, allow_leaks)
        rows += draw["runs"]
        picks += draw["choices"]
        warnings += draw["warnings"]
        leaks += draw["leaks"]
    errs = [abs(r["tok_s_err_pct"]) for r in rows]
    return {"runs": rows, "per_run": per_run(rows), "draws": draws, "seed": seed, "requests": len(seqs),
            "half": len(seqs) // 2, "weighted": weigh, "median_abs_err_pct": statistics.median(errs),
            "worst_abs_err_pct": max(errs), "inside": sum(r["inside"] for r in rows), "predicted": len(rows),
            "choices": picks, "warnings": list(dict.fromkeys(warnings)), "leaks": leaks, "left_out": left_out,
            "horizons": sorted({r["horizon"] for r in rows})}


def check_draw(traces: Mapping[str, Trace], seq_in: Mapping[str, Mapping[int, int]], ab: tuple[list[int], list[int]],
               d: int, probe: Probe | None, weigh: bool, allow_leaks: bool) -> dict:
    """One draw of check_halves: halves `ab` (the first run's sequence numbers; seq_in maps them to each run's own)
    -> {"runs", "choices", "warnings", "leaks"}. A half B sharing more than LEAK_SHARE of its text with half A (the
    same prompt twice, or runs at T > 0 with one seed) is refused (ConfigError) unless allow_leaks."""
    a, b = ab

    def own(run: str, half: list[int]) -> list[int]:
        return sorted(seq_in[run][q] for q in half)

    cal = {f"{n}[A{d}]": t.only_requests(own(n, a), f"A{d}") for n, t in traces.items()}
    pred = {f"{n}[B{d}]": t.only_requests(own(n, b), f"B{d}") for n, t in traces.items()}
    shared, leaking = shared_text(cal.values(), pred)
    if leaking and not allow_leaks:
        raise ConfigError("traces", f"draw {d}: half B shares more than {LEAK_SHARE:.0%} of its text with half A "
                                    f"({'; '.join(leaking)}): not a hold-out (the same prompt twice, or sampled runs "
                                    "with one seed); --allow-leaks reports it anyway")
    mix, warnings = None, []
    if weigh:
        tag = next(iter(traces.values())).tag
        if unseen := {tag(q) for q in b} - {tag(q) for q in a}:
            warnings.append(f"draw {d}: half B holds requests of classes half A never ran "
                            f"({', '.join(sorted(unseen))}): that draw is calibrated on half A as it is, unweighted")
        else:
            mix = RequestMix.of_requests(tag(q) for q in b)
    interleaved = probe is None and all(interleaved_with(t, list(cal.values())) for t in pred.values())
    drifts = {**SHIPPED_DRIFTS, "session": NO_DRIFT} if interleaved else None
    profile, report = calibrate_traces(list(cal.values()), list(cal), name=f"holdout-A{d}", probe=probe, mix=mix,
                                       drifts=drifts)
    runs = predict_runs(profile, pred, interleaved, shared)
    for r in runs:
        r["draw"], r["run"] = d, r["trace"].rsplit("[", 1)[0]
        run_a, run_b = own(r["run"], a), own(r["run"], b)
        r["floor_err_pct"] = floor_err(traces[r["run"]], run_a, run_b)
        if weigh:
            r["mixed_floor_err_pct"] = mixed_floor_err(traces[r["run"]], run_a, run_b)
    return {"runs": runs, "choices": choices(runs, recommender(profile, pred)),
            "warnings": warnings + report.warnings, "leaks": leaking}
