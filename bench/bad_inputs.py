"""Bad inputs through the planning CLIs, each in its own process: exit status, stderr lines, traceback, files touched.

    .venv/bin/python bench/bad_inputs.py            # every case, a markdown table
    .venv/bin/python bench/bad_inputs.py --only fan  # cases whose name contains "fan"

Every case must end with exit status 2, exactly one line on stderr, no traceback and no file created or changed
(tests/cli/test_bad_inputs.py runs the same CASES in-process). The runtime's faults and signals are tested in
tests/runtime/test_supervision.py.
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
    ("unknown preset", "ssd-plan", "--preset nope"),
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
    ("--chrome-trace under a file", "ssd-sim", f"{PLAN} --chrome-trace {{binary}}/t.json"),
    ("calibrate -o a folder", "ssd-plan calibrate", f"{TRACE} -o {{folder}}"),
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
    f["out"] = str(d / "out.json")
    return f


def argv_of(args: str, files: dict[str, str]) -> list[str]:
    return [a.format(**files) for a in args.split()]


def snapshot(d: Path) -> dict[str, tuple[int, float]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime) for p in d.rglob("*")}


def run_case(cmd: str, args: str, files: dict[str, str], d: Path) -> dict:
    """Run one case in a subprocess: exit status, stderr lines, traceback?, files created or changed, seconds."""
    exe = [str(ROOT / ".venv" / "bin" / cmd.split()[0]), *cmd.split()[1:]]
    before = snapshot(d)
    t = time.perf_counter()
    p = subprocess.run(exe + argv_of(args, files), capture_output=True, text=True, timeout=300, cwd=d)
    after = snapshot(d)
    return {"rc": p.returncode, "lines": len(p.stderr.splitlines()), "traceback": "Traceback" in p.stderr,
            "touched": sorted(set(after.items()) - set(before.items())), "s": time.perf_counter() - t,
            "stderr": p.stderr.strip().splitlines()[-1][:160] if p.stderr.strip() else ""}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run cases whose name contains this text")
    a = ap.parse_args()
    print("| case | command | exit | stderr lines | traceback | files touched | s | message |")
    print("|---|---|---|---|---|---|---|---|")
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        files = make_files(d)
        for name, cmd, args in CASES:
            if a.only not in name:
                continue
            r = run_case(cmd, args, files, d)
            ok = r["rc"] == 2 and r["lines"] == 1 and not r["traceback"] and not r["touched"]
            bad += not ok
            print(f"| {name} | `{cmd}` | {r['rc']} | {r['lines']} | {'yes' if r['traceback'] else 'no'} | "
                  f"{len(r['touched'])} | {r['s']:.1f} | {r['stderr'].replace('|', '/')}{'' if ok else ' **FAIL**'} |")
    print(f"\n{bad} case(s) failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
