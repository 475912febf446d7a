"""Head-to-head (issue 13, item 3): transformers' own generation, alone and assisted, against ssd-run ar / sd / ssd.

    .venv/bin/python bench/vs_baseline.py                     # 8 code prompts x 64 tokens, fp32, 3 repeats (~1 h)
    .venv/bin/python bench/vs_baseline.py --quantize int8     # both models int8 on both sides (int8 preset's plan)
    .venv/bin/python bench/vs_baseline.py --prompts 1 --max-new-tokens 8 --repeats 1    # a short real check
    .venv/bin/python bench/vs_baseline.py --tiny              # tiny random models: the whole protocol in seconds

Workload: the built-in `code` prompt set (its first --prompts), --max-new-tokens new tokens per prompt, b = 1,
greedy (T = 0), EOS ignored on both sides so every mode makes exactly max-new-tokens tokens per prompt (ours:
Job(ignore_eos=True); transformers: generate(eos_token_id=None)); the script checks the counts.

Modes:
  hf-ar        model.generate(ids, max_new_tokens=N, do_sample=False), the target alone, in this process with
               torch.set_num_threads(--hf-threads) (default 2 = both cores of the benchmark machine)
  hf-assisted  the same with assistant_model=draft (transformers' assisted generation with its defaults; in
               transformers 5.x: 20 assistant tokens, "constant" schedule, drafting stops early below assistant
               confidence 0.4; the JSON records the settings used; --hf-assistant-tokens K fixes K instead)
  ar, sd, ssd  one ssd_runtime Session (target process pinned to core 0, draft process to core 1, one thread
               each); SSD runs the plan ssd-plan makes for the profile (--preset / --profile) at b = 1, T = 0;
               SD runs that same planner result's best SD K with Saguaro C = 1 (SD never down-weights)
Both sides load the models through ssd_runtime.models.load_model from the same files, dtype float32, with the same
--quantize (int8 = torch.ao.quantization.quantize_dynamic on every nn.Linear). Linear kernels: ours use the
runtime's default (--linear auto = oneDNN-prepacked for fp32 on CPU); transformers uses torch's stock kernels
(--hf-linear dense) unless told otherwise; the table's `kernels` column says which ran.

Protocol: models loaded once; every mode warmed up (one untimed run of the first prompt); then
`for rep in range(R): for mode in modes: run all prompts` (interleaved, --repeats R >= 3 for a result); the
median over valid repetitions per mode. A run is INVALID (listed, left out of the median) if the runtime reported a
fault, a round fell back to AR, the job failed, or a prompt did not get exactly N tokens; a mode without a
valid run makes the script exit 1. Outputs (generated token ids per prompt) must be identical across all runs
of all modes (greedy); a difference exits 1 with fp32 (with int8 the target's dynamic activation scales make
multi-token verification differ at near-ties, so it is reported, not fatal).

Measurement (perf_counter wall clock in this process):
  end to end   tokens / wall time of the whole prompt set, prefill included (ours: around Session.run, so the
               job hand-off to the worker processes counts too)
  decode-only  (tokens - 1 per prompt) / (end-to-end time - prefill time), the same formula on both sides: the
               first token of a prompt comes from its prefill. Prefill: ours = JobResult.summary.prefill_ms (the
               target's prefill forward and first token); transformers = generate(max_new_tokens=1) of the target
               alone on the same prompts, timed once per repetition right before the hf modes.
Idle side: CPU seconds the worker processes used during the hf runs, and this process during ours, are recorded
(both should be ~0: the two sides never compete for the cores).

Output: one markdown table (with the exact command) on stdout and a JSON (atomic write) at --out, default
traces/cpu-<setup>-vs-baseline/vs-baseline.json (a traces/ folder needs a README.md and a manifest.json entry,
kind "bench-table", see traces/README.md) or runs/vs-baseline-tiny.json with --tiny. Bad input: one line, exit 2;
a worker process that dies: one line, exit 1. Not part of CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from ssd_runtime.specs import TINY_DRAFT, TINY_TARGET  # noqa: E402  (torch-free)
from ssd_sim.io.errors import ConfigError  # noqa: E402
from ssd_sim.io.values import utc_now  # noqa: E402
from ssd_sim.plan.plan import Plan  # noqa: E402

PROG = "vs_baseline"
HF_MODES = ("hf-ar", "hf-assisted")
OUR_MODES = ("ar", "sd", "ssd")
MODES = HF_MODES + OUR_MODES
REFERENCE = "hf-assisted"  # ratios are against transformers' assisted generation
GOALS = {"sd": 1.0, "ssd": 1.3}  # issue 13: end-to-end tok/s over hf-assisted on the benchmark machine
PRESETS = {"none": "qwen-coder-1.5b-0.5b-cpu", "int8": "qwen-coder-1.5b-0.5b-cpu-int8"}
TINY_PROMPTS = 4  # --tiny: this many random prompts unless --prompts says otherwise


# ---- results ---------------------------------------------------------------------------------------------------
@dataclass
class RunRecord:
    """One mode over the whole prompt set. Units: seconds, tokens."""

    mode: str
    rep: int  # repetition index; -1 = warm-up (never counted)
    outputs: list[list[int]]  # generated token ids per prompt
    e2e_s: float  # wall clock of the prompt set, prefill included
    prefill_s: float  # prefill of the prompt set (see the module docstring)
    faults: list[str] = field(default_factory=list)
    fallback_rounds: int = 0  # rounds the runtime ran autoregressively after a draft fault
    error: str | None = None  # the job failed (one line)
    summary: Any = None  # ours (records.Summary): the trace summary line (JobResult.summary)
    invalid: str | None = None  # why this run does not count; None = valid

    @property
    def tokens(self) -> int:
        return sum(len(o) for o in self.outputs)


def fallback_rounds(rounds: list[dict]) -> int:
    """How many round records say the runtime fell back to AR (a "fallback" key, after a draft fault)."""
    return sum(1 for r in rounds if r.fallback)


def invalid_reason(rec: RunRecord, num_prompts: int, max_new_tokens: int) -> str | None:
    """Why a run must not count (one line), or None when it is valid."""
    if rec.error:
        return f"failed: {rec.error}"
    if rec.faults:
        return "fault: " + "; ".join(rec.faults)
    if rec.fallback_rounds:
        return f"{rec.fallback_rounds} round(s) fell back to AR"
    if len(rec.outputs) != num_prompts:
        return f"{len(rec.outputs)} outputs for {num_prompts} prompts"
    short = [i for i, o in enumerate(rec.outputs) if len(o) != max_new_tokens]
    if short:
        return f"prompt {short[0]} got {len(rec.outputs[short[0]])} tokens, not {max_new_tokens}"
    return None


def median(xs: list[float]) -> float:
    """The median, NaN for no values."""
    return float(statistics.median(xs)) if xs else math.nan


def tok_s(tokens: float, seconds: float) -> float:
    """tokens / seconds (tok/s); NaN when no time passed."""
    return tokens / seconds if seconds > 0 else math.nan


def e2e_tok_s(rec: RunRecord) -> float:
    """End to end tok/s: all generated tokens over the wall clock of the prompt set, prefill included."""
    return tok_s(rec.tokens, rec.e2e_s)


def decode_tok_s(rec: RunRecord) -> float:
    """Decode-only tok/s: (tokens - one per prompt) / (end-to-end s - prefill s)."""
    return tok_s(rec.tokens - len(rec.outputs), rec.e2e_s - rec.prefill_s)


def mode_stats(records: list[RunRecord], modes: tuple[str, ...] = MODES) -> dict[str, dict]:
    """Per mode: runs, valid runs, the medians (tok/s end to end and decode-only, prefill ms per prompt) over the
    valid timed runs, and every timed run's values."""
    out = {}
    for mode in modes:
        timed = [r for r in records if r.mode == mode and r.rep >= 0]
        valid = [r for r in timed if r.invalid is None]
        out[mode] = {
            "runs": len(timed), "valid": len(valid),
            "e2e_tok_s": median([e2e_tok_s(r) for r in valid]),
            "decode_tok_s": median([decode_tok_s(r) for r in valid]),
            "prefill_ms_per_prompt": median([1e3 * r.prefill_s / max(len(r.outputs), 1) for r in valid]),
            "e2e_tok_s_runs": [e2e_tok_s(r) for r in timed], "decode_tok_s_runs": [decode_tok_s(r) for r in timed],
            "invalid": [f"rep {r.rep}: {r.invalid}" for r in timed if r.invalid],
        }
    return out


