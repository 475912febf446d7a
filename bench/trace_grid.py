"""Record a grid of real-model runs (AR / SD / SSD, several K, fan-outs, batch sizes, temperatures) as traces.

    .venv/bin/python bench/trace_grid.py bench/grids/cpu.json            # -> traces/cpu-fp32-grid/<name>.jsonl
    .venv/bin/python bench/trace_grid.py bench/grids/cpu.json --only planner-k2

The grid file is JSON: {"out": "traces/cpu-fp32-grid", "num_prompts": 8, "max_new_tokens": 64, "runs": [{"name", "mode",
plus any Plan field (num_speculative_tokens, fan_out, fan_out_miss, saguaro_c, backup, batch_size,
temperature, ...) or "plan_file": a plan written by ssd-plan}]}. "prompt_set" (code | chat | pool), "prompt_offset",
"prompt_stride" (2 with offsets 0 / 1: the even / odd prompts), "num_prompts", "max_new_tokens", "log_topn" (ssd-run
--log-topn; 0 if absent) and "seed" (ssd-run --seed; 0 if absent: give runs at T > 0 their own, so that no two share
sampled text) may be set grid-wide or per run. All runs share one process pair (models loaded once, one warm-up job). Existing traces are kept unless
--force. Prints one line per run and writes <out>/grid.json with the summaries. A new trace must also be
listed in <out>/manifest.json and described in <out>/README.md (tests/test_traces.py checks it).
Not part of CI: needs `ssd-run fetch-models` and ~2-3 minutes per run on this machine's 2 cores.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ssd_runtime.cli import slice_label
from ssd_runtime.models import ModelSpec, load_tokenizer, resolve_path
from ssd_runtime.prompts import encode, prompt_set
from ssd_runtime.run import Job, Session
from ssd_sim.plan.plan import Plan, load_plan

RUN_KEYS = ("prompt_set", "prompt_offset", "prompt_stride", "num_prompts", "max_new_tokens", "log_topn", "seed")  # per run or grid-wide


def run_prompts(grid: dict, spec: dict, tokenizer) -> tuple[list[list[int]], str]:
    """Token ids of a run's prompts and their label, e.g. 'prompt-set:code[8:16]'."""
    name = spec.get("prompt_set", grid.get("prompt_set", "code"))
    off = int(spec.get("prompt_offset", grid.get("prompt_offset", 0)))
    n = int(spec.get("num_prompts", grid.get("num_prompts", 8)))
    stride = int(spec.get("prompt_stride", grid.get("prompt_stride", 1)))
    every = prompt_set(name)
    index = list(range(off, off + n * stride, stride))
    if index[-1] >= len(every):
        raise SystemExit(f"{spec['name']}: prompts {index[0]}..{index[-1]} but the {name} set has {len(every)}")
    return encode([every[i] for i in index], tokenizer), f"prompt-set:{name}" + slice_label(index)


def run_plan(spec: dict) -> tuple[Plan, str]:
    """The Plan and mode of one grid entry."""
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in spec.items()
              if k not in ("name", "mode", "plan_file", *RUN_KEYS)}
    base = load_plan(spec["plan_file"]).plan.to_dict() if "plan_file" in spec else {}
    base = {k: (tuple(v) if isinstance(v, list) else v) for k, v in base.items()}
    if base.get("backup_threshold") is None:
        base.pop("backup_threshold", None)
    mode = spec.get("mode", "ssd")
    return Plan(**{**base, **fields, "mode": mode}), mode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("grid", type=Path)
    ap.add_argument("--only", action="append", help="run only these names (repeatable)")
    ap.add_argument("--force", action="store_true", help="re-run runs whose trace exists")
    args = ap.parse_args(argv)
    grid = json.loads(args.grid.read_text())
    out = Path(grid.get("out", "traces/cpu-fp32-grid"))
    out.mkdir(parents=True, exist_ok=True)
    runs = [r for r in grid["runs"] if not args.only or r["name"] in args.only]
    todo = [r for r in runs if args.force or not (out / f"{r['name']}.jsonl").exists()]
    tpath, dpath = resolve_path(grid.get("target", "qwen-coder-1.5b"), "target"), resolve_path(
        grid.get("draft", "qwen-coder-0.5b"), "draft")
    tokenizer = load_tokenizer(tpath)
    summaries = json.loads((out / "grid.json").read_text()) if (out / "grid.json").exists() else {}
    if todo:
        with Session(ModelSpec(path=str(tpath)), ModelSpec(path=str(dpath))) as session:
            warm, _ = run_prompts(grid, todo[0], tokenizer)
            session.run(Job(Plan(num_speculative_tokens=2), warm[:1], 4))  # warm-up
            for spec in todo:
                plan, mode = run_plan(spec)
                prompts, label = run_prompts(grid, spec, tokenizer)
                path = out / f"{spec['name']}.jsonl"
                t = time.time()
                tokens = int(spec.get("max_new_tokens", grid.get("max_new_tokens", 64)))
                res = session.run(Job(plan.replace(mode=mode), prompts, tokens, trace_path=str(path),
                                      seed=int(spec.get("seed", grid.get("seed", 0))),
                                      log_topn=int(spec.get("log_topn", grid.get("log_topn", 0))),
                                      header={"prompt_source": label, "bench": "bench/trace_grid.py",
                                              "grid_run": spec["name"]}))
                s = res.summary
                summaries[spec["name"]] = {"plan": plan.to_dict(), "mode": mode, "tok_s": s.tok_s,
                                           "mean_accept_len": s.mean_accept_len, "hit_rate": s.hit_rate,
                                           "wall_s": time.time() - t}
                (out / "grid.json").write_text(json.dumps(summaries, indent=2) + "\n")
                hit = "-" if s.hit_rate is None else f"{s.hit_rate:.2f}"
                print(f"{spec['name']:28s} {s.tok_s:6.3f} tok/s  acc.len {s.mean_accept_len:.2f}  hit {hit}  "
                      f"({time.time() - t:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
