"""Real-model benchmark: AR vs SD (each K) vs SSD (the planner's plan) on one target/draft pair, b = 1.

    .venv/bin/python bench/runtime_real.py                       # 8 code prompts x 64 tokens, fp32, K = 1..4
    .venv/bin/python bench/runtime_real.py --quantize int8 --preset qwen-coder-1.5b-0.5b-cpu-int8

All modes run in one process pair (models loaded once, every run warmed up first), greedy, same prompts, so the
outputs must be identical; the script checks it. A run the draft failed in (it finished autoregressively) is left
out as invalid. Each run happens once, in a fixed order, and tok/s is decode-only: this is the calibration bench;
for a head-to-head with transformers (interleaved repeats, medians, end to end) use bench/vs_baseline.py. Traces go to <traces>/[<tag>-]<run>-b1.jsonl and the table to
<traces>/[<tag>-]bench.json; <traces> defaults to the setup's folder, traces/cpu-<setup>-bench with <setup> =
fp32, int8draft, int8 (both models) or int8target (traces/README.md; list new files in the folder's manifest.json).
Not part of CI (needs `ssd-run fetch-models` and tens of minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ssd_runtime.models import ModelSpec, load_tokenizer, resolve_path
from ssd_runtime.prompts import encode, prompt_set
from ssd_runtime.run import Job, Session
from ssd_sim.plan.plan import Plan, load_plan


def planner_plan(preset: str) -> tuple[Plan, dict]:
    """The plan ssd-plan chooses for this machine's profile at b = 1, T = 0 (latency objective)."""
    from ssd_sim.model.presets import get_preset
    from ssd_sim.plan.planner import make_plan

    res = make_plan(get_preset(preset))
    pred = {"ar_tok_s": res.ar.per_seq_tok_s, "sd_tok_s": res.sd.per_seq_tok_s, "ssd_tok_s": res.ssd.per_seq_tok_s,
            "sd_K": res.sd.num_speculative_tokens}
    return res.plan, pred


def default_folder(target_quantize: str, draft_quantize: str) -> str:
    """traces/cpu-<setup>-bench: one folder per setup (traces/README.md)."""
    setup = {("none", "none"): "fp32", ("none", "int8"): "int8draft", ("int8", "int8"): "int8",
             ("int8", "none"): "int8target"}[(target_quantize, draft_quantize)]
    return f"traces/cpu-{setup}-bench"


def row(name: str, K: int, s) -> dict:  # records.Summary
    ph = s.phase_ms
    return {"run": name, "K": K, "tok_s": s.tok_s, "tokens": s.tokens, "rounds": s.rounds,
            "mean_accept_len": s.mean_accept_len, "acceptance_rate": s.acceptance_rate,
            "hit_rate": s.hit_rate, "round_ms": ph["round"], "verify_ms": ph["verify"],
            "target_wait_ms": ph["target_wait"], "draft_sd_ms": ph["draft_sd"], "draft_backup_ms": ph["draft_backup"],
            "draft_glue_ms": ph["draft_glue"], "draft_branch_ms": ph["draft_branch"]}