def add_ratios(stats: dict[str, dict], reference: str = REFERENCE) -> None:
    """Each mode's median tok/s over the reference mode's (end to end and decode-only), in place."""
    ref = stats.get(reference, {})
    for s in stats.values():
        for key in ("e2e_tok_s", "decode_tok_s"):
            base = ref.get(key, math.nan)
            s[f"{key}_vs_ref"] = s[key] / base if base and not math.isnan(base) else math.nan


def first_difference(a: list[int], b: list[int]) -> int | None:
    """Index of the first token where two outputs differ (the shorter length if one is a prefix); None if equal."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def output_mismatches(records: list[RunRecord], reference_mode: str = "hf-ar") -> tuple[list[list[int]], list[str]]:
    """The reference outputs (the first valid timed run of reference_mode, else of any mode) and one line per
    (valid timed run, prompt) whose output differs from them."""
    valid = [r for r in records if r.rep >= 0 and r.invalid is None]
    if not valid:
        return [], []
    ref = next((r for r in valid if r.mode == reference_mode), valid[0])
    lines = []
    for r in valid:
        for i, (a, b) in enumerate(zip(ref.outputs, r.outputs, strict=False)):
            pos = first_difference(a, b)
            if pos is not None:
                lines.append(f"{r.mode} rep {r.rep} prompt {i}: differs from {ref.mode} rep {ref.rep} at token {pos}")
    return ref.outputs, lines


def goal_lines(stats: dict[str, dict], goals: dict[str, float] = GOALS) -> list[tuple[str, float, float, bool]]:
    """(mode, end-to-end ratio to the reference, goal, met) per goal."""
    out = []
    for mode, goal in goals.items():
        x = stats.get(mode, {}).get("e2e_tok_s_vs_ref", math.nan)
        out.append((mode, x, goal, bool(x >= goal)))
    return out


def _fmt(x: float, spec: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)


def format_table(stats: dict[str, dict], labels: dict[str, dict[str, str]], command: str, notes: list[str]) -> str:
    """The result as a markdown table (ready for the README), the command above it and notes below it.
    labels[mode] holds "engine", "threads" and "kernels"."""
    head = ("mode", "engine", "threads", "kernels", "valid runs", "tok/s end to end", "tok/s decode-only",
            "prefill ms/prompt", f"e2e x {REFERENCE}", f"decode x {REFERENCE}")
    lines = [f"command: `{command}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for mode, s in stats.items():
        lab = labels.get(mode, {})
        cells = (mode, lab.get("engine", ""), lab.get("threads", ""), lab.get("kernels", ""),
                 f"{s['valid']}/{s['runs']}", _fmt(s["e2e_tok_s"], ".3f"), _fmt(s["decode_tok_s"], ".3f"),
                 _fmt(s["prefill_ms_per_prompt"], ".0f"), _fmt(s.get("e2e_tok_s_vs_ref"), ".2f"),
                 _fmt(s.get("decode_tok_s_vs_ref"), ".2f"))
        lines.append("| " + " | ".join(cells) + " |")
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines)


def json_safe(obj):
    """obj with every NaN / infinity replaced by None (strict JSON has neither)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def command_line(argv: list[str]) -> str:
    """The command as typed from the repository root: `.venv/bin/python bench/vs_baseline.py ARGS`."""
    py = Path(sys.executable)
    try:
        py_s = str(py.relative_to(ROOT)) if py.is_relative_to(ROOT) else "python"
    except ValueError:
        py_s = "python"
    script = Path(__file__).resolve()
    return shlex.join([py_s, str(script.relative_to(ROOT)) if script.is_relative_to(ROOT) else str(script), *argv])


