"""Encoded copies of the argument rules of the engines we emit commands for.

Each checker takes the argument list an emitter produced and returns the violations the engine would raise
(an argparse error, an assert, a config validation error), [] if it would start. The rules are transcribed
from the engines' sources as read on 2026-12-01; the repository and version each follows is in ENGINE_SOURCES.
They are deliberately strict: where an engine silently rewrites a value (SGLang's draft-token count with
top-k 1), a command that relies on the rewrite is reported, so we never emit one that runs other than it reads.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math

ENGINE_SOURCES = {
    "ssd-engine": "github.com/tanishqkumar/ssd at 6ed3022 (2026-03-05): bench/bench.py parse_arguments, "
                  "bench/bench_helpers.py get_model_paths, ssd/config.py Config.__post_init__, "
                  "ssd/engine/model_runner.py ModelRunner.__init__ / setup_and_warmup_model_and_cudagraphs",
    "vllm": "github.com/vllm-project/vllm at 9b849b1: vllm/v1/spec_decode/draft_model.py DraftModelProposer.__init__ "
            "(_raise_if_draft_tp_mismatch: draft TP must equal the target's; _raise_if_padded_drafter_batch_disabled), "
            "vllm/config/speculative.py SpeculativeConfig (pydantic, extra='forbid'; _verify_and_get_draft_tp: 1 or "
            "the target's TP, unset = the target's)",
    "sglang": "github.com/sgl-project/sglang: python/sglang/srt/server_args.py + arg_groups/speculative_hook.py "
              "_handle_eagle_family (STANDALONE; all three of steps / topk / draft tokens or none; topk 1 -> draft "
              "tokens = steps + 1), read 2026-12-01",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse would print usage and exit 2
        raise ValueError(message)


def _parse(parser: argparse.ArgumentParser, args: list[str]) -> tuple[argparse.Namespace | None, list[str]]:
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return parser.parse_args(args), []
        except ValueError as e:
            return None, [f"argparse: {e}"]


# --- reference engine: python bench/bench.py ------------------------------------------------------------------

REFERENCE_SIZES = ("0.6", "1.7", "4", "8", "14", "32", "1", "3", "70")
REFERENCE_COMMIT = "6ed3022256dd7661e0ad53356f1eccda6239340f"  # github.com/tanishqkumar/ssd, 2026-03-05
# bench_helpers.get_model_paths / _get_draft_model_path: the sizes each family has (a ValueError otherwise)
REFERENCE_FAMILY_SIZES = {"llama": ("1", "3", "8", "70"), "qwen": ("0.6", "1.7", "4", "8", "14", "32")}
REFERENCE_DRAFT_SIZES = {"llama": ("1", "3", "8", "70"), "qwen": ("0.6", "1.7", "4", "8", "14", "32")}


def _reference_parser() -> argparse.ArgumentParser:
    """bench.py parse_arguments at REFERENCE_COMMIT (Llama is the default family, --qwen selects Qwen)."""
    p = _Parser(prog="bench.py", add_help=False, allow_abbrev=False)
    p.add_argument("--size", type=str, choices=REFERENCE_SIZES, default="70")
    p.add_argument("--llama", action="store_true", default=True)
    p.add_argument("--qwen", action="store_true")
    p.add_argument("--draft", type=str, default=None)
    p.add_argument("--eager", action="store_true")
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--spec", action="store_true")
    p.add_argument("--eagle", action="store_true")
    p.add_argument("--k", type=int, default=6)
    p.add_argument("--async", action="store_true")
    p.add_argument("--f", type=int, default=3)
    p.add_argument("--fl", type=int, nargs="+", default=None)
    p.add_argument("--flh", type=int, nargs="+", default=None)
    p.add_argument("--flm", type=int, nargs="+", default=None)
    p.add_argument("--backup", type=str, choices=["jit", "fast"], default="jit")
    p.add_argument("--block_sz", type=int, default=256)
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--max_model_len", type=int, default=8192)
    p.add_argument("--input_len", type=int, default=128)
    p.add_argument("--output_len", type=int, default=512)
    p.add_argument("--numseqs", type=int, default=128)
    p.add_argument("--temp", type=float, default=0.0)
    p.add_argument("--dtemp", type=float, default=None)
    p.add_argument("--x", type=float, default=None)
    p.add_argument("--prompt_offset", type=int, default=0)
    p.add_argument("--chat_template", action="store_true")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--sweep", type=str, default=None)
    return p


def _reference_models(ns: argparse.Namespace, args: list[str]) -> list[str]:
    """parse_arguments' family assert and get_model_paths' size checks."""
    if ns.qwen and "--llama" in args:
        return ["--llama and --qwen: bench.py asserts they are mutually exclusive"]
    family = "qwen" if ns.qwen else "llama"
    errs = []
    if ns.size not in REFERENCE_FAMILY_SIZES[family]:
        errs.append(f"--size {ns.size}: get_model_paths raises 'Size {ns.size} not available for {family.title()} "
                    f"models' (sizes {list(REFERENCE_FAMILY_SIZES[family])}; --qwen selects Qwen)")
    if ns.draft is not None and ns.draft not in REFERENCE_DRAFT_SIZES[family]:
        errs.append(f"--draft {ns.draft}: no {family.title()} draft of that size")
    return errs


def check_reference(args: list[str]) -> list[str]:
    """Violations of the reference engine's rules by `python bench/bench.py ARGS` (SSD or SD runs)."""
    ns, errs = _parse(_reference_parser(), args)
    if ns is None:
        return errs
    errs += _reference_models(ns, args)
    K, F = ns.k, ns.f
    if not 1 <= ns.gpus <= 8:
        errs.append(f"--gpus {ns.gpus}: Config asserts 1 <= num_gpus <= 8 (one node)")
    if ns.b < 1:
        errs.append(f"--b {ns.b}: max_num_seqs must be >= 1")
    if ns.temp < 0 or not math.isfinite(ns.temp):
        errs.append(f"--temp {ns.temp}: must be a finite temperature >= 0")
    if ns.spec and K < 1:
        errs.append(f"--k {K}: speculate_k must be >= 1")
    if not getattr(ns, "async"):
        if ns.x is not None:
            errs.append("--x needs --async (ModelRunner: sampler_x requires draft_async)")
        return errs
    if not ns.spec:
        errs.append("--async needs --spec")
    if ns.gpus < 2:
        errs.append(f"--gpus {ns.gpus}: LLMEngine asserts draft_async requires at least 2 gpus")
    if ns.block_sz < 2 * K + 2:
        errs.append(f"--k {K}: the engine needs block_sz >= 2K + 2 ({ns.block_sz})")
    if F < 1:
        errs.append(f"--f {F}: the engine sizes its branch buffers by F (K + 1) and needs F >= 1")
    hit = ns.flh if ns.flh is not None else [F] * (K + 1)
    miss = ns.flm if ns.flm is not None else hit
    for name, fl in (("--flh", hit), ("--flm", miss)):
        if len(fl) != K + 1:
            errs.append(f"{name} has {len(fl)} entries: fan_out_list must be length speculate_k + 1 = {K + 1}")
        if any(f < 0 for f in fl):
            errs.append(f"{name} {fl}: fan-outs must be >= 0")
        if sum(fl) != F * (K + 1):
            errs.append(f"{name} sums to {sum(fl)}: the engine's buffers hold F (K + 1) = {F * (K + 1)} branches "
                        "(and with --x it asserts sum == F (K + 1))")
    if not any(f > 0 for f in hit):
        errs.append("--flh: the engine asserts any(f > 0 for f in fan_out_list)")
    if sum(miss) != sum(hit):
        errs.append(f"--flm sums to {sum(miss)}, --flh to {sum(hit)}: Config asserts they are equal")
    if ns.x is not None and not 0.0 <= ns.x <= 1.0:
        errs.append(f"--x {ns.x}: Saguaro's C is a weight in [0, 1]")
    return errs