def print_table(rows: list[dict], ar_tok_s: float, sd_best: float) -> None:
    cols = ("run", "K", "tok/s", "xAR", "xSD*", "acc.len", "acc", "hit", "round", "verify", "wait", "draft", "glue",
            "branch")
    print(" | ".join(f"{c:>8}" for c in cols))
    for r in rows:
        hit = "-" if r["hit_rate"] is None else f"{r['hit_rate']:.2f}"
        draft = r["draft_sd_ms"] or r["draft_backup_ms"]
        vals = (r["run"], r["K"], f"{r['tok_s']:.3f}", f"{r['tok_s'] / ar_tok_s:.2f}", f"{r['tok_s'] / sd_best:.2f}",
                f"{r['mean_accept_len']:.2f}", f"{r['acceptance_rate']:.2f}", hit, f"{r['round_ms']:.0f}",
                f"{r['verify_ms']:.0f}", f"{r['target_wait_ms']:.0f}", f"{draft:.0f}", f"{r['draft_glue_ms']:.0f}",
                f"{r['draft_branch_ms']:.0f}")
        print(" | ".join(f"{v:>8}" for v in vals))
    print("(times in ms per round, means; xSD* = ratio to the best SD run; draft = SD drafting or SSD backup)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen-coder-1.5b")
    ap.add_argument("--draft", default="qwen-coder-0.5b")
    ap.add_argument("--quantize", choices=("none", "int8"), help="both models (shorthand)")
    ap.add_argument("--target-quantize", choices=("none", "int8"), default="none",
                    help="int8 target: dynamic activation scales make its logits depend on the other tokens of a "
                         "forward, so SD/SSD outputs can differ from AR at near-ties")
    ap.add_argument("--draft-quantize", choices=("none", "int8"), default="none", help="never affects exactness")
    ap.add_argument("--preset", default="qwen-coder-1.5b-0.5b-cpu", help="profile the SSD plan is made for")
    ap.add_argument("--plan", help="use this plan file for SSD instead of the planner's choice")
    ap.add_argument("--extra-plan", action="append", default=[], metavar="NAME=FILE",
                    help="also run SSD with this plan file, reported as ssd-NAME (repeatable)")
    ap.add_argument("--num-prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--sd-ks", default="1,2,3,4", help="SD runs, one per K")
    ap.add_argument("--skip-ar", action="store_true")
    ap.add_argument("--tag", default="", help="file name prefix inside the folder (e.g. a second run: cal)")
    ap.add_argument("--traces", help="output folder (default traces/cpu-<setup>-bench, from the quantisation)")
    args = ap.parse_args(argv)

    if args.quantize:
        args.target_quantize = args.draft_quantize = args.quantize
    tpath, dpath = resolve_path(args.target, "target"), resolve_path(args.draft, "draft")
    prompts = encode(prompt_set("code")[:args.num_prompts], load_tokenizer(tpath))
    if args.plan:
        ssd_plan, predicted = load_plan(args.plan).plan, {}
    else:
        ssd_plan, predicted = planner_plan(args.preset)
    ssd_plan = ssd_plan.replace(batch_size=1, temperature=0.0, mode="ssd")
    print(f"SSD plan: {json.dumps(ssd_plan.to_dict())}")
    if predicted:
        print(f"planner prediction ({args.preset}): {json.dumps(predicted)}")
    out = Path(args.traces or default_folder(args.target_quantize, args.draft_quantize))
    prefix = f"{args.tag}-" if args.tag else ""
    t0 = time.time()
    with Session(ModelSpec(path=str(tpath), quantize=args.target_quantize),
                 ModelSpec(path=str(dpath), quantize=args.draft_quantize)) as session:
        print(f"models loaded in {time.time() - t0:.0f} s; warming up every run", flush=True)
        runs = [] if args.skip_ar else [("ar", 0, Plan(batch_size=1), "ar")]
        runs += [(f"sd-k{k}", k, Plan(num_speculative_tokens=k, batch_size=1), "sd")
                 for k in (int(x) for x in args.sd_ks.split(",") if x.strip())]
        runs.append(("ssd", ssd_plan.K, ssd_plan, "ssd"))
        for extra in args.extra_plan:
            name, _, path = extra.partition("=")
            plan = load_plan(path).plan.replace(batch_size=1, temperature=0.0, mode="ssd")
            print(f"ssd-{name} plan: {json.dumps(plan.to_dict())}")
            runs.append((f"ssd-{name}", plan.K, plan, "ssd"))
        for _, _, plan, mode in runs:
            session.run(Job(plan.replace(mode=mode), prompts[:1], 4))
        rows, outputs = [], {}
        for name, K, plan, mode in runs:
            t = time.time()
            path = out / f"{prefix}{name}-b1.jsonl"
            res = session.run(Job(plan.replace(mode=mode), prompts, args.max_new_tokens, trace_path=str(path),
                                  header={"prompt_source": "prompt-set:code", "bench": "bench/runtime_real.py"}))
            if res.faults or any(r.fallback for r in res.rounds):  # finished as AR: not a result of `mode`
                print(f"{name}: INVALID, the draft failed ({'; '.join(res.faults)})", flush=True)
                continue
            outputs[name] = res.outputs
            rows.append(row(name, K, res.summary))
            print(f"{name}: {res.summary.tok_s:.3f} tok/s ({time.time() - t:.0f} s) -> {path}", flush=True)
    same = all(o == next(iter(outputs.values())) for o in outputs.values())
    sd_rows = [r for r in rows if r["run"].startswith("sd")]
    sd_best = max(r["tok_s"] for r in sd_rows) if sd_rows else float("nan")
    ar_tok_s = next((r["tok_s"] for r in rows if r["run"] == "ar"), float("nan"))
    print(f"\n{args.num_prompts} code prompts x {args.max_new_tokens} new tokens, b = 1, greedy, target "
          f"{args.target_quantize}, draft {args.draft_quantize}; outputs identical across runs: {same}")
    print_table(rows, ar_tok_s, sd_best)
    (out / f"{prefix}bench.json").write_text(json.dumps(
        {"rows": rows, "ssd_plan": ssd_plan.to_dict(), "predicted": predicted, "outputs_identical": same,
         "num_prompts": args.num_prompts, "max_new_tokens": args.max_new_tokens,
         "quantize": {"target": args.target_quantize, "draft": args.draft_quantize},
         "argv": sys.argv[1:]}, indent=2) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