# ---- arguments ---------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen-coder-1.5b", help="fetched name, HF folder or .gguf (default qwen-coder-1.5b)")
    ap.add_argument("--draft", default="qwen-coder-0.5b", help="the same for the draft (default qwen-coder-0.5b)")
    ap.add_argument("--tiny", action="store_true", help="tiny random models and random prompt ids (a smoke run)")
    ap.add_argument("--quantize", choices=("none", "int8"), default="none",
                    help="int8 dynamic quantisation of every Linear, both models, both sides")
    ap.add_argument("--linear", choices=("auto", "dense", "onednn"), default="auto",
                    help="our fp32 CPU Linear kernels (ModelSpec.linear; auto = oneDNN-prepacked where possible)")
    ap.add_argument("--hf-linear", choices=("dense", "onednn"), default="dense",
                    help="transformers' Linear kernels: dense = torch's stock kernels (what users have), onednn = "
                         "the runtime's prepacked ones (same kernels on both sides)")
    ap.add_argument("--hf-threads", type=int, default=2, metavar="N",
                    help="torch threads of the transformers runs, one process (default 2 = both cores)")
    ap.add_argument("--hf-assistant-tokens", type=int, metavar="K",
                    help="fix transformers' draft length (num_assistant_tokens, constant schedule); default: its own")
    ap.add_argument("--preset", help=f"profile the SSD / SD plan is made for (default {PRESETS['none']}, or "
                                     f"{PRESETS['int8']} with --quantize int8)")
    ap.add_argument("--profile", metavar="FILE", help="a calibrated profile file instead of --preset (e.g. from "
                                                      "`ssd-run calibrate-here`)")
    ap.add_argument("--prompts", "--num-prompts", dest="prompts", type=int, metavar="N",
                    help="use the first N prompts of the code set (default 8, the CPU reference's workload)")
    ap.add_argument("--max-new-tokens", type=int, default=64, metavar="N", help="tokens per prompt (default 64)")
    ap.add_argument("--repeats", type=int, default=3, metavar="R", help="timed repetitions per mode (>= 3 for a "
                                                                        "result; default 3)")
    ap.add_argument("--draft-timeout", type=float, default=120.0, metavar="S",
                    help="seconds the target waits for the draft before finishing autoregressively (an invalid run)")
    ap.add_argument("--out", metavar="FILE", help="JSON result (default traces/cpu-<setup>-vs-baseline/"
                                                  "vs-baseline.json, runs/vs-baseline-tiny.json with --tiny)")
    return ap