# --- vLLM: vllm serve MODEL --speculative-config JSON --------------------------------------------------------

VLLM_SPEC_FIELDS = {"model": str, "method": str, "num_speculative_tokens": int, "draft_tensor_parallel_size": int,
                    "quantization": str, "max_model_len": int, "revision": str, "code_revision": str,
                    "parallel_drafting": bool, "draft_sample_method": str, "rejection_sample_method": str,
                    "use_heterogeneous_vocab": bool, "enforce_eager": bool, "disable_padded_drafter_batch": bool}
VLLM_METHODS = ("ngram", "medusa", "mlp_speculator", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
                "extract_hidden_states", "dflash", "ngram_gpu", "dspark", "mtp")


def _vllm_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vllm", add_help=False, allow_abbrev=False)
    p.add_argument("command", choices=["serve"])
    p.add_argument("model", type=str)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--speculative-config", type=str, default=None)
    return p


def check_vllm(args: list[str]) -> list[str]:
    """Violations of vLLM's rules by `vllm ARGS` with a draft-model --speculative-config."""
    ns, errs = _parse(_vllm_parser(), args)
    if ns is None:
        return errs
    tp = ns.tensor_parallel_size
    if tp < 1:
        errs.append(f"--tensor-parallel-size {tp}: must be >= 1")
    if ns.speculative_config is None:
        return errs
    try:
        cfg = json.loads(ns.speculative_config)
    except json.JSONDecodeError as e:
        return errs + [f"--speculative-config is not JSON: {e}"]
    if not isinstance(cfg, dict):
        return errs + ["--speculative-config must be a JSON object"]
    for key, val in cfg.items():
        if key == "tensor_parallel_size":
            errs.append("'tensor_parallel_size' is not a valid argument in the speculative_config; "
                        "pass 'draft_tensor_parallel_size'")
        elif key not in VLLM_SPEC_FIELDS:
            errs.append(f"unknown speculative_config field {key!r} (extra fields are forbidden)")
        elif not isinstance(val, VLLM_SPEC_FIELDS[key]) or (VLLM_SPEC_FIELDS[key] is int and isinstance(val, bool)):
            errs.append(f"speculative_config.{key} must be {VLLM_SPEC_FIELDS[key].__name__}, got {val!r}")
    if cfg.get("method") not in (None, *VLLM_METHODS):
        errs.append(f"speculative_config.method {cfg['method']!r} is not one of {VLLM_METHODS}")
    if "model" not in cfg and cfg.get("method") in (None, "draft_model"):
        errs.append("speculative_config.model (the draft model) is required for method draft_model")
    n = cfg.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        errs.append(f"speculative_config.num_speculative_tokens must be an int > 0, got {n!r}")
    dtp = cfg.get("draft_tensor_parallel_size")
    if dtp is not None and dtp not in (1, tp):
        errs.append(f"draft_tensor_parallel_size {dtp} cannot be other than 1 or the target's tensor_parallel_size {tp}")
    elif cfg.get("method") in (None, "draft_model") and dtp not in (None, tp):  # DraftModelProposer.__init__
        errs.append(f"Currently, 'draft_tensor_parallel_size' and 'tensor_parallel_size' must be the same. Got {dtp} "
                    f"and {tp} (DraftModelProposer)")
    if cfg.get("method") in (None, "draft_model") and cfg.get("disable_padded_drafter_batch"):
        errs.append("draft models only support the padded drafter batch: drop disable_padded_drafter_batch")
    return errs


