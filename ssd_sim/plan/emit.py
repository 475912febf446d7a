"""Engine flags for a plan: the reference SSD engine, and the best plain-SD fallback for vLLM / SGLang.

Each emitter returns {"engine", "args" (list), "command" (one copy-paste line), "source" (the engine's repository and
the version its flags were checked against, one line, also the first note), "notes"}; ssd-engine adds "supported",
the plan as the engine runs it and its prediction. tests/plan/test_emit.py checks every command against the
engines' argument rules as encoded in plan.engine_rules.

Commands name models by their Hugging Face id (model_id): a profile calibrated from ssd-run traces names the model
as the local directory it was loaded from (ssd-run's model cache, a Hugging Face cache snapshot), which would not
run anywhere else; a preset may name it with a description ("..., int8 dynamic"). Where only a path is known, the
command keeps it and a note says so in one line.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from pathlib import Path

from ssd_sim.io.hf import HF_ID, cache_id
from ssd_sim.model.architecture import BUILTIN
from ssd_sim.model.profile import Profile
from ssd_sim.plan.engine_rules import ENGINE_SOURCES, REFERENCE_COMMIT, REFERENCE_FAMILY_SIZES
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import Prediction, predict_ssd
from ssd_sim.plan.whatif import fan_outs

ENGINES = ("ssd-engine", "vllm", "sglang")

# The reference engine's bench.py (github.com/tanishqkumar/ssd at engine_rules.REFERENCE_COMMIT) picks the target by
# family + size: Llama is the default family, --qwen selects Qwen3; drafts by size within the family
# (bench_helpers.get_model_paths). Both families are named explicitly in the commands we emit.
_REFERENCE_TARGETS = REFERENCE_FAMILY_SIZES
_REFERENCE_DRAFTS = {"llama": ("1", "3", "8", "70"), "qwen": ("0.6",)}
REFERENCE_MAX_GPUS = 8  # Config: 1 <= num_gpus <= 8 (one node)
REFERENCE_SOURCE = (f"github.com/tanishqkumar/ssd at commit {REFERENCE_COMMIT[:7]} (its flags were checked against it): "
                    "run bench/bench.py in a checkout of it")
VLLM_SOURCE = f"checked against {ENGINE_SOURCES['vllm'].split(':')[0]}"
SGLANG_SOURCE = f"checked against {ENGINE_SOURCES['sglang'].split(':')[0]} (server_args, read 2026-12-01)"

# ssd-run's fetched models: the cache name (ssd_runtime/fetch.py MODELS, `ssd-run fetch-models`; the profile of a run
# on them names <cache>/<name>/hf) -> the Hugging Face model its GGUF was made from. A copy, as ssd_sim never imports
# ssd_runtime; tests/plan/test_emit.py asserts the two tables name the same models.
FETCHED_MODELS = {"qwen-coder-1.5b": "Qwen/Qwen2.5-Coder-1.5B-Instruct",
                  "qwen-coder-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct"}
_BUILTIN_IDS = {k.split("/")[-1].lower(): k for k in BUILTIN}


def _is_path(text: str) -> bool:
    return text.startswith(("/", "~", ".")) or "\\" in text or text.count("/") >= 2


def _id_in_path(text: str) -> tuple[str | None, str]:
    """(the Hugging Face id a local model directory holds, how it was found) or (None, "")."""
    p = Path(text).expanduser()
    try:
        cfg = json.loads((p if p.suffix == ".json" else p / "config.json").read_text())
        name = cfg.get("_name_or_path") if isinstance(cfg, dict) else None
        if isinstance(name, str) and HF_ID.match(name):
            return name, "a local directory whose config.json names it"
    except (OSError, ValueError):
        pass
    for part in reversed(p.parts):
        if part in FETCHED_MODELS:
            return FETCHED_MODELS[part], f"ssd-run's fetched copy {part}, a local path"
        if (found := cache_id(part)) is not None:
            return found, "a Hugging Face cache snapshot, a local path"
    return None, ""


def model_id(model: str, role: str) -> tuple[str, str | None]:
    """What an engine command names for the profile's `role` ("target" / "draft") model: its Hugging Face id, and a
    short phrase saying where the id came from when the profile named it otherwise (a local path, a description),
    or why there is none (only a path is known: the command keeps the path)."""
    text = model.strip()
    if not text:
        return f"{role.upper()}_MODEL", f"the profile names no {role} model: replace {role.upper()}_MODEL"
    if _is_path(text):
        found, how = _id_in_path(text)
        if found is not None:
            return found, f"{role} {found} (the profile names {how})"
        return text, (f"only a local path is known for the {role} ({text}): the command runs only where it exists; "
                      f"name the model's Hugging Face id instead")
    base = re.split(r" \(|, ", text, maxsplit=1)[0].strip()  # "Qwen2.5-Coder-1.5B-Instruct, int8 dynamic"
    found = base if HF_ID.match(base) else _BUILTIN_IDS.get(base.lower())
    if found is None:
        return base, f"the {role} {base!r} is not a Hugging Face id (org/name): replace it with one"
    return found, (None if found == text else f"{role} {found} (the profile names {text})")


def model_ids(profile: Profile) -> tuple[str, str, list[str]]:
    """(target id, draft id, the one note line saying how they were derived, if they were)."""
    (target, t_note), (draft, d_note) = model_id(profile.target_model, "target"), model_id(profile.draft_model, "draft")
    derived = [n for n in (t_note, d_note) if n]
    return target, draft, ([f"models: {'; '.join(derived)}"] if derived else [])


def _family_size(model: str) -> tuple[str | None, str | None]:
    """The reference engine's family (Llama 3.x, Qwen3) and size of a Hugging Face id, or None."""
    name = model.lower().split("/")[-1]
    family = "llama" if re.match(r"(meta-)?llama-3", name) else "qwen" if name.startswith("qwen3-") else None
    m = re.search(r"-(\d+(?:\.\d+)?)b(?:-|$)", name)
    return family, (m.group(1) if m else None)