def check_args(args: argparse.Namespace) -> None:
    """Bad input as one ConfigError naming the flag."""
    from ssd_runtime.prompts import CODE_PROMPTS

    n_max = len(CODE_PROMPTS)  # --tiny makes as many random prompts as the code set has
    if args.prompts is not None and not 1 <= args.prompts <= n_max:
        raise ConfigError("prompts", f"must be in 1..{n_max} (the size of the code prompt set), got {args.prompts}")
    if not 1 <= args.max_new_tokens <= 4096:
        raise ConfigError("max_new_tokens", f"must be in 1..4096, got {args.max_new_tokens}")
    if not 1 <= args.repeats <= 100:
        raise ConfigError("repeats", f"must be in 1..100, got {args.repeats}")
    if not 1 <= args.hf_threads <= 256:
        raise ConfigError("hf_threads", f"must be in 1..256, got {args.hf_threads}")
    if not (args.draft_timeout > 0 and math.isfinite(args.draft_timeout)):
        raise ConfigError("draft_timeout", f"must be a positive number of seconds, got {args.draft_timeout}")
    if args.hf_assistant_tokens is not None and not 1 <= args.hf_assistant_tokens <= 64:
        raise ConfigError("hf_assistant_tokens", f"must be in 1..64, got {args.hf_assistant_tokens}")
    if args.preset and args.profile:
        raise ConfigError("profile", "give --preset or --profile, not both")
    if args.quantize == "int8" and "onednn" in (args.linear, args.hf_linear):
        raise ConfigError("linear", "oneDNN-prepacked kernels are for float32; int8 runs the int8 dynamic kernels "
                                    "(leave --linear auto and --hf-linear dense)")


def default_out(args: argparse.Namespace) -> str:
    """traces/cpu-<setup>-vs-baseline/vs-baseline.json (fp32 or int8), runs/vs-baseline-tiny.json for --tiny."""
    if args.tiny:
        return "runs/vs-baseline-tiny.json"
    return f"traces/cpu-{'fp32' if args.quantize == 'none' else 'int8'}-vs-baseline/vs-baseline.json"


