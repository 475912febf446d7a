"""Where ssd-plan and ssd-sim get their profile: a preset, a profile file, or a pair and GPU from specs.

    --preset NAME | --profile FILE | --target CFG|NAME --draft CFG|NAME --gpu NAME [--tp N] [--draft-gpu NAME]
                                      [--context TOKENS] [--dtype bf16|fp8] [--acceptance-from PRESET|FILE]
The spec form builds the profile with ssd_sim.model.spec_profile (roofline from datasheets; acceptance from the
named source: a workload file of your engine's metrics, or another pair's, marked assumed). With --preset /
--profile, --acceptance-from replaces their acceptance (model.workload_profile.with_acceptance). A plan file records
which source made it, so `--plan FILE` alone reloads it.

Context: a spec pair's or GPU preset's forwards read each row's KV cache at one context. ssd-sim and ssd-plan capacity
know their workload, so without --context they derive those latencies at its mean decode context
(`at_workload_context`): the mean prompt plus half the mean output, where the KV reads, linear in context, average
exactly over each request's decode. A measured profile (file, CPU presets) has no such term and is left as it is.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.values import bounded_int
from ssd_sim.model.hardware import GPUS, gpu_key
from ssd_sim.model.presets import load_profile
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import PlanFile
from ssd_sim.sim.workload import Workload

# a spec pair's keys (profile_from_specs' arguments, the flags that set them) and what a plan file may record in each
SPEC_TYPES: dict[str, tuple[type, ...]] = {"target": (str,), "draft": (str,), "gpu": (str, dict), "tp": (int,),
                                           "draft_gpu": (str, dict), "context": (int,), "dtype": (str,),
                                           "acceptance_from": (str,)}
SPEC_FLAGS = tuple(SPEC_TYPES)


def add_source_args(group: argparse._ArgumentGroup) -> None:
    """The spec flags (beside --preset / --profile, which each CLI declares with its own help)."""
    group.add_argument("--target", metavar="CFG|NAME", help="plan a pair no preset covers: the target's config.json "
                       "(or a folder with one, or a built-in name such as Llama-3.1-70B); needs --draft and --gpu")
    group.add_argument("--draft", metavar="CFG|NAME", help="the draft's config.json, folder or built-in name")
    group.add_argument("--gpu", metavar="NAME|FILE", help=f"the target's GPU: {', '.join(GPUS)}, or a JSON file of "
                       "another's datasheet numbers (hbm_tb_s, bf16_tflops, fp8_tflops, link_gb_s, memory_gb)")
    group.add_argument("--tp", type=bounded_int(1, 64, "target devices"), metavar="N",
                       help="tensor-parallel degree of the target (devices, 1..64; default 1)")
    group.add_argument("--draft-gpu", metavar="NAME|FILE", help="the draft's GPU, a name or file as --gpu (default: "
                       "the target's kind)")
    group.add_argument("--context", type=bounded_int(1, 1_048_576, "tokens per sequence"), metavar="TOKENS",
                       help="tokens in each sequence's KV cache the latencies are computed at (specs: default 1024; "
                            "with --preset: re-derives the preset at this context instead of its own)")
    group.add_argument("--dtype", choices=("bf16", "fp16", "fp8"), help="weight and KV dtype (default bf16)")
    group.add_argument("--acceptance-from", metavar="PRESET|FILE",
                       help="whose acceptance and hit curves to use: a workload file from `ssd-plan workload` (your "
                            "engine's metrics), a calibrated profile or a preset; with --preset / --profile it replaces "
                            "theirs (specs: default llama70b-1b-h100, marked assumed)")


SPEC_FILE_KEYS = ("target", "draft", "gpu", "draft_gpu", "acceptance_from")  # a spec's keys that may name a file


def source_files(args, plan_file: PlanFile | None = None) -> dict[str, str | None]:
    """The files (or model folders) the profile-source flags read, and those the --plan file (`plan_file`, as loaded)
    names, by field: what no output may overwrite."""
    files = {k: getattr(args, k, None) for k in ("profile", "target", "draft", "acceptance_from", "gpu", "draft_gpu")}
    if plan_file is not None:
        recorded = recorded_files(plan_file.extra.get("profile") or {}, args.plan)
        files |= {f"plan's profile.{k}": v for k, v in recorded.items() if k in ("path", "acceptance_from")}
        spec = recorded.get("spec")
        if isinstance(spec, dict):
            files |= {f"plan's profile.spec.{k}": v for k, v in spec.items()  # a built-in name names no file
                      if k in SPEC_FILE_KEYS and isinstance(v, str)}
    return files


def recorded_files(recorded, plan_path: str | Path) -> dict[str, Any]:
    """A plan file's recorded profile source (recorded_profile) with its file paths found: a relative path
    (profile.path, an acceptance_from that is a file, a spec pair's config or GPU file) is read beside the plan file,
    where ssd-plan -o writes it relative to, else from the current folder (plan files written before that); one that
    names a different file in each place is a one-line ConfigError, and so is a profile.path in neither (a spec value
    in neither is a built-in model, GPU or preset name, which profile_from_specs checks)."""
    out = dict(recorded_profile(recorded))
    for key in ("path", "acceptance_from"):
        if isinstance(out.get(key), str):
            out[key] = _locate(out[key], plan_path, f"profile.{key}", required=key == "path")
    if isinstance(out.get("spec"), dict):
        out["spec"] = {k: _locate(v, plan_path, f"profile.spec.{k}", required=False)
                       if k in SPEC_FILE_KEYS and isinstance(v, str) else v for k, v in out["spec"].items()}
    return out


def _locate(name: str, plan_path: str | Path, label: str, required: bool) -> str:
    """A plan file's relative path `name`: the file beside the plan file, else in the current folder (recorded_files)."""
    if not name or Path(name).is_absolute():
        return name
    beside, here = Path(plan_path).parent / name, Path(name)
    found = [p for p in dict.fromkeys((beside, here)) if p.exists()]
    if len(found) == 2 and not os.path.samefile(*found):
        key = label.rsplit(".", 1)[-1]
        flag = "--profile FILE" if key == "path" else f"--{key.replace('_', '-')} with the one you mean"
        raise ConfigError("plan", f"the plan file's {label} {name!r} names two files, {beside} beside the "
                                  f"plan file and {here.resolve()} here: give {flag} to choose")
    if found:
        return str(found[0])
    if required:
        raise ConfigError("plan", f"the plan file's {label} {name!r} is neither beside the plan file "
                                  f"({beside}) nor under the current folder: run from the folder it is relative "
                                  "to, or give --profile FILE")
    return name


def plan_relative(source: dict[str, Any], plan_path: str | Path) -> dict[str, Any]:
    """`source` as a plan file at `plan_path` records it: its file paths (profile, acceptance_from, a spec pair's
    configs and GPU files) relative to the plan file's folder (where recorded_files looks first), so the plan file
    reads the same files from any folder. Built-in names stay as they are."""
    def rel(key: str, name: Any) -> Any:
        if not isinstance(name, str) or not name or not Path(name).exists() or _builtin_gpu(key, name):
            return name
        return os.path.relpath(Path(name).resolve(), Path(plan_path).resolve().parent)

    out = {k: rel(k, v) if k in ("path", "acceptance_from") else v for k, v in source.items()}
    if isinstance(out.get("spec"), dict):
        out["spec"] = {k: rel(k, v) if k in SPEC_FILE_KEYS else v for k, v in out["spec"].items()}
    return out


def _builtin_gpu(key: str, name: str) -> bool:
    """A --gpu / --draft-gpu value that is a GPU's name (get_gpu reads a name before a file of that name)."""
    return key in ("gpu", "draft_gpu") and gpu_key(name) in GPUS


def spec_of(args) -> dict[str, Any] | None:
    """The spec flags given (None if none); ConfigError if the spec is incomplete or mixed with a preset/profile."""
    given = {k: getattr(args, k, None) for k in SPEC_FLAGS if getattr(args, k, None) is not None}
    named = getattr(args, "preset", None) or getattr(args, "profile", None)
    if not given or (set(given) <= {"context", "acceptance_from"} and named):
        return None  # --context re-derives a preset, --acceptance-from replaces its acceptance (source_of)
    extra = [k for k in given if k not in ("target", "draft", "gpu", "context", "acceptance_from")]
    if named and extra and not set(given) & {"target", "draft", "gpu"}:
        flag = "--" + extra[0].replace("_", "-")
        raise ConfigError(extra[0], f"{flag} applies to a pair from specs (--target, --draft, --gpu), not to "
                                    f"--preset / --profile, whose devices are fixed: drop {flag}")
    missing = [f"--{k}" for k in ("target", "draft", "gpu") if k not in given]
    if missing:
        raise ConfigError(missing[0].lstrip("-"), f"planning from specs needs --target, --draft and --gpu; give "
                                                  f"{' and '.join(missing)} (or use --preset / --profile)")
    if getattr(args, "preset", None) or getattr(args, "profile", None):
        raise ConfigError("profile", "give either --preset / --profile or --target/--draft/--gpu, not both")
    return given


def profile_of(source: dict[str, Any]) -> Profile:
    """The profile a source names: {"preset": NAME} | {"path": FILE} | {"spec": {target, draft, gpu, ...}}."""
    if source.get("spec"):
        from ssd_sim.model.spec_profile import profile_from_specs

        return profile_from_specs(**source["spec"])
    if source.get("context") is not None and source.get("path"):
        raise ConfigError("context", "a profile file's latencies were measured at its own contexts; --context "
                                     "re-derives a preset or a spec pair (drop --context, or use --preset / --target)")
    profile = load_profile(source.get("preset"), source.get("path"), context=source.get("context"))
    if source.get("acceptance_from"):
        from ssd_sim.model.workload_profile import acceptance_source, with_acceptance

        profile = with_acceptance(profile, acceptance_source(source["acceptance_from"]))
    return profile


def source_of(args, recorded: dict | None = None, plan_path: str | Path | None = None) -> dict[str, Any]:
    """The profile source of the flags, else the one the plan file at `plan_path` recorded (its files found by
    recorded_files); ConfigError naming the flags if none."""
    spec = spec_of(args)
    if spec:
        return {"spec": spec}
    context, accept = getattr(args, "context", None), getattr(args, "acceptance_from", None)
    if getattr(args, "preset", None) or getattr(args, "profile", None):
        return ({"preset": args.preset, "path": args.profile} | ({"context": context} if context else {})
                | ({"acceptance_from": accept} if accept else {}))
    recorded = recorded_files(recorded or {}, plan_path) if plan_path else recorded_profile(recorded or {})
    if recorded.get("spec"):
        return {"spec": recorded_spec(recorded["spec"])}
    if recorded.get("preset") or recorded.get("path"):
        context, accept = context or recorded.get("context"), accept or recorded.get("acceptance_from")
        return ({"preset": recorded.get("preset"), "path": None if recorded.get("preset") else recorded["path"]}
                | ({"context": context} if context else {}) | ({"acceptance_from": accept} if accept else {}))
    raise ConfigError("profile", "give --preset NAME (see --list-presets), --profile FILE, or a pair from specs: "
                                 "--target CFG --draft CFG --gpu NAME")


def recorded_profile(recorded) -> dict[str, Any]:
    """A plan file's recorded profile source, checked: an object whose preset, path and acceptance_from are strings
    (its spec: recorded_spec; its context: profile_of's check); else a one-line ConfigError naming the key."""
    if not isinstance(recorded, dict):
        raise ConfigError("plan", "the plan file's profile must be an object ({\"preset\": NAME}, {\"path\": FILE} "
                                  "or {\"spec\": {...}})")
    for key in ("preset", "path", "acceptance_from"):
        if recorded.get(key) is not None and not isinstance(recorded[key], str):
            raise ConfigError("plan", f"the plan file's profile.{key} must be a string, got {recorded[key]!r:.60}")
    return recorded


def recorded_spec(spec) -> dict[str, Any]:
    """A plan file's recorded spec pair, checked before it reaches profile_from_specs: an object of SPEC_TYPES' keys
    with target, draft and gpu; anything else is a one-line ConfigError naming the key."""
    if not isinstance(spec, dict):
        raise ConfigError("plan", "the plan file's profile.spec must be an object (target, draft, gpu, ...)")
    for key, value in spec.items():
        kinds = SPEC_TYPES.get(key)
        if kinds is None:
            raise ConfigError("plan", f"the plan file's profile.spec has an unknown key {key!r}; it may hold "
                                      f"{', '.join(SPEC_TYPES)}")
        if value is not None and (isinstance(value, bool) or not isinstance(value, kinds)):
            want = " or ".join({str: "a string", int: "an integer", dict: "an object"}[k] for k in kinds)
            raise ConfigError("plan", f"the plan file's profile.spec.{key} must be {want}, got {value!r:.60}")
    missing = [k for k in ("target", "draft", "gpu") if not spec.get(k)]
    if missing:
        raise ConfigError("plan", f"the plan file's profile.spec lacks {missing[0]}; write the plan again with "
                                  "ssd-plan --target .. --draft .. --gpu .. -o FILE")
    return spec


def at_last_token(source: dict[str, Any], profile: Profile, workload: Workload) -> Profile:
    """The profile whose max_batch_size a fixed batch must fit: `source` re-derived at the batch's last token, its
    longest prompt plus its longest output (its rows advance together, so every cache is that full at the end), where
    the workload's lengths set the latencies' context (context_for: a source without a context of its own); else
    `profile` (a stream of requests: continuous batching keeps rows at every stage, so the mean decode context
    `profile` is taken at holds)."""
    if workload.kind != "fixed" or context_for(source, profile, workload) is None:
        return profile
    peak = max(workload.prompt_lengths or (workload.prompt_tokens,)) + max(workload.output_lengths
                                                                          or (workload.output_tokens,))
    return profile_of(at_context(source, peak))


def workload_context(workload: Workload) -> int:
    """Tokens in each sequence's KV cache averaged over its decode (tokens): the mean prompt plus half the mean output
    (the context grows by one token per decoded token, from the prompt to prompt + output)."""
    prompts = workload.prompt_lengths or (workload.prompt_tokens,)
    outputs = workload.output_lengths or (workload.output_tokens,)
    return max(1, round(sum(prompts) / len(prompts) + sum(outputs) / len(outputs) / 2))


def context_for(source: dict[str, Any], profile: Profile, workload: Workload) -> int | None:
    """The workload's mean decode context (workload_context, tokens) when `profile`'s latencies have a per-row KV term
    (a spec pair or a GPU preset) and the source gives no context; else None (a measured profile is left as it is)."""
    lat = profile.latency
    given = (source.get("spec") or source).get("context")
    if source.get("path") or given is not None or not (lat.target.row_ms or lat.draft.row_ms):
        return None
    return workload_context(workload)


def context_note(context: int) -> str:
    """The line that says the latencies were taken at a workload's mean decode context."""
    return (f"latencies at {context} cached tokens per sequence: the workload's mean prompt plus half its mean output "
            "(the mean decode context; --context N sets another)")


def growing_note(context: int, analytic: str) -> str:
    """The line that says the simulated rounds follow their batch's context while `analytic` takes the mean."""
    return (f"simulated rounds at their batch's mean cached tokens per sequence (its prompts plus the tokens decoded so "
            f"far); {analytic} at {context}, the workload's mean prompt plus half its mean output (--context N fixes "
            "one context for both)")


def at_workload_context(source: dict[str, Any], profile: Profile, workload: Workload) -> tuple[Profile, int | None]:
    """`profile` re-derived at the workload's mean decode context (context_for) and that context (tokens); else
    (profile, None)."""
    c = context_for(source, profile, workload)
    return (profile, None) if c is None else (profile_of(at_context(source, c)), c)


def without_context(source: dict[str, Any]) -> dict[str, Any]:
    """`source` without a context of its own (a spec pair's or a preset's), so a workload's lengths may set one."""
    if source.get("spec"):
        return {"spec": {k: v for k, v in source["spec"].items() if k != "context"}}
    return {k: v for k, v in source.items() if k != "context"}


def at_context(source: dict[str, Any], context: int) -> dict[str, Any]:
    """`source` with its latencies' context set to `context` tokens per sequence (a spec pair's or a preset's)."""
    return {"spec": {**source["spec"], "context": context}} if source.get("spec") else {**source, "context": context}