# --- SGLang: python -m sglang.launch_server -----------------------------------------------------------------

SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")


def _sglang_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="sglang.launch_server", add_help=False, allow_abbrev=False)
    p.add_argument("--model-path", type=str, required=True)
    p.add_argument("--tp-size", "--tensor-parallel-size", type=int, default=1)
    p.add_argument("--speculative-algorithm", type=str, choices=SGLANG_ALGORITHMS, default=None)
    p.add_argument("--speculative-draft-model-path", "--speculative-draft-model", type=str, default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    return p


def check_sglang(args: list[str]) -> list[str]:
    """Violations of SGLang's rules by `python -m sglang.launch_server ARGS` for STANDALONE draft-model SD."""
    ns, errs = _parse(_sglang_parser(), args)
    if ns is None:
        return errs
    if ns.tp_size < 1:
        errs.append(f"--tp-size {ns.tp_size}: must be >= 1")
    if ns.speculative_algorithm is None:
        return errs
    if ns.speculative_algorithm == "STANDALONE" and ns.speculative_draft_model_path is None:
        errs.append("STANDALONE needs --speculative-draft-model-path")
    trio = (ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens)
    if any(v is None for v in trio):
        if any(v is not None for v in trio):
            errs.append("set all three of --speculative-num-steps / --speculative-eagle-topk / "
                        "--speculative-num-draft-tokens or none (the server asserts it)")
        return errs
    steps, topk, tokens = trio
    if steps < 1 or topk < 1 or tokens < 1:
        errs.append(f"steps {steps}, topk {topk}, draft tokens {tokens}: each must be >= 1")
    if topk == 1 and tokens != steps + 1:
        errs.append(f"--speculative-num-draft-tokens {tokens} with topk 1 is rewritten to num_steps + 1 = {steps + 1}")
    return errs


CHECKERS = {"ssd-engine": check_reference, "vllm": check_vllm, "sglang": check_sglang}


def check(engine: str, args: list[str]) -> list[str]:
    """The violations of `engine`'s rules by an emitted argument list ([] = the engine accepts it)."""
    return CHECKERS[engine](list(args))