# ---- plans -------------------------------------------------------------------------------------------------------
def plans_for(args: argparse.Namespace) -> tuple[Plan, Plan, dict]:
    """(SD plan, SSD plan, planner prediction) from one make_plan(profile, b = 1, T = 0) result. The SD plan is the
    result's best SD K with Saguaro C = 1 and no per-position C: SD never down-weights."""
    from ssd_sim.model.presets import load_profile
    from ssd_sim.plan.planner import make_plan

    source = args.profile or args.preset or PRESETS[args.quantize]
    profile = load_profile(None, args.profile) if args.profile else load_profile(source)
    res = make_plan(profile)
    ssd = res.plan.replace(batch_size=1, temperature=0.0, mode="ssd")
    sd = Plan(num_speculative_tokens=res.sd.num_speculative_tokens, saguaro_c=1.0, saguaro_c_list=(),
              batch_size=1, temperature=0.0, mode="sd")
    assert sd.saguaro_c == 1.0 and not sd.saguaro_c_list and all(sd.c_at(k) == 1.0 for k in range(sd.K)), \
        "SD must never apply Saguaro C"
    pred = {"profile": source, "ar_tok_s": res.ar.per_seq_tok_s, "sd_tok_s": res.sd.per_seq_tok_s,
            "ssd_tok_s": res.ssd.per_seq_tok_s, "sd_K": res.sd.num_speculative_tokens, "ssd_K": ssd.K,
            "note": "decode-only predictions of the planner for its profile"}
    return sd, ssd, pred


# ---- models and prompts ------------------------------------------------------------------------------------------
def model_specs(args: argparse.Namespace):
    """(our target, our draft, transformers' target, transformers' draft) ModelSpecs: same files and quantisation,
    each side its Linear kernels."""
    from ssd_runtime.models import ModelSpec, resolve_path

    if args.tiny:
        t, d = ModelSpec.tiny_spec(**TINY_TARGET), ModelSpec.tiny_spec(**TINY_DRAFT)
    else:
        t = ModelSpec(path=str(resolve_path(args.target, "target")))
        d = ModelSpec(path=str(resolve_path(args.draft, "draft")))
    ours_linear = args.linear if args.quantize == "none" else "auto"
    ours = [dataclasses.replace(s, quantize=args.quantize, linear=ours_linear) for s in (t, d)]
    hf = [dataclasses.replace(s, quantize=args.quantize, linear=args.hf_linear if args.quantize == "none" else "dense")
          for s in (t, d)]
    return ours[0], ours[1], hf[0], hf[1]


def prompt_ids(args: argparse.Namespace, target_spec) -> tuple[list[list[int]], str, object]:
    """Token ids of the workload, a label for it, and the tokenizer (None for --tiny: random ids)."""
    from ssd_runtime.prompts import encode, prompt_set

    if args.tiny:
        import torch

        g = torch.Generator().manual_seed(0)
        n = args.prompts or TINY_PROMPTS
        ids = [torch.randint(0, TINY_TARGET["vocab"], (12 + 2 * i,), generator=g).tolist() for i in range(n)]
        return ids, f"random ids (seed 0), {n} prompts of 12.. tokens", None
    from ssd_runtime.models import load_tokenizer

    tok = load_tokenizer(Path(target_spec.path))
    n = args.prompts or 8
    return encode(prompt_set("code")[:n], tok), f"prompt-set:code[0:{n}]", tok


