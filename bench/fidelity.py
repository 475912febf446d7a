"""Fidelity of the simulator: calibrate on some real traces, predict held-out runs, compare with measurements.

    .venv/bin/python bench/fidelity.py                    # traces/cpu-fp32-grid/manifest.json
    .venv/bin/python bench/fidelity.py --json             # {"runs": [...], "median_abs_err_pct", "worst_abs_err_pct"}

The manifest (schema ssd-traces-manifest/1, traces/README.md) lists which traces calibrate the profile
("calibrate") and which are held out ("holdout"), as file names in the manifest's folder;
each held-out run differs from every calibration run in K, fan-out, batch size, mode or temperature.
A held-out run is predicted by the discrete-event simulator with the calibrated profile, the run's own
plan and mode, and its workload replayed exactly (the runtime's static batches of plan.batch_size and each
sequence's decode length; no prefill): decode tok/s = decode tokens / decode time. Outcomes are drawn from
the calibrated acceptance model, never replayed from the held-out trace itself.
Goal (issue 5): median absolute tok/s error <= 5%, worst <= 10%.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from ssd_sim.io.trace import Trace, read_trace, summarize
from ssd_sim.model.calibrate import calibrate
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import Workload

ROOT = Path(__file__).resolve().parent.parent


def static_batches(trace: Trace) -> list[list[int]]:
    """Decode tokens of every sequence, grouped in the runtime's static batches of batch_size (seq order)."""
    tokens: dict[int, int] = {}
    for r in trace.rounds:
        for s in r["seqs"]:
            tokens[s["seq"]] = tokens.get(s["seq"], 0) + s["committed"]
    b = int(trace.header["batch_size"])
    ids = sorted(tokens)
    return [[tokens[i] for i in ids[j:j + b]] for j in range(0, len(ids), b)]


def predict(profile: Profile, trace: Trace, replicates: int = 20) -> dict:
    """Simulated decode tok/s, mean acceptance length and hit rate of the trace's run.

    The run is simulated `replicates` times (seeds 0..n-1) and pooled: a 64-token sequence has only ~20
    rounds, so one simulated run carries several % of sampling noise; the pool estimates the expectation.
    """
    plan = Plan.from_dict({**trace.plan, "mode": trace.mode, "batch_size": int(trace.header["batch_size"])})
    total_ms = tokens = rounds = 0.0
    accept_len = hit = hit_rounds = 0.0
    batches = static_batches(trace)
    for i, lengths in enumerate(batches * replicates):
        # +1: the simulator counts the first token (from prefill) in each output length
        wl = Workload("fixed", len(lengths), len(lengths), output_tokens=max(lengths) + 1, prompt_tokens=0,
                      output_lengths=tuple(n + 1 for n in lengths))
        m = simulate(profile, plan, mode=trace.mode, seed=i, workload=wl).metrics
        total_ms += m.sim_ms
        tokens += sum(lengths)
        rounds += m.rounds
        accept_len += m.mean_accept_len * m.rounds
        if m.hit_rate is not None:
            hit += m.hit_rate * m.rounds
            hit_rounds += m.rounds
    return {"tok_s": tokens / total_ms * 1e3, "mean_accept_len": accept_len / rounds,
            "hit_rate": hit / hit_rounds if hit_rounds else None}


def err_pct(pred: float | None, meas: float | None) -> float | None:
    if pred is None or meas is None or meas == 0:
        return None
    return 100.0 * (pred - meas) / meas


def run(manifest: Path) -> dict:
    spec = json.loads(manifest.read_text())
    base = manifest.parent
    cal = [base / f for f in spec["calibrate"]]
    profile, _ = calibrate(cal, name="fidelity")
    runs = []
    for name in spec["holdout"]:
        trace = read_trace(base / name)
        meas = summarize(trace)
        pred = predict(profile, trace)
        runs.append({
            "trace": name, "mode": trace.mode, "K": trace.plan["num_speculative_tokens"] if trace.mode != "ar" else 0,
            "batch_size": trace.header["batch_size"], "temperature": trace.plan["temperature"],
            "fan_out": trace.plan["fan_out"] if trace.mode == "ssd" else None,
            "measured_tok_s": meas.tok_s, "predicted_tok_s": pred["tok_s"],
            "tok_s_err_pct": err_pct(pred["tok_s"], meas.tok_s),
            "measured_mean_accept_len": meas.mean_accept_len, "predicted_mean_accept_len": pred["mean_accept_len"],
            "mean_accept_len_err_pct": err_pct(pred["mean_accept_len"], meas.mean_accept_len),
            "measured_hit_rate": meas.hit_rate, "predicted_hit_rate": pred["hit_rate"],
            "hit_rate_err_pct": err_pct(pred["hit_rate"], meas.hit_rate),
        })
    errs = [abs(r["tok_s_err_pct"]) for r in runs]
    return {"calibrate": spec["calibrate"], "runs": runs, "median_abs_err_pct": statistics.median(errs),
            "worst_abs_err_pct": max(errs)}


def print_table(res: dict) -> None:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    print(f"calibrated on {len(res['calibrate'])} traces; held-out runs:")
    head = ("trace", "mode", "K", "b", "T", "tok/s meas", "pred", "err %", "acc.len meas", "pred", "hit meas", "pred")
    rows = [(r["trace"], r["mode"], str(r["K"]), str(r["batch_size"]), f"{r['temperature']:g}",
             f(r["measured_tok_s"], ".3f"), f(r["predicted_tok_s"], ".3f"), f(r["tok_s_err_pct"], "+.1f"),
             f(r["measured_mean_accept_len"], ".2f"), f(r["predicted_mean_accept_len"], ".2f"),
             f(r["measured_hit_rate"], ".3f"), f(r["predicted_hit_rate"], ".3f")) for r in res["runs"]]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"tok/s: median |error| {res['median_abs_err_pct']:.1f}%, worst {res['worst_abs_err_pct']:.1f}% "
          "(goal: median <= 5%, worst <= 10%)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=ROOT / "traces" / "cpu-fp32-grid" / "manifest.json")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    res = run(args.manifest)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)


if __name__ == "__main__":
    main()
