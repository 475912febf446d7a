"""Bad inputs through the planning CLIs, each in its own process: exit status, stderr lines, traceback, files touched.

    .venv/bin/python bench/bad_inputs.py            # every case, a markdown table
    .venv/bin/python bench/bad_inputs.py --only fan  # cases whose name contains "fan"

CASES must end with exit status 2, exactly one line on stderr, no traceback and no file created or changed
(tests/cli/test_bad_inputs.py runs the same CASES in-process); WARN_CASES (valid, but almost certainly not meant)
with exit status 0 and a one-line warning, no input changed; RUN_CASES and CONCURRENT run ssd-run on tiny random
models (outputs over inputs, one-token requests, vanishing temperatures, two runs at once). The runtime's faults and
signals are tested in tests/runtime/test_supervision.py.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "traces" / "cpu-fp32-grid" / "ssd-k2-f001-b1-t0.jsonl"
AR_TRACE = ROOT / "traces" / "cpu-fp32-grid" / "ar-b1-t0.jsonl"
PLAN = "--preset llama70b-1b-h100"
EVEN = ROOT / "traces" / "cpu-fp32-halves" / "cal-sd-k4-t0.jsonl"  # 12 even code prompts
ODD = ROOT / "traces" / "cpu-fp32-halves" / "pred-sd-k3-t0.jsonl"  # 12 odd ones
B2_TRACE = ROOT / "traces" / "cpu-fp32-splits" / "sd-k3-b2-t0.jsonl"

# (name, command, arguments); {x} are files made by make_files in a scratch folder
CASES: list[tuple[str, str, str]] = [
    # malformed files as plan / profile / trace / replay
    *[(f"{kind} as {role}", cmd, f"{args} {{{kind}}}") for kind in ("binary", "utf16", "folder", "deep", "bigint",
                                                                       "empty", "device", "missing", "array")
      for role, cmd, args in (("plan", "ssd-plan", "--plan"), ("profile", "ssd-plan", "--profile"),
                              ("sim plan", "ssd-sim", f"{PLAN} --plan"), ("trace", "ssd-plan calibrate", "-o {out}"),
                              ("replay", "ssd-sim", "--profile {profile} --replay"))],
    ("profile temperature NaN", "ssd-plan", "--profile {nan_temp}"),
    ("profile latency is a list", "ssd-plan", "--profile {latency_list}"),
    ("profile with all latencies 0", "ssd-plan", "--profile {zero_latency}"),
    ("plan fan_out [0,0,0,1e9]", "ssd-plan", f"{PLAN} --plan {{huge_fan}}"),
    ("plan fan_out of floats", "ssd-plan", f"{PLAN} --plan {{float_fan}}"),
    # flags beyond the physics
    ("--fan-out 1000000", "ssd-plan", f"{PLAN} --fan-out 1000000"),
    ("--fan-out 0,0,0,5000", "ssd-plan", f"{PLAN} -k 3 --fan-out 0,0,0,5000"),
    ("--fan-out 1,,2", "ssd-plan", f"{PLAN} --fan-out 1,,2"),
    ("--fan-out -1", "ssd-plan", f"{PLAN} --fan-out=-1"),
    ("--fan-out-miss 1,1 with -k 3", "ssd-plan", f"{PLAN} -k 3 --fan-out-miss 1,1"),
    ("-k 0", "ssd-plan", f"{PLAN} -k 0"),
    ("-k 80", "ssd-plan", f"{PLAN} -k 80"),
    ("-k 5000-digit", "ssd-plan", f"{PLAN} -k {'9' * 5000}"),
    ("--max-k 80", "ssd-plan", f"{PLAN} --max-k 80"),
    ("--budget-cap 0", "ssd-plan", f"{PLAN} --budget-cap 0"),
    ("-b 10000", "ssd-plan", f"{PLAN} -b 10000"),
    ("-t nan", "ssd-plan", f"{PLAN} -t nan"),
    ("-t 1e9", "ssd-plan", f"{PLAN} -t 1e9"),
    ("--saguaro-c 2", "ssd-plan", f"{PLAN} --saguaro-c 2"),
    ("--draft-devices 1000000", "ssd-plan", f"{PLAN} --draft-devices 1000000"),
    ("--simulate 1e11", "ssd-plan", f"{PLAN} --simulate 1e11"),
    ("--seed -1 (plan)", "ssd-plan", f"{PLAN} --simulate 10 --seed=-1"),
    ("--risk 0.9", "ssd-plan", f"{PLAN} --risk 0.9"),
    # the batch-size sweep (issue 30): every entry a whole number of sequences in 1..4096, none empty
    ("--batch-sizes 0", "ssd-plan", f"{PLAN} --batch-sizes 0 -o {{out}}"),
    ("--batch-sizes 1,-4", "ssd-plan", f"{PLAN} --batch-sizes=1,-4 -o {{out}}"),
    ("--batch-sizes 1,2.5", "ssd-plan", f"{PLAN} --batch-sizes 1,2.5 -o {{out}}"),
    ("--batch-sizes empty", "ssd-plan", f"{PLAN} --batch-sizes= -o {{out}}"),
    ("--batch-sizes 1,,4", "ssd-plan", f"{PLAN} --batch-sizes 1,,4 -o {{out}}"),
    ("--batch-sizes eight", "ssd-plan", f"{PLAN} --batch-sizes eight -o {{out}}"),
    ("--batch-sizes 5000", "ssd-plan", f"{PLAN} --batch-sizes 1,5000 -o {{out}}"),
    ("--batch-sizes with --emit", "ssd-plan", f"{PLAN} --batch-sizes 1,2 --emit vllm"),
    ("unknown preset", "ssd-plan", "--preset nope"),
    # a pair from specs that cannot hold its weights or one sequence's KV cache
    ("--gpu file without memory_gb", "ssd-plan", "--target Llama-3.1-8B --draft Llama-3.2-1B --gpu {gpu_no_memory} "
                                                 "-o {out}"),
    ("draft too big for its GPU", "ssd-plan", "--target Llama-3.1-8B --draft Llama-3.1-70B --gpu h100 --tp 4 -o {out}"),
    ("--context 1000000 on 4x H100", "ssd-plan", "--target Llama-3.1-70B --draft Llama-3.2-1B --gpu h100 --tp 4 "
                                                 "--context 1000000 -o {out}"),
    ("no profile", "ssd-plan", ""),
    ("--tokens 1e10", "ssd-sim", f"{PLAN} --tokens 1e10"),
    ("--tokens 10000000000", "ssd-sim", f"{PLAN} --tokens 10000000000"),
    ("--num-requests 1e9", "ssd-sim", f"{PLAN} --workload poisson --rate 1 --num-requests 1000000000"),
    ("--seed -1 (sim)", "ssd-sim", f"{PLAN} --seed=-1"),
    ("--workload arrivals", "ssd-sim", f"{PLAN} --workload arrivals"),
    ("--replay an AR trace into SSD", "ssd-sim", f"--profile {{profile}} -k 2 --fan-out 0,0,1 --replay {AR_TRACE}"),
    ("--replay accepted > K", "ssd-sim", "--profile {profile} -k 2 --fan-out 0,0,1 --replay {accepted_gt_k}"),
    ("calibrate accepted > K", "ssd-plan calibrate", "{accepted_gt_k} -o {out}"),
    ("calibrate negative timing", "ssd-plan calibrate", "{nan_timing} -o {out}"),
    # outputs that cannot be written (checked before the work)
    ("-o under a file", "ssd-plan", f"{PLAN} -o {{binary}}/plan.json"),
    ("-o a folder", "ssd-plan", f"{PLAN} -o {{folder}}"),
    ("-o in /proc", "ssd-plan", f"{PLAN} -o /proc/plan.json"),
    ("-o a 300-byte name", "ssd-plan", f"{PLAN} -o {'a' * 300}.json"),
    ("--chrome-trace a 300-byte name", "ssd-sim", f"{PLAN} --tokens 4 --chrome-trace {'a' * 300}.json"),
    ("--chrome-trace under a file", "ssd-sim", f"{PLAN} --chrome-trace {{binary}}/t.json"),
    ("calibrate -o a folder", "ssd-plan calibrate", f"{TRACE} -o {{folder}}"),
    # outputs over inputs, by any spelling, symlink or hard link (refused before the work; ssd_sim.io.outputs)
    ("calibrate -o its trace", "ssd-plan calibrate", "{trace} -o {trace}"),
    ("calibrate -o a hard link of its trace", "ssd-plan calibrate", "{trace} {ar} -o {ar_hard}"),
    ("calibrate -o its trace via ..", "ssd-plan calibrate", "{trace} -o {folder}/../trace.jsonl"),
    ("calibrate -o a symlink to its probe", "ssd-plan calibrate", "{trace} --probe {profile} -o {profile_sym}"),
    ("plan -o its profile", "ssd-plan", "--profile {profile} -o {profile}"),
    ("plan -o its plan", "ssd-plan", f"{PLAN} --plan {{plan}} -o {{plan}}"),
    ("plan -o its acceptance source", "ssd-plan", f"{PLAN} --acceptance-from {{profile}} -o {{profile_sym}}"),
    ("sim --chrome-trace its plan", "ssd-sim", f"{PLAN} --plan {{plan}} --chrome-trace {{plan}}"),
    ("sim --chrome-trace its replay", "ssd-sim", "--profile {profile} -k 2 --fan-out 0,0,1 --replay {trace} "
                                                  "--chrome-trace {trace_sym}"),
    ("workload -o its metrics", "ssd-plan workload", "{metrics} --engine vllm -t 0 -o {metrics}"),
    # hold-out checks (ssd_sim.sim.holdout)
    ("holdout -o its trace", "ssd-plan holdout", "{trace} -o {trace}"),
    ("holdout of runs over other prompts", "ssd-plan holdout", f"{EVEN} {ODD}"),
    ("holdout of a batched run", "ssd-plan holdout", f"{B2_TRACE}"),
    ("holdout --draws 0", "ssd-plan holdout", f"{EVEN} --draws 0"),
    ("holdout --seed -1", "ssd-plan holdout", f"{EVEN} --seed -1"),
    ("holdout of a binary file", "ssd-plan holdout", "{binary}"),
    # capacity planning (ssd_sim.sim.capacity)
    ("capacity without a target", "ssd-plan capacity", f"{PLAN} --rate 5"),
    ("capacity without a load", "ssd-plan capacity", f"{PLAN} --tpot-ms 10"),
    ("capacity --rate and --arrivals", "ssd-plan capacity", f"{PLAN} --tpot-ms 10 --rate 5 --arrivals {{arrivals_epoch}}"),
    ("capacity --tpot-ms 0", "ssd-plan capacity", f"{PLAN} --tpot-ms 0 --rate 5"),
    ("capacity --ttft-pct 101", "ssd-plan capacity", f"{PLAN} --ttft-ms 100 --ttft-pct 101 --rate 5"),
    ("capacity --modes sd,turbo", "ssd-plan capacity", f"{PLAN} --tpot-ms 10 --rate 5 --modes sd,turbo"),
    ("capacity --batch-caps 8,4", "ssd-plan capacity", f"{PLAN} --tpot-ms 10 --rate 5 --batch-caps 8,4"),
    ("capacity caps above SD's KV memory", "ssd-plan capacity", "--target Llama-3.1-8B --draft Llama-3.2-1B --gpu h100 "
                                                                "--context 4096 --modes sd --batch-caps 96 --tpot-ms 10 "
                                                                "--rate 5 -o {out}"),
    ("capacity --ttft-ms below one prefill", "ssd-plan capacity", f"{PLAN} --rate 10 --ttft-ms 1 -o {{out}}"),
    ("capacity -o its profile", "ssd-plan capacity", "--profile {profile} --tpot-ms 10 --rate 5 -o {profile_sym}"),
    # arrival times the float clock cannot hold, and infinity however it is spelled where it means nothing
    ("arrivals at 1e308 ms", "ssd-sim", f"{PLAN} --workload arrivals --arrivals {{arrivals_huge}}"),
    ("arrivals at 5e12 ms (past 2**42)", "ssd-sim", f"{PLAN} --workload arrivals --arrivals {{arrivals_past}}"),
    ("arrivals 'Infinity' as a string", "ssd-sim", f"{PLAN} --workload arrivals --arrivals {{arrivals_inf}}"),
    ("--rate 1e-6 over 1e6 requests", "ssd-sim", f"{PLAN} --workload poisson --rate 1e-6 --num-requests 1000000"),
    ("-k Infinity", "ssd-plan", f"{PLAN} -k Infinity"),
    ("--tokens 1e999", "ssd-sim", f"{PLAN} --tokens 1e999"),
    ("-t Infinity", "ssd-plan", f"{PLAN} -t Infinity"),
    ("-t +INF", "ssd-plan", f"{PLAN} -t +INF"),
    ("--backup-threshold=-Infinity", "ssd-plan", f"{PLAN} --backup adaptive --backup-threshold=-Infinity"),
    ("--rate Infinity", "ssd-sim", f"{PLAN} --workload poisson --rate Infinity"),
    ("plan temperature 'inf'", "ssd-plan", f"{PLAN} --plan {{plan_temp_inf}}"),
    ("plan temperature Infinity", "ssd-plan", f"{PLAN} --plan {{plan_temp_inf_literal}}"),
    ("profile fixed_ms 'Infinity'", "ssd-plan", "--profile {profile_inf}"),
    ("profile max_batch_size 1e999", "ssd-plan", "--profile {profile_batch_inf}"),
    # knobs the mode never reads, files with a key twice, traces joined, absurd GPU numbers (2026-12-06 fuzz sweep)
    ("sim --mode ssd-fast --backup jit", "ssd-sim", f"{PLAN} --mode ssd-fast --backup jit --tokens 8"),
    ("sim --mode ar -k 3", "ssd-sim", f"{PLAN} --mode ar -k 3 --tokens 8"),
    ("plan fan_out []", "ssd-plan", f"{PLAN} --plan {{empty_fan}}"),
    ("plan with a key twice", "ssd-plan", f"{PLAN} --plan {{plan_key_twice}}"),
    ("two traces joined", "ssd-plan calibrate", "{joined} -o {out}"),
    ("--gpu file bf16_tflops 1e-308", "ssd-plan", "--target Llama-3.1-8B --draft Llama-3.2-1B --gpu {gpu_tiny}"),
]

# Valid input almost certainly not meant (ssd_sim.io.sanity): (name, command, arguments, text the `warning:` line
# must contain); exit 0, and no existing file changed
WARN_CASES: list[tuple[str, str, str, str]] = [
    ("calibrate the same trace twice", "ssd-plan calibrate", "{trace} {trace} -o {warn_out1}", "is given twice"),
    ("calibrate a trace and its copy", "ssd-plan calibrate", "{trace} {trace_copy} -o {warn_out2}",
     "has the same records as"),
    ("calibrate a trace and a symlink to it", "ssd-plan calibrate", "{trace} {trace_sym} -o {warn_out3}",
     "counted once"),
    ("--rate 1e-6 for 8 requests", "ssd-sim", f"{PLAN} --workload poisson --rate 1e-6 --num-requests 8 --tokens 16",
     "spaces 8 requests over ~93 days"),
    ("--rate 0.01 for 100 short requests", "ssd-sim",
     f"{PLAN} --workload poisson --rate 0.01 --num-requests 100 --tokens 16", "requests per second"),
    ("arrivals in epoch ms", "ssd-sim", f"{PLAN} --workload arrivals --arrivals {{arrivals_epoch}} --tokens 16",
     "arrival_ms spans ~54 years"),
    ("--replay a CPU trace on an H100 profile", "ssd-sim", f"{PLAN} -k 2 --fan-out 0,0,1 --replay {{trace}} --tokens 16",
     "its predictions are for another setup"),
    ("--saguaro-c 0.5 at T = 1e-300", "ssd-plan", f"{PLAN} -t 1e-300 --saguaro-c 0.5", "has no effect at T = 1e-300"),
    ("poisson stream beyond the replica", "ssd-sim", f"{PLAN} --workload poisson --rate 50 --max-batch 4 --tokens 64",
     "overloaded: the load offers"),
]

# Numeric extremes that are valid: exit 0, nothing on stderr, no traceback (a vanishing T is its T -> 0 limit,
# ssd_sim.io.limits.GREEDY_BELOW_T; a sequence of one token has no decode round)
OK_CASES: list[tuple[str, str, str]] = [
    ("plan -t 1e-300 (greedy floor)", "ssd-plan", f"{PLAN} -t 1e-300"),
    ("plan -t 4.9e-5 -b 64", "ssd-plan", f"{PLAN} -t 4.9e-5 -b 64"),
    ("sim -t 5e-324", "ssd-sim", f"{PLAN} -t 5e-324 --tokens 16"),
    ("sim every sequence one token", "ssd-sim", f"{PLAN} --tokens 1 -b 4"),
    ("sim one request", "ssd-sim", f"{PLAN} --workload poisson --rate 5 --num-requests 1 --tokens 8"),
]


def make_files(d: Path) -> dict[str, str]:
    """The malformed inputs, written into folder d; returns {placeholder: path}."""
    from ssd_sim.model.presets import get_preset

    f = {}

    def put(name: str, data: bytes | str) -> None:
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        f[name.split(".")[0]] = str(p)

    put("binary.json", b"\x00\x01\x02\xff\xfe" * 20)
    put("utf16.json", '{"schema": "ssd-plan/1"}'.encode("utf-16"))
    put("deep.json", "[" * 100_000 + "]" * 100_000)
    put("bigint.json", '{"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": ' + "9" * 5000 + "}}")
    put("empty.json", "")
    put("array.json", "[1, 2, 3]")
    (d / "folder").mkdir()
    f["folder"], f["device"], f["missing"] = str(d / "folder"), "/dev/null", str(d / "missing.json")
    prof = get_preset("qwen-coder-1.5b-0.5b-cpu").to_dict()
    put("profile.json", json.dumps(prof))
    nan = json.loads(json.dumps(prof))
    nan["acceptance"]["points"][0]["temperature"] = float("nan")
    put("nan_temp.json", json.dumps(nan))
    put("latency_list.json", json.dumps({**prof, "latency": [1, 2]}))
    zero = json.loads(json.dumps(prof))
    for role in ("target", "draft"):
        zero["latency"][role] = {k: (1.0 if k == "token_exponent" else 0.0) for k in zero["latency"][role]}
    put("zero_latency.json", json.dumps(zero))
    put("huge_fan.json", json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 3,
                                                                       "fan_out": [0, 0, 0, 1e9]}}))
    put("float_fan.json", json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 1,
                                                                        "fan_out": [0.5, 1.5]}}))
    lines = TRACE.read_text().splitlines()
    bad = [json.loads(x) for x in lines]
    rnd = next(r for r in bad if r.get("type") == "round")
    rnd["seqs"][0]["accepted"] = 99
    put("accepted_gt_k.jsonl", "\n".join(json.dumps(r) for r in bad))
    bad = [json.loads(x) for x in lines]
    rnd = next(r for r in bad if r.get("type") == "round")
    rnd["timings_ms"]["verify"] = -1.0
    put("nan_timing.jsonl", "\n".join(json.dumps(r) for r in bad))
    put("trace.jsonl", TRACE.read_text())
    put("gpu_no_memory.json", json.dumps({"hbm_tb_s": 0.6, "bf16_tflops": 70, "fp8_tflops": None, "link_gb_s": 32}))
    put("ar.jsonl", AR_TRACE.read_text())
    put("metrics.txt", (ROOT / "docs" / "examples" / "vllm-metrics.txt").read_text())
    put("plan.json", json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2,
                                                                   "fan_out": [1, 1, 1]}}))
    for name, target, how in (("ar_hard", "ar.jsonl", "link"), ("trace_sym", "trace.jsonl", "symlink"),
                              ("profile_sym", "profile.json", "symlink")):
        (d / f"{name}.jsonl").hardlink_to(d / target) if how == "link" else (d / f"{name}.jsonl").symlink_to(target)
        f[name] = str(d / f"{name}.jsonl")
    put("arrivals_huge.json", '{"arrival_ms": [0, 1e308]}')
    put("arrivals_past.json", '{"arrival_ms": [0, 5e12]}')
    put("arrivals_inf.json", '{"arrival_ms": [0, "Infinity"]}')
    put("arrivals_epoch.json", '{"arrival_ms": [0, 1.7e12, 1.7e12]}')
    put("plan_temp_inf.json", '{"schema": "ssd-plan/1", "plan": {"temperature": "inf"}}')
    put("plan_temp_inf_literal.json", '{"schema": "ssd-plan/1", "plan": {"temperature": Infinity}}')
    put("profile_inf.json", json.dumps({**prof, "latency": {**prof["latency"], "target": {
        **prof["latency"]["target"], "fixed_ms": "Infinity"}}}))
    put("profile_batch_inf.json", json.dumps({**prof, "max_batch_size": "@"}).replace('"@"', "1e999"))
    put("trace_copy.jsonl", TRACE.read_text())
    put("empty_fan.json", json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2, "fan_out": []}}))
    put("plan_key_twice.json", '{"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 2, '
                               '"num_speculative_tokens": 3}}')
    put("joined.jsonl", TRACE.read_text().rstrip("\n") + "\n" + TRACE.read_text())
    put("gpu_tiny.json", json.dumps({"hbm_tb_s": 3.35, "bf16_tflops": 1e-308, "fp8_tflops": None, "link_gb_s": 450,
                                     "memory_gb": 80}))
    for i in (1, 2, 3):
        f[f"warn_out{i}"] = str(d / f"warn_out{i}.json")
    f["out"] = str(d / "out.json")
    return f


# ssd-run on tiny random models built in the scratch folder ({run}/...): (name, arguments, expectation). "refuse":
# exit 2, one line, nothing touched; "ok": exit 0, no traceback, a trace that parses.
RUN_CASES: list[tuple[str, str, str]] = [
    ("run --trace is its -o", "--trace {run}/x.jsonl -o {run}/x.jsonl", "refuse"),
    ("run --trace is its prompts", "--trace {run}/prompts.jsonl", "refuse"),
    ("run -o a hard link of its prompts", "-o {run}/prompts_hard.jsonl --trace {run}/t1.jsonl", "refuse"),
    ("run --trace a file of its model", "--trace {run}/target/config.json", "refuse"),
    ("run -o its plan via ..", "--plan {run}/plan.json -o {run}/target/../plan.json --trace {run}/t2.jsonl", "refuse"),
    ("run every request one token", "--max-new-tokens 1 --trace {run}/one.jsonl -o {run}/one.out", "ok"),
    ("run T = 1e-300 (greedy floor)", "-t 1e-300 --mode sd --trace {run}/tiny-t.jsonl", "ok"),
]
# two ssd-run at once: the same --trace (one refuses in one line, or both finish, never a broken trace), and default
# names in the same second (both finish, each with its own trace)
CONCURRENT: list[tuple[str, str]] = [
    ("two runs, one --trace", "--trace {run}/both.jsonl"),
    ("two runs, default names", ""),
]


def make_run_files(d: Path) -> dict[str, str]:
    """A tiny target / draft pair (ssd_runtime.specs TINY_*), prompts, a hard link to them and a plan, under d/run."""
    from ssd_runtime.models import tiny_model
    from ssd_runtime.specs import TINY_DRAFT, TINY_TARGET
    from ssd_sim.plan.plan import Plan, PlanFile

    run = d / "run"
    run.mkdir()
    tiny_model(**TINY_TARGET).save_pretrained(run / "target")
    tiny_model(**TINY_DRAFT).save_pretrained(run / "draft")
    (run / "prompts.jsonl").write_text("".join(json.dumps({"prompt_ids": [1, 2, 3, i]}) + "\n" for i in range(3)))
    (run / "prompts_hard.jsonl").hardlink_to(run / "prompts.jsonl")
    (run / "plan.json").write_text(PlanFile(Plan(num_speculative_tokens=2, fan_out=(1, 1, 1)), {}).to_json())
    return {"run": str(run)}


def run_argv(args: str, files: dict[str, str]) -> list[str]:
    r = files["run"]
    return ["ssd-run", "--target", f"{r}/target", "--draft", f"{r}/draft", "--prompts", f"{r}/prompts.jsonl",
            "--max-new-tokens", "4", "--no-progress", *argv_of(args, files)]


def argv_of(args: str, files: dict[str, str]) -> list[str]:
    return [a.format(**files) for a in args.split()]


def snapshot(d: Path) -> dict[str, tuple[int, float] | None]:
    """Every path below d, with size and mtime for files (a folder's mtime moves with a write probe's come and go)."""
    return {str(p): None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime) for p in d.rglob("*")}


def _exe(argv: list[str]) -> list[str]:
    return [str(ROOT / ".venv" / "bin" / argv[0]), *argv[1:]]


def _result(p, before: dict, after: dict, t0: float) -> dict:
    """What a finished case did: exit status, stderr lines, traceback?, files created / changed, seconds."""
    return {"rc": p.returncode, "lines": len(p.stderr.splitlines()), "traceback": "Traceback" in p.stderr,
            "touched": sorted(set(after.items()) - set(before.items())),
            "changed": sorted(k for k, v in before.items() if after.get(k) != v), "s": time.perf_counter() - t0,
            "stderr": p.stderr.strip().splitlines()[-1][:160] if p.stderr.strip() else "", "err": p.stderr}


def run_case(cmd: str, args: str, files: dict[str, str], d: Path) -> dict:
    """Run one planning-CLI case in a subprocess (see _result)."""
    return run_argv_case(cmd.split() + argv_of(args, files), d)


def run_argv_case(argv: list[str], d: Path) -> dict:
    before, t = snapshot(d), time.perf_counter()
    p = subprocess.run(_exe(argv), capture_output=True, text=True, timeout=300, cwd=d)
    return _result(p, before, snapshot(d), t)


def refused(r: dict) -> bool:
    """Exit 2, exactly one stderr line, no traceback, no file created or changed."""
    return r["rc"] == 2 and r["lines"] == 1 and not r["traceback"] and not r["touched"]


def warned(r: dict, needle: str) -> bool:
    """Exit 0, a `warning:` line containing `needle`, no traceback, no existing file changed."""
    lines = [x for x in r["err"].splitlines() if "warning:" in x]
    return r["rc"] == 0 and any(needle in x for x in lines) and not r["traceback"] and not r["changed"]


def finished(r: dict, trace: Path | None) -> bool:
    """Exit 0, no traceback, and (if named) a trace that parses."""
    from ssd_sim.io.errors import ConfigError
    from ssd_sim.io.trace import read_trace

    if r["rc"] != 0 or r["traceback"]:
        return False
    try:
        return trace is None or bool(read_trace(trace).header)
    except ConfigError:
        return False


def concurrent(args: str, files: dict[str, str], d: Path) -> dict:
    """Start two identical ssd-run at once (cwd d/run); ok when each refuses in one line (exit 2) or finishes, at
    least one finishes, and every trace either names parses (two finished runs name two different traces)."""
    run = Path(files["run"])
    t = time.perf_counter()
    procs = [subprocess.Popen(_exe(run_argv(args, files)), cwd=run, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    traces = [next((ln.split("trace: ", 1)[1] for ln in o.splitlines() if ln.startswith("trace: ")), None)
              for o, _ in outs]
    rs = [{"rc": p.returncode, "lines": len(e.splitlines()), "traceback": "Traceback" in e, "touched": [], "err": e}
          for p, (_, e) in zip(procs, outs, strict=True)]
    done = [finished(r, run / tr) for r, tr in zip(rs, traces, strict=True) if r["rc"] == 0 and tr]
    ok = (all(r["rc"] == 0 or refused(r) for r in rs) and done and all(done)
          and len({tr for r, tr in zip(rs, traces, strict=True) if r["rc"] == 0}) == len(done))
    return {"ok": bool(ok), "rc": "/".join(str(r["rc"]) for r in rs), "s": time.perf_counter() - t,
            "stderr": " | ".join(r["err"].strip()[:70] for r in rs if r["err"].strip())}


def _row(name: str, cmd: str, r: dict, ok: bool) -> str:
    return (f"| {name} | `{cmd}` | {r['rc']} | {r.get('lines', '-')} | {'yes' if r.get('traceback') else 'no'} | "
            f"{len(r.get('touched', []))} | {r['s']:.1f} | {r['stderr'].replace('|', '/')}{'' if ok else ' **FAIL**'} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run cases whose name contains this text")
    ap.add_argument("--no-runtime", action="store_true", help="skip the ssd-run cases (they need torch)")
    a = ap.parse_args()
    print("| case | command | exit | stderr lines | traceback | files touched | s | message |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = make_files(d)
        for name, cmd, args in CASES:
            if a.only in name:
                r = run_case(cmd, args, files, d)
                bad += not refused(r)
                print(_row(name, cmd, r, refused(r)))
        for name, cmd, args, needle in WARN_CASES:
            if a.only in name:
                r = run_case(cmd, args, files, d)
                bad += not warned(r, needle)
                print(_row(name, cmd, r, warned(r, needle)))
        for name, cmd, args in OK_CASES:
            if a.only in name:
                r = run_case(cmd, args, files, d)
                ok = r["rc"] == 0 and not r["err"].strip() and not r["changed"]
                bad += not ok
                print(_row(name, cmd, r, ok))
        if not a.no_runtime:
            bad += _runtime(a.only, files | make_run_files(d), d)
    print(f"\n{bad} case(s) failed")
    return 1 if bad else 0


def _runtime(only: str, files: dict[str, str], d: Path) -> int:
    """The ssd-run cases and the concurrent pairs; the number that failed."""
    bad = 0
    for name, args, expect in RUN_CASES:
        if only in name:
            r = run_argv_case(run_argv(args, files), d)
            argv = argv_of(args, files)
            trace = Path(argv[argv.index("--trace") + 1]) if "--trace" in argv else None
            ok = refused(r) if expect == "refuse" else finished(r, trace)
            bad += not ok
            print(_row(name, "ssd-run", r, ok))
    for name, args in CONCURRENT:
        if only in name:
            r = concurrent(args, files, d)
            bad += not r["ok"]
            print(_row(name, "ssd-run x2", r, r["ok"]))
    return bad


if __name__ == "__main__":
    sys.exit(main())