# ---- the two sides -----------------------------------------------------------------------------------------------
class HFSide:
    """transformers' generate in this process: target alone, or with the draft as assistant_model."""

    def __init__(self, target_spec, draft_spec, threads: int, assistant_tokens: int | None = None):
        import torch
        from transformers.utils import logging as hf_logging

        from ssd_runtime.models import load_model

        hf_logging.set_verbosity_error()
        torch.set_num_threads(threads)
        self.torch = torch
        self.target, self.draft = load_model(target_spec, "target"), load_model(draft_spec, "draft")
        pad = getattr(self.target.model.generation_config, "pad_token_id", None)
        self.pad = pad if isinstance(pad, int) else 0
        if assistant_tokens is not None:  # a fixed draft length instead of transformers' default
            self.draft.model.generation_config.num_assistant_tokens = assistant_tokens
            self.draft.model.generation_config.num_assistant_tokens_schedule = "constant"

    def generate(self, ids: list[int], max_new_tokens: int, assisted: bool) -> list[int]:
        """Greedy continuation of one prompt (generated ids only; EOS ignored)."""
        x = self.torch.tensor([ids])
        out = self.target.model.generate(
            x, attention_mask=self.torch.ones_like(x), max_new_tokens=max_new_tokens, do_sample=False,
            eos_token_id=None, pad_token_id=self.pad, assistant_model=self.draft.model if assisted else None)
        return out[0, len(ids):].tolist()

    def run(self, mode: str, prompts: list[list[int]], max_new_tokens: int, rep: int, prefill_s: float) -> RunRecord:
        """One mode over the prompt set, timed end to end; prefill_s is this repetition's measured prefill."""
        t0 = time.perf_counter()
        try:
            outs = [self.generate(p, max_new_tokens, mode == "hf-assisted") for p in prompts]
        except Exception as e:  # noqa: BLE001 - one line in the table, the run does not count
            return RunRecord(mode, rep, [], time.perf_counter() - t0, prefill_s, error=_one_line(e))
        return RunRecord(mode, rep, outs, time.perf_counter() - t0, prefill_s)

    def prefill_s(self, prompts: list[list[int]]) -> float:
        """Seconds of generate(max_new_tokens=1) of the target alone over the prompt set (prefill + first token)."""
        t0 = time.perf_counter()
        for p in prompts:
            self.generate(p, 1, False)
        return time.perf_counter() - t0

    def assistant_settings(self) -> dict:
        """The assisted-generation settings transformers uses: the draft's generation_config, else its defaults."""
        cfg = self.draft.model.generation_config
        defaults = getattr(cfg, "_get_default_generation_params", dict)()
        keys = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
        return {k: getattr(cfg, k, None) if getattr(cfg, k, None) is not None else defaults.get(k) for k in keys}


def our_run(session, plan: Plan, mode: str, prompts: list[list[int]], max_new_tokens: int, rep: int,
            draft_timeout_s: float) -> RunRecord:
    """One mode over the prompt set through the Session, timed end to end around Session.run."""
    from ssd_runtime.run import Job

    job = Job(plan.replace(mode=mode), prompts, max_new_tokens, ignore_eos=True,
              draft_timeout_s=draft_timeout_s)
    t0 = time.perf_counter()
    try:
        res = session.run(job)
    except ConfigError as e:  # e.g. a speculative job refused after the draft failed
        return RunRecord(mode, rep, [], time.perf_counter() - t0, 0.0, error=_one_line(e))
    e2e = time.perf_counter() - t0
    return RunRecord(mode, rep, res.outputs, e2e, res.summary.prefill_ms / 1e3, list(res.faults),
                     fallback_rounds(res.rounds), summary=res.summary)


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (Linux /proc), NaN when unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, TypeError):
        return math.nan


