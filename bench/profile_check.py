"""Check a calibrated profile against real runs on prompts it was not calibrated on: one table of predicted vs
measured tok/s, acceptance length and hit rate for AR, the best SD and the planned SSD.

    .venv/bin/python bench/profile_check.py runs/calibrate-here-X/profile.json --plan runs/calibrate-here-X/plan.json \\
        --prompt-offset 1 --prompt-stride 2 --num-prompts 12 --max-new-tokens 48 --repeats 2

(calibrate-here measures on the even prompts of the code set by default, so the odd ones are new to it.)

The three modes run in one process pair (models loaded once), after a warm-up job, interleaved
(AR, SD, SSD, AR, SD, SSD, ...); the table shows the median over the repeats and each repeat's value.
Predictions come from ssd_sim.plan.predict for the profile; SD uses the K the planner's best SD picks.
Traces go to --out. Needs the real models (`ssd-run fetch-models`); not part of CI.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ssd_runtime.models import ModelSpec, load_tokenizer, resolve_path
from ssd_runtime.prompts import encode, prompt_set
from ssd_runtime.run import Job, Session
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.plan import Plan, load_plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--plan", required=True, help="the SSD plan file to run (e.g. calibrate-here's plan.json)")
    ap.add_argument("--prompt-set", default="code")
    ap.add_argument("--prompt-offset", type=int, default=1)
    ap.add_argument("--prompt-stride", type=int, default=2)
    ap.add_argument("--num-prompts", type=int, default=12)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default="runs/profile-check")
    ap.add_argument("--json", help="also write the table as JSON here")
    args = ap.parse_args()

    profile = load_profile_file(args.profile)
    ssd = load_plan(args.plan).plan.replace(mode="ssd")
    request = PlanRequest(batch_size=ssd.batch_size, temperature=ssd.temperature)
    sd_k = make_plan(profile, request).sd.num_speculative_tokens
    plans = {"ar": Plan(mode="ar", batch_size=ssd.batch_size, temperature=ssd.temperature),
             "sd": Plan(mode="sd", num_speculative_tokens=sd_k, batch_size=ssd.batch_size,
                        temperature=ssd.temperature),
             "ssd": ssd}
    tpath, dpath = resolve_path("qwen-coder-1.5b", "target"), resolve_path("qwen-coder-0.5b", "draft")
    texts = prompt_set(args.prompt_set)[args.prompt_offset::args.prompt_stride][:args.num_prompts]
    ids = encode(texts, load_tokenizer(tpath), None)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    measured: dict[str, list] = {m: [] for m in plans}
    with Session(ModelSpec(path=str(tpath)), ModelSpec(path=str(dpath))) as session:
        session.run(Job(ssd.replace(mode="ssd"), ids[:1], 8))  # warm-up
        for rep in range(args.repeats):
            for mode, plan in plans.items():
                path = out / f"{mode}-r{rep}.jsonl"
                session.run(Job(plan.replace(mode=mode), ids, args.max_new_tokens, trace_path=str(path),
                                header={"prompt_source": f"prompt-set:{_selection(args)}"}))
                measured[mode].append(summarize(read_trace(path)))
    rows = _rows(profile, plans, measured)
    _print(rows, args, profile.name, sd_k)
    if args.json:
        Path(args.json).write_text(json.dumps({"profile": args.profile, "plan": args.plan, "prompts": _selection(args),
                                               "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
                                               "rows": rows}, indent=2))


def _rows(profile, plans: dict, measured: dict) -> list[dict]:
    rows = []
    for mode, plan in plans.items():
        pred, ms = predict(profile, plan), measured[mode]
        tok = [m.tok_s for m in ms]
        rows.append({"mode": mode, "K": plan.K if mode != "ar" else 0, "fan_out": list(plan.fan_out) if mode == "ssd" else None,
                     "predicted_tok_s": pred.per_seq_tok_s, "measured_tok_s": statistics.median(tok), "repeats": tok,
                     "error_pct": 100 * (pred.per_seq_tok_s / statistics.median(tok) - 1),
                     "predicted_accept_len": pred.tokens_per_round,
                     "measured_accept_len": statistics.median(m.mean_accept_len for m in ms),
                     "predicted_hit": pred.p_hit, "measured_hit": statistics.median(m.hit_rate for m in ms)
                     if mode == "ssd" else None,
                     "predicted_verify_ms": pred.verify_ms,
                     "measured_verify_ms": statistics.median(m.phase_ms["verify"] for m in ms)})
    return rows


def _selection(args) -> str:
    return f"{args.prompt_set}[{args.prompt_offset}::{args.prompt_stride}][:{args.num_prompts}]"


def _print(rows: list[dict], args, name: str, sd_k: int) -> None:
    t = Table(title=f"{name} on {_selection(args)} x {args.max_new_tokens} tokens, b = 1, median of {args.repeats} "
                    "interleaved repeats")
    for col in ("mode", "tok/s pred", "tok/s meas (repeats)", "err %", "acc. len pred / meas", "hit pred / meas",
                "verify ms pred / meas"):
        t.add_column(col, justify="left" if col == "mode" else "right")
    for r in rows:
        label = {"ar": "AR", "sd": f"SD K={sd_k}", "ssd": f"SSD K={r['K']} {r['fan_out']}"}[r["mode"]]
        hit = "-" if r["measured_hit"] is None else f"{r['predicted_hit']:.2f} / {r['measured_hit']:.2f}"
        t.add_row(label, f"{r['predicted_tok_s']:.2f}",
                  f"{r['measured_tok_s']:.2f} ({', '.join(f'{x:.2f}' for x in r['repeats'])})",
                  f"{r['error_pct']:+.1f}", f"{r['predicted_accept_len']:.2f} / {r['measured_accept_len']:.2f}", hit,
                  f"{r['predicted_verify_ms']:.0f} / {r['measured_verify_ms']:.0f}")
    Console(width=160).print(t)


if __name__ == "__main__":
    main()
