"""Record a grid of real-model runs (AR / SD / SSD, several K, fan-outs, batch sizes, temperatures) as traces.

    .venv/bin/python bench/trace_grid.py bench/grids/cpu.json            # -> traces/cpu-fp32-grid/<name>.jsonl
    .venv/bin/python bench/trace_grid.py bench/grids/cpu.json --only planner-k2

The grid file is JSON: {"out": "traces/cpu-fp32-grid", "num_prompts": 8, "max_new_tokens": 64, "runs": [{"name", "mode",
plus any Plan field (num_speculative_tokens, fan_out, fan_out_miss, saguaro_c, backup, batch_size,
temperature, ...) or "plan_file": a plan written by ssd-plan}]}. "prompt_set" (a built-in set: code, chat, pool, pool96,
...) or "prompts_file" (a JSONL prompt file as ssd-run --prompts reads it, with its "tag"s; a path from the repository
root, as "out" is, which the traces' prompt_source records as ssd-run does), "prompt_offset",
"prompt_stride" (2 with offsets 0 / 1: the even / odd prompts), "num_prompts", "max_new_tokens", "log_topn" (ssd-run
--log-topn; 0 if absent) and "seed" (ssd-run --seed; 0 if absent: give runs at T > 0 their own, so that no two share
sampled text) may be set grid-wide or per run. All runs share one process pair (models loaded once, one warm-up job).
"interleave": N (grid-wide) cuts every run's prompts into N consecutive chunks and runs chunk 1 of every run, then
chunk 2 of every run, ...: a host that drifts over the session then drifts under every configuration alike, where
one run after another gives the first and the last runs different minutes (the pool: ~10% between them). Each run's
chunks are merged into its one trace (seqs and rounds renumbered in prompt order, no summary line); the chunk files
(<out>/chunks/) are removed once every run is merged. Existing traces are kept unless
--force. Prints one line per run and writes <out>/grid.json with the summaries. A new trace must also be
listed in <out>/manifest.json and described in <out>/README.md (tests/test_traces.py checks it).
Not part of CI: needs `ssd-run fetch-models` and ~2-3 minutes per run on this machine's 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from ssd_runtime.cli import slice_label
from ssd_runtime.models import ModelSpec, load_tokenizer, resolve_path
from ssd_runtime.prompts import encode, load_prompts, prompt_set
from ssd_runtime.run import Job, Session
from ssd_sim.io.sanity import stall_warning
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.plan.plan import Plan, load_plan

RUN_KEYS = ("prompt_set", "prompts_file", "prompt_offset", "prompt_stride", "num_prompts", "max_new_tokens", "log_topn", "seed")  # per run or grid-wide


def run_prompts(grid: dict, spec: dict, tokenizer) -> tuple[list[list[int]], str, list[str]]:
    """Token ids of a run's prompts, their label, e.g. 'prompt-set:code[8:16]', and their classes (request_tags)."""
    file = spec.get("prompts_file", grid.get("prompts_file"))
    name = spec.get("prompt_set", grid.get("prompt_set", "code"))
    off = int(spec.get("prompt_offset", grid.get("prompt_offset", 0)))
    n = int(spec.get("num_prompts", grid.get("num_prompts", 8)))
    stride = int(spec.get("prompt_stride", grid.get("prompt_stride", 1)))
    every = load_prompts(Path(file)) if file else prompt_set(name)
    index = list(range(off, off + n * stride, stride))
    if index[-1] >= len(every):
        raise SystemExit(f"{spec['name']}: prompts {index[0]}..{index[-1]} but {file or name} has {len(every)}")
    chosen = [every[i] for i in index]
    label = (file + (slice_label(index) if len(index) < len(every) else "")) if file else (
        f"prompt-set:{name}" + slice_label(index))
    return encode(chosen, tokenizer), label, [p.tag or "" for p in chosen]