def own_cpu_seconds() -> float:
    """User + system CPU seconds of this process and its threads."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _one_line(e: BaseException) -> str:
    text = (str(e).strip().splitlines() or [""])[0][:300]
    return f"{type(e).__name__}: {text}"


# ---- the benchmark -----------------------------------------------------------------------------------------------
def run_all(hf: HFSide, session, plans: dict[str, Plan], prompts: list[list[int]], args: argparse.Namespace,
            log: Callable[[str], None]) -> tuple[list[RunRecord], dict]:
    """Warm-up of every mode, then the interleaved repetitions; returns all records and the idle-side CPU use."""
    workers = [session.tproc.pid, session.draft_pid]
    idle = {"workers_cpu_s_during_hf": 0.0, "controller_cpu_s_during_ours": 0.0}

    def one(mode: str, rep: int, ps: list[list[int]], prefill: float) -> RunRecord:
        t = time.perf_counter()
        if mode in HF_MODES:
            before = sum(cpu_seconds(p) for p in workers)
            rec = hf.run(mode, ps, args.max_new_tokens, rep, prefill)
            idle["workers_cpu_s_during_hf"] += sum(cpu_seconds(p) for p in workers) - before
        else:
            before = own_cpu_seconds()
            rec = our_run(session, plans[mode], mode, ps, args.max_new_tokens, rep, args.draft_timeout)
            idle["controller_cpu_s_during_ours"] += own_cpu_seconds() - before
        rec.invalid = invalid_reason(rec, len(ps), args.max_new_tokens)
        what = "warm-up" if rep < 0 else f"rep {rep + 1}/{args.repeats}"
        status = "" if rec.invalid is None else f"  INVALID ({rec.invalid})"
        log(f"{what} {mode:>11}: {e2e_tok_s(rec):.3f} tok/s end to end ({time.perf_counter() - t:.0f} s){status}")
        return rec

    records = []
    warm_prefill = hf.prefill_s(prompts[:1])
    for mode in MODES:
        records.append(one(mode, -1, prompts[:1], warm_prefill))
    for rep in range(args.repeats):
        prefill = hf.prefill_s(prompts)
        for mode in MODES:
            records.append(one(mode, rep, prompts, prefill))
    return records, idle


def labels_for(args: argparse.Namespace, plans: dict[str, Plan], hf: HFSide, info: dict) -> dict[str, dict]:
    """Table labels per mode: engine, threads, kernels."""
    hf_k = f"{hf.target.extra.get('kernels')} / {hf.draft.extra.get('kernels')}"
    ours_t = (info.get("target") or {}).get("kernels", "?")
    ours_d = (info.get("draft") or {}).get("kernels", "?")
    ssd = plans["ssd"]
    fo = ",".join(str(f) for f in ssd.fan_out)
    return {
        "hf-ar": {"engine": "transformers generate", "threads": f"{args.hf_threads} (1 process)",
                  "kernels": hf.target.extra.get("kernels", "?")},
        "hf-assisted": {"engine": "generate(assistant_model=draft)", "threads": f"{args.hf_threads} (1 process)",
                        "kernels": hf_k},
        "ar": {"engine": "ssd-run ar", "threads": "1 (target process)", "kernels": ours_t},
        "sd": {"engine": f"ssd-run sd K={plans['sd'].K} C=1", "threads": "1+1 (2 processes)",
               "kernels": f"{ours_t} / {ours_d}"},
        "ssd": {"engine": f"ssd-run ssd K={ssd.K} F={fo} C={ssd.c_label} {ssd.backup_for(1)}",
                "threads": "1+1 (2 processes)", "kernels": f"{ours_t} / {ours_d}"},
    }


def record_dict(r: RunRecord) -> dict:
    """A run for the JSON (no outputs: those are checked and stored once)."""
    d = {"mode": r.mode, "rep": r.rep, "valid": r.invalid is None, "invalid": r.invalid, "tokens": r.tokens,
         "e2e_s": r.e2e_s, "prefill_s": r.prefill_s, "e2e_tok_s": e2e_tok_s(r), "decode_tok_s": decode_tok_s(r),
         "faults": r.faults, "fallback_rounds": r.fallback_rounds, "error": r.error}
    if r.summary:
        s = r.summary
        d["runtime"] = {k: getattr(s, k) for k in ("tok_s", "wall_s", "tokens", "rounds", "prefill_ms",
                                              "mean_accept_len", "acceptance_rate", "hit_rate", "phase_ms")}
    return d


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    try:
        return _main(args, argv)
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted; stopped all processes", file=sys.stderr)
        return 130


def _main(args: argparse.Namespace, argv: list[str]) -> int:
    from ssd_sim.io.host import current_host
    from ssd_sim.io.jsonfile import check_writable, save_json_atomic

    check_args(args)
    out = args.out or default_out(args)
    check_writable(out, "out")
    sd_plan, ssd_plan, predicted = plans_for(args)
    plans = {"ar": Plan(batch_size=1, temperature=0.0, mode="ar"), "sd": sd_plan, "ssd": ssd_plan}
    ours_t, ours_d, hf_t, hf_d = model_specs(args)
    prompts, source, tokenizer = prompt_ids(args, ours_t)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    from ssd_runtime.run import Session, WorkerError

    log(f"SD plan: {json.dumps(sd_plan.to_dict())}\nSSD plan: {json.dumps(ssd_plan.to_dict())}")
    t0 = time.perf_counter()
    try:
        with Session(ours_t, ours_d, draft_timeout_s=args.draft_timeout) as session:
            info = session.info
            hf = HFSide(hf_t, hf_d, args.hf_threads, args.hf_assistant_tokens)
            log(f"models loaded in {time.perf_counter() - t0:.0f} s; {len(prompts)} prompts x "
                f"{args.max_new_tokens} tokens, {args.repeats} repetition(s)")
            records, idle = run_all(hf, session, plans, prompts, args, log)
    except WorkerError as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return 1

    stats = mode_stats(records)
    add_ratios(stats)
    ref_outputs, mismatches = output_mismatches(records)
    goals = goal_lines(stats)
    no_valid = [m for m, s in stats.items() if s["valid"] == 0]
    command = command_line(argv)
    notes = [f"{len(prompts)} prompts ({source}) x {args.max_new_tokens} new tokens, b = 1, greedy, EOS ignored; "
             f"quantize {args.quantize} on both sides; median of {args.repeats} interleaved repetition(s) after one "
             "warm-up run per mode",
             "end to end = tokens / wall clock of the prompt set (prefill included); decode-only = (tokens - 1 per "
             "prompt) / (end to end - prefill), prefill = the target's prefill (ours: its prefill forward; "
             "transformers: generate(max_new_tokens=1) of the target alone)",
             f"threads: transformers {args.hf_threads} torch threads in one process; ours one thread per process, "
             "target pinned to core 0 and draft to core 1; idle side CPU: workers "
             f"{idle['workers_cpu_s_during_hf']:.1f} s during transformers runs, this process "
             f"{idle['controller_cpu_s_during_ours']:.1f} s during ours",
             "outputs identical across all valid runs: " + ("yes" if not mismatches and ref_outputs else
                                                            f"NO ({len(mismatches)} differences)")]
    notes += [f"goal {m} >= {g:g}x {REFERENCE} end to end: {_fmt(x, '.2f')}x, {'met' if ok else 'missed'}"
              for m, x, g, ok in goals]
    if args.repeats < 3:
        notes.append(f"only {args.repeats} repetition(s): a check, not a result (the protocol asks for >= 3)")
    for m, s in stats.items():
        notes += [f"INVALID {m} {line}" for line in s["invalid"]]
    notes += [f"DIFF {line}" for line in mismatches[:10]]
    print(format_table(stats, labels_for(args, plans, hf, info), command, notes))

    host = current_host().to_dict()
    import torch
    import transformers

    result = {
        "schema": "ssd-vs-baseline/1", "command": command, "argv": argv,
        "workload": {"prompts": source, "num_prompts": len(prompts), "max_new_tokens": args.max_new_tokens,
                     "batch_size": 1, "temperature": 0.0, "ignore_eos": True},
        "models": {"target": ours_t.label, "draft": ours_d.label, "quantize": args.quantize,
                   "ours": {"target": info.get("target"), "draft": info.get("draft")},
                   "transformers": {"target": hf.target.extra, "draft": hf.draft.extra}},
        "threads": {"transformers": args.hf_threads, "ours": "1 per process, 2 processes (target core 0, draft core 1)"},
        "plans": {"sd": sd_plan.to_dict(), "ssd": ssd_plan.to_dict()}, "predicted": predicted,
        "hf_assistant_settings": hf.assistant_settings(),
        "repeats": args.repeats, "stats": stats, "goals": [
            {"mode": m, "e2e_vs_hf_assisted": x, "goal": g, "met": ok} for m, x, g, ok in goals],
        "outputs_identical": bool(ref_outputs) and not mismatches, "mismatches": mismatches,
        "reference_outputs": ref_outputs,
        "reference_texts": [tokenizer.decode(o) for o in ref_outputs] if tokenizer is not None else None,
        "idle_cpu_s": idle, "runs": [record_dict(r) for r in records],
        "host": host, "versions": {"python": sys.version.split()[0], "torch": torch.__version__,
                                   "transformers": transformers.__version__},
        "finished_at": utc_now(),
    }
    path = save_json_atomic(out, json.dumps(json_safe(result), indent=2, default=str, allow_nan=False), "out")
    print(f"\nJSON: {path}")
    if no_valid:
        print(f"{PROG}: error: no valid run of {', '.join(no_valid)}", file=sys.stderr)
        return 1
    if mismatches and args.quantize == "none":
        print(f"{PROG}: error: outputs differ across modes ({mismatches[0]}; {len(mismatches)} in all)",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
