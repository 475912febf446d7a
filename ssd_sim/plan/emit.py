"""Engine flags for a plan: the reference SSD engine, and the best plain-SD fallback for vLLM / SGLang.

Each emitter returns {"engine", "args" (list), "command" (one copy-paste line), "notes"}.
"""

from __future__ import annotations

import json
import shlex

from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import Prediction

ENGINES = ("ssd-engine", "vllm", "sglang")

# The reference engine's bench.py selects models by family + size flags.
_REFERENCE_MODELS = {
    ("llama", "70"): ["--llama", "--size", "70"],
    ("llama", "8"): ["--llama", "--size", "8"],
    ("qwen", "32"): ["--qwen", "--size", "32"],
    ("qwen", "8"): ["--qwen", "--size", "8"],
}


def _reference_model_args(profile: Profile) -> list[str]:
    t, d = profile.target_model.lower(), profile.draft_model.lower()
    family = "llama" if "llama" in t else "qwen" if "qwen" in t else None
    for (fam, size), args in _REFERENCE_MODELS.items():
        if fam == family and f"-{size}b" in t:
            draft = "1" if "1b" in d and fam == "llama" else "0.6" if "0.6b" in d else None
            return args + (["--draft", draft] if draft else [])
    return []


def ssd_engine_flags(profile: Profile, plan: Plan) -> dict:
    """Flags of github.com/tanishqkumar/ssd bench/bench.py (--k --f --flh --flm --x --backup --b --temp)."""
    K = plan.K
    uniform = len(set(plan.fan_out)) == 1 and plan.fan_out == plan.fan_out_miss
    gpus = profile.latency.target_devices + plan.draft_devices
    args = _reference_model_args(profile) + ["--gpus", str(gpus), "--spec", "--async", "--k", str(K),
                                             "--f", str(round(plan.budget / (K + 1)))]
    if not uniform:
        args += ["--flh", *map(str, plan.fan_out), "--flm", *map(str, plan.fan_out_miss)]
    x = min(plan.saguaro_c_list) if plan.saguaro_c_list else plan.saguaro_c
    if x < 1.0:
        args += ["--x", f"{x:g}"]
    args += ["--backup", plan.backup_for(plan.batch_size), "--b", str(plan.batch_size),
             "--temp", f"{plan.temperature:g}"]
    notes = []
    if plan.backup == "adaptive" and plan.backup_threshold != float("inf"):
        notes.append(f"the engine has no adaptive backup: use --backup jit below b* = {plan.backup_threshold:g} "
                     "sequences and --backup fast at or above")
    if plan.draft_devices > 1:
        notes.append("the reference engine runs one draft GPU; extra draft devices need engine support")
    if plan.saguaro_c_list:
        notes.append(f"the engine takes one C (--x): per-position C = {plan.c_label} runs in ssd-run only; "
                     f"--x {x:g} is its smallest value")
    if plan.downweight == "top_f" and x < 1.0:
        notes.append("the engine down-weights the top F+1 tokens (downweight=top_f_plus_1), the plan assumed top F")
    return {"engine": "ssd-engine", "args": args, "command": shlex.join(["python", "bench/bench.py", *args]),
            "notes": notes}


def vllm_flags(profile: Profile, sd: Prediction) -> dict:
    """vLLM serve flags for plain draft-model SD at the best SD K (--speculative-config JSON)."""
    cfg = {"method": "draft_model", "model": profile.draft_model or "DRAFT_MODEL",
           "num_speculative_tokens": sd.num_speculative_tokens, "draft_tensor_parallel_size": 1}
    args = ["serve", profile.target_model or "TARGET_MODEL",
            "--tensor-parallel-size", str(profile.latency.target_devices),
            "--speculative-config", json.dumps(cfg, separators=(",", ":"))]
    return {"engine": "vllm", "args": args, "command": shlex.join(["vllm", *args]),
            "notes": ["plain SD fallback (vLLM has no SSD); temperature is a per-request sampling parameter"]}


def sglang_flags(profile: Profile, sd: Prediction) -> dict:
    """SGLang launch_server flags for standalone draft-model SD at the best SD K."""
    K = sd.num_speculative_tokens
    args = ["--model-path", profile.target_model or "TARGET_MODEL", "--tp", str(profile.latency.target_devices),
            "--speculative-algorithm", "STANDALONE",
            "--speculative-draft-model-path", profile.draft_model or "DRAFT_MODEL",
            "--speculative-num-steps", str(K), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(K + 1)]
    return {"engine": "sglang", "args": args,
            "command": shlex.join(["python", "-m", "sglang.launch_server", *args]),
            "notes": ["plain SD fallback (SGLang has no SSD); temperature is a per-request sampling parameter"]}


def engine_flags(profile: Profile, plan: Plan, sd: Prediction) -> dict[str, dict]:
    """All three emitters keyed by engine name."""
    return {"ssd-engine": ssd_engine_flags(profile, plan), "vllm": vllm_flags(profile, sd),
            "sglang": sglang_flags(profile, sd)}