def chunks(n: int, parts: int) -> list[range]:
    """n prompts cut into `parts` consecutive chunks of near-equal size (the first ones one larger)."""
    size, extra = divmod(n, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + size + (i < extra)
        if stop > start:
            out.append(range(start, stop))
        start = stop
    return out


def merge_chunks(parts: list[tuple[Path, int]], path: Path, header: dict) -> None:
    """One trace from a run's chunk traces [(file, index of its first prompt in the run)]: the first chunk's header
    updated with `header` and counting every chunk's prompts, every round renumbered and its seqs shifted to the
    run's prompt order; no summary line (the merged run's metrics come from its rounds: ssd_sim.io.trace.summarize)."""
    lines, rounds, prompts = [""], 0, 0
    for i, (chunk, offset) in enumerate(parts):
        recs = [json.loads(line) for line in chunk.read_text().splitlines() if line.strip()]
        prompts += int(recs[0]["num_prompts"])
        if i == 0:
            head = {**{k: v for k, v in recs[0].items() if k != "chunk"}, **header}
        for rec in recs[1:]:
            if rec.get("type") != "round":
                continue
            rec["round"] = rounds
            rounds += 1
            for q in rec["seqs"]:
                q["seq"] += offset
            lines.append(json.dumps(rec, separators=(",", ":")))
    head["num_prompts"] = prompts
    lines[0] = json.dumps(head)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


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
            warm, _, _ = run_prompts(grid, todo[0], tokenizer)
            session.run(Job(Plan(num_speculative_tokens=2), warm[:1], 4))  # warm-up
            if int(grid.get("interleave", 1)) > 1:
                interleaved(session, grid, todo, tokenizer, out, summaries)
            else:
                for spec in todo:
                    one_run(session, grid, spec, tokenizer, out, summaries)
    return 0


def job_for(grid: dict, spec: dict, prompts: list, path: Path, header: dict) -> tuple[Job, Plan, str]:
    """The Job of one grid run (or one chunk of it) writing its trace to `path`."""
    plan, mode = run_plan(spec)
    tokens = int(spec.get("max_new_tokens", grid.get("max_new_tokens", 64)))
    return Job(plan.replace(mode=mode), prompts, tokens, trace_path=str(path),
               seed=int(spec.get("seed", grid.get("seed", 0))), log_topn=int(spec.get("log_topn", grid.get("log_topn", 0))),
               header={"bench": "bench/trace_grid.py", "grid_run": spec["name"], **header}), plan, mode


def record(summaries: dict, out: Path, spec: dict, plan: Plan, mode: str, s, wall_s: float, rounds) -> None:
    """Add a run's summary to <out>/grid.json and print its line, and a warning when its rounds stalled."""
    summaries[spec["name"]] = {"plan": plan.to_dict(), "mode": mode, "tok_s": s.tok_s,
                               "mean_accept_len": s.mean_accept_len, "hit_rate": s.hit_rate, "wall_s": wall_s}
    (out / "grid.json").write_text(json.dumps(summaries, indent=2) + "\n")
    hit = "-" if s.hit_rate is None else f"{s.hit_rate:.2f}"
    print(f"{spec['name']:28s} {s.tok_s:6.3f} tok/s  acc.len {s.mean_accept_len:.2f}  hit {hit}  ({wall_s:.0f} s)",
          flush=True)
    if stalled := stall_warning(rounds, spec["name"]):
        print(f"  warning: {stalled}", flush=True)


def one_run(session, grid: dict, spec: dict, tokenizer, out: Path, summaries: dict) -> None:
    """A grid run over all its prompts in one job."""
    prompts, label, tags = run_prompts(grid, spec, tokenizer)
    job, plan, mode = job_for(grid, spec, prompts, out / f"{spec['name']}.jsonl",
                              {"prompt_source": label, **({"request_tags": tags} if any(tags) else {})})
    t = time.time()
    result = session.run(job)
    record(summaries, out, spec, plan, mode, result.summary, time.time() - t, result.rounds)


def interleaved(session, grid: dict, todo: list[dict], tokenizer, out: Path, summaries: dict) -> None:
    """Every run cut into grid["interleave"] chunks of its prompts, run chunk by chunk across the runs (module
    docstring), then merged into one trace per run."""
    (out / "chunks").mkdir(exist_ok=True)
    runs = {spec["name"]: (spec, *run_prompts(grid, spec, tokenizer)) for spec in todo}
    parts: dict[str, list[tuple[Path, int]]] = {name: [] for name in runs}
    walls = dict.fromkeys(runs, 0.0)
    n = len(next(iter(runs.values()))[1])
    for c, rng in enumerate(chunks(n, int(grid["interleave"]))):
        for name, (spec, prompts, label, _) in runs.items():
            path = out / "chunks" / f"{name}.{c}.jsonl"
            job, _, _ = job_for(grid, spec, [prompts[i] for i in rng], path, {"prompt_source": label, "chunk": c})
            t = time.time()
            session.run(job)
            walls[name] += time.time() - t
            parts[name].append((path, rng.start))
            print(f"  chunk {c} of {name}: prompts {rng.start}..{rng.stop - 1} ({time.time() - t:.0f} s)", flush=True)
    for name, (spec, _, label, tags) in runs.items():
        path = out / f"{name}.jsonl"
        merge_chunks(parts[name], path, {"prompt_source": label, "interleave": int(grid["interleave"]),
                                         **({"request_tags": tags} if any(tags) else {})})
        plan, mode = run_plan(spec)
        merged = read_trace(path)
        record(summaries, out, spec, plan, mode, summarize(merged), walls[name], merged.rounds)
    shutil.rmtree(out / "chunks")


if __name__ == "__main__":
    raise SystemExit(main())