def _reference_model_args(profile: Profile) -> tuple[list[str], str | None]:
    """(bench.py model flags, None) or ([], why the engine cannot run this pair)."""
    target, draft, _ = model_ids(profile)
    family, size = _family_size(target)
    d_family, d_size = _family_size(draft)
    if family is None or size not in _REFERENCE_TARGETS[family]:
        return [], (f"the reference engine has no target {target} (it runs Llama 3 targets of "
                    f"{', '.join(_REFERENCE_TARGETS['llama'])}B and Qwen3 of {', '.join(_REFERENCE_TARGETS['qwen'])}B)")
    if d_family != family or d_size not in _REFERENCE_DRAFTS[family]:
        return [], f"the reference engine has no {family} draft {draft}"
    return ["--llama" if family == "llama" else "--qwen", "--size", size, "--draft", d_size], None


def reference_plan(profile: Profile, plan: Plan, max_budget: int | None = None) -> tuple[Plan, list[str]]:
    """The plan restricted to what the reference engine runs, and what changed.

    The engine holds F (K + 1) branches per sequence with F >= 1 (--f; its buffers and, with --x, an assert), any
    fan-out lists summing to that (above b = 8 too: mask_helpers.get_custom_mask_vectorized takes lists), one C
    and jit or fast: the budget moves to the multiple of
    K + 1 below or above it (above only within max_budget), whichever this profile predicts faster, with fan-outs
    re-optimised at that budget.
    """
    K, b = plan.K, plan.batch_size
    base = plan.replace(backup=plan.backup_for(b), backup_threshold=math.inf, saguaro_c_list=())
    if plan.budget % (K + 1) == 0 and plan.budget > 0:
        return base, []
    options = []
    up = -(-plan.budget // (K + 1))
    if max_budget is not None and up * (K + 1) > max_budget:
        up = plan.budget // (K + 1)
    for F in sorted({max(1, plan.budget // (K + 1)), max(1, up)}):
        hit, miss = fan_outs(profile, K, F * (K + 1), plan.temperature, plan.saguaro_c, base.backup)
        cand = base.replace(fan_out=hit, fan_out_miss=miss)
        options.append((predict_ssd(profile, cand).per_seq_tok_s, F, cand))
    tok_s, F, best = max(options, key=lambda o: o[0])
    return best, [f"the reference engine needs F (K + 1) guesses with F >= 1: budget {plan.budget} -> {best.budget} (F = {F}), fan-out "
                  f"{list(best.fan_out)}; predicted {tok_s:.1f} tok/s per sequence vs the plan's "
                  f"{predict_ssd(profile, plan).per_seq_tok_s:.1f}"]


def ssd_engine_flags(profile: Profile, plan: Plan, max_budget: int | None = None) -> dict:
    """Flags of github.com/tanishqkumar/ssd bench/bench.py (--k --f --flh --flm --x --backup --b --temp) for the
    plan as the engine can run it (reference_plan); "supported" is False, with the reason, where it cannot."""
    model_args, why_not = _reference_model_args(profile)
    gpus = profile.latency.target_devices + 1  # the engine runs one draft GPU, the last one
    if why_not is None and gpus > REFERENCE_MAX_GPUS:
        why_not = f"the reference engine runs on one node of at most {REFERENCE_MAX_GPUS} GPUs, this setup needs {gpus}"
    if why_not is not None:
        return {"engine": "ssd-engine", "supported": False, "args": [], "command": "", "source": REFERENCE_SOURCE,
                "notes": [why_not], "plan": None, "predicted_tok_s": None, "predicted_total_tok_s": None,
                "predicted_tok_s_per_device": None}
    run, notes = reference_plan(profile, plan, max_budget)
    K, F = run.K, run.budget // (run.K + 1)
    args = model_args + ["--gpus", str(gpus), "--spec", "--async", "--k", str(K), "--f", str(F)]
    if len(set(run.fan_out + run.fan_out_miss)) > 1:
        args += ["--flh", *map(str, run.fan_out), "--flm", *map(str, run.fan_out_miss)]
    if run.saguaro_c < 1.0 and run.temperature > 0:
        args += ["--x", f"{run.saguaro_c:g}"]
    args += ["--backup", run.backup, "--b", str(run.batch_size), "--temp", f"{run.temperature:g}"]
    if plan.backup == "adaptive" and plan.backup_threshold <= 1:
        notes.append("the engine has no adaptive backup: b* = 1, so --backup fast at every batch size")
    elif plan.backup == "adaptive" and plan.backup_threshold != float("inf"):
        notes.append(f"the engine has no adaptive backup: use --backup jit below b* = {plan.backup_threshold:g} "
                     "sequences and --backup fast at or above")
    if plan.draft_devices > 1:
        notes.append("the reference engine runs one draft GPU; extra draft devices need engine support")
    if plan.saguaro_c_list:
        notes.append(f"the engine takes one C (--x): per-position C = {plan.c_label} runs in ssd-run only; "
                     f"--x {run.saguaro_c:g} is the best single C")
    if plan.downweight == "top_f" and run.saguaro_c < 1.0 and run.temperature > 0:
        notes.append("the engine down-weights the top F+1 tokens (downweight=top_f_plus_1), the plan assumed top F")
    if run.backup == "fast" and run.temperature > 0:
        notes.append("at T > 0 the engine accepts fast-backup rows by greedy match, not the ratio test")
    notes.insert(0, REFERENCE_SOURCE)
    pred = predict_ssd(profile, run)
    return {"engine": "ssd-engine", "supported": True, "args": args,
            "command": shlex.join(["python", "bench/bench.py", *args]), "source": REFERENCE_SOURCE, "notes": notes,
            "plan": run.to_dict(), "predicted_tok_s": pred.per_seq_tok_s, "predicted_total_tok_s": pred.total_tok_s,
            "predicted_tok_s_per_device": pred.tok_s_per_device}


def vllm_flags(profile: Profile, sd: Prediction) -> dict:
    """vLLM serve flags for plain draft-model SD at the best SD K (--speculative-config JSON)."""
    tp = profile.latency.target_devices
    target, draft, model_notes = model_ids(profile)
    # vLLM's draft-model proposer runs the draft with the target's tensor-parallel size (it rejects any other)
    cfg = {"method": "draft_model", "model": draft, "num_speculative_tokens": sd.num_speculative_tokens,
           "draft_tensor_parallel_size": tp}
    args = ["serve", target, "--tensor-parallel-size", str(tp), "--speculative-config",
            json.dumps(cfg, separators=(",", ":"))]
    notes = ["plain SD fallback (vLLM has no SSD); temperature is a per-request sampling parameter", VLLM_SOURCE,
             *model_notes]
    if tp > 1:
        notes.append(f"the draft runs sharded over the target's {tp} GPUs (no separate draft GPU, unlike SSD)")
    return {"engine": "vllm", "args": args, "command": shlex.join(["vllm", *args]), "source": VLLM_SOURCE,
            "notes": notes}


def sglang_flags(profile: Profile, sd: Prediction) -> dict:
    """SGLang launch_server flags for standalone draft-model SD at the best SD K."""
    K = sd.num_speculative_tokens
    target, draft, model_notes = model_ids(profile)
    args = ["--model-path", target, "--tp-size", str(profile.latency.target_devices),
            "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", draft,
            "--speculative-num-steps", str(K), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(K + 1)]
    return {"engine": "sglang", "args": args,
            "command": shlex.join(["python", "-m", "sglang.launch_server", *args]), "source": SGLANG_SOURCE,
            "notes": ["plain SD fallback (SGLang has no SSD); temperature is a per-request sampling parameter",
                      SGLANG_SOURCE, *model_notes]}


def engine_flags(profile: Profile, plan: Plan, sd: Prediction, max_budget: int | None = None) -> dict[str, dict]:
    """All three emitters keyed by engine name (max_budget: the largest cache the ssd-engine plan may pad to)."""
    return {"ssd-engine": ssd_engine_flags(profile, plan, max_budget), "vllm": vllm_flags(profile, sd),
            "sglang": sglang_flags(profile, sd)}
