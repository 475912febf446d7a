"""`ssd-sim`: simulate AR, SD or SSD decoding of a plan on a profile with the SimPy event model.

    ssd-sim --preset NAME | --profile FILE [--plan plan.json] [knob flags] [--mode MODE]
            [-b B] [--tokens N] [--seed S] [--workload fixed|poisson --rate R --num-requests N --max-batch B]
            [--workload arrivals --arrivals FILE] [--replay TRACE.jsonl] [--json] [--chrome-trace out.json]

Without --plan the plan comes from the planner (ssd-plan's search) with the given knob flags fixed;
with --plan the knob flags override the plan file's fields. Bad input: one line naming the field and
the fix, exit status 2, and no output file is written; --chrome-trace is checked before the simulation.
Sizes are bounded by ssd_sim.io.limits (tokens per sequence, requests, batch); within them a run of any
length works in bounded memory (ssd_sim.sim.des).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

import numpy as np

from ssd_sim.cli.args import (
    OneLineParser,
    add_horizon_arg,
    add_knob_args,
    bounded_int,
    cli_entry,
    fail,
    knob_flags,
    nonneg_float,
)
from ssd_sim.cli.growth import ProfileAt, growth, growth_line, mean_lengths
from ssd_sim.cli.source import (
    add_source_args,
    at_last_token,
    at_workload_context,
    growing_note,
    profile_of,
    source_files,
    source_of,
)
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import read_json_object, save_json_atomic
from ssd_sim.io.limits import MAX_BATCH, MAX_REQUESTS, MAX_TOKENS
from ssd_sim.io.outputs import check_outputs
from ssd_sim.io.sanity import arrivals_warning, rate_warning
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.profile import Profile
from ssd_sim.model.tracematch import mismatch_line
from ssd_sim.plan.intervals import at_horizon, scaled_interval
from ssd_sim.plan.knobs import check_mode_flags, ignored_at_greedy, resolve
from ssd_sim.plan.plan import Plan, load_plan
from ssd_sim.plan.planner import OBJECTIVES, PlanRequest, make_plan
from ssd_sim.plan.predict import Prediction, predict
from ssd_sim.plan.report import host_report, memory_report
from ssd_sim.sim.capacity import Load, overload_line
from ssd_sim.sim.des import MODES, SimResult, outcome_source, plan_for_mode, simulate
from ssd_sim.sim.metrics import json_safe
from ssd_sim.sim.workload import (
    ARRIVALS_HINT,
    DEFAULT_PROMPT_TOKENS,
    MAX_RATE,
    MIN_RATE,
    OUTPUT_DISTS,
    WORKLOADS,
    Workload,
    file_prompt_lengths,
    read_arrivals,
)

PROG = "ssd-sim"
MAX_SEED = 2**32 - 1  # seeds 0..2^32 - 1 (numpy takes no negative seed)


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Simulate AR / SD / SSD decoding of a plan (SimPy event model).")
    src = p.add_argument_group("profile (one of)")
    src.add_argument("--preset", metavar="NAME", help="built-in profile (see ssd-plan --list-presets)")
    src.add_argument("--profile", metavar="FILE", help="profile JSON (from ssd-plan calibrate)")
    add_source_args(src)
    p.add_argument("--plan", metavar="FILE", help="plan file from ssd-plan; knob flags override its fields")
    p.add_argument("--mode", choices=MODES, default="ssd",
                   help="ar, sd, ssd (the plan's backup), ssd-fast (fast backup), ssd-adaptive (switch at b*)")
    p.add_argument("--objective", choices=OBJECTIVES, default="latency",
                   help="what the planner optimises when no --plan is given (default latency)")
    add_knob_args(p)
    w = p.add_argument_group("simulated workload")
    w.add_argument("--tokens", type=bounded_int(1, MAX_TOKENS, "output tokens per sequence"), default=512, metavar="N",
                   help=f"output tokens per sequence (mean of --output-dist; 1..{MAX_TOKENS}, default 512)")
    w.add_argument("--workload", choices=WORKLOADS, default="fixed",
                   help="fixed: the batch starts together; poisson: arrivals at --rate; arrivals: the arrival times "
                        "of --arrivals FILE (both with continuous batching)")
    w.add_argument("--rate", type=nonneg_float, metavar="R",
                   help=f"poisson: arrival rate (requests per second, {MIN_RATE:g}..{MAX_RATE:g})")
    w.add_argument("--arrivals", metavar="FILE",
                   help=f"arrivals: {ARRIVALS_HINT}; times in ms from the start, sorted; an optional \"prompt_tokens\" "
                        "(one number, or one per request: the simulator prefills every request with their median)")
    w.add_argument("--num-requests", type=bounded_int(1, MAX_REQUESTS, "requests"), metavar="N",
                   help=f"sequences to simulate (1..{MAX_REQUESTS}; fixed: default the batch size; poisson: default 100)")
    w.add_argument("--max-batch", type=bounded_int(1, MAX_BATCH, "sequences"), metavar="B",
                   help=f"poisson / arrivals: most sequences decoded together (1..{MAX_BATCH}); default -b, else the "
                        "plan file's batch size, else the number of requests up to the profile's max_batch_size "
                        "(a note says which)")
    w.add_argument("--prompt-tokens", type=bounded_int(0, MAX_TOKENS, "prompt tokens per request"), default=None,
                   metavar="P", help=f"prompt tokens per request; prefill = one target forward over them "
                                     f"(0..{MAX_TOKENS}; 0 = no prefill; default {DEFAULT_PROMPT_TOKENS}, or the "
                                     "arrivals file's prompt_tokens)")
    w.add_argument("--output-dist", choices=OUTPUT_DISTS, default="fixed",
                   help="output-length distribution around --tokens (default fixed)")
    w.add_argument("--replay", metavar="TRACE", help="replay accepted counts and bonus ranks of an ssd-run trace")
    o = p.add_argument_group("output")
    add_horizon_arg(o)
    o.add_argument("--seed", type=bounded_int(0, MAX_SEED, "random seed"), default=0,
                   help=f"random seed (0..{MAX_SEED}); a seed makes a run bit-for-bit reproducible")
    o.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    o.add_argument("--chrome-trace", metavar="FILE",
                   help="write the simulated timeline as Chrome / Perfetto trace JSON (ui.perfetto.dev)")
    o.add_argument("--no-progress", action="store_true", help="never show a progress bar")
    return p


@cli_entry(PROG)  # a closed stdout ends quietly; Ctrl-C / SIGTERM end with one line and status 130 / 143
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        check_mode_flags(knob_flags(args), args.mode)
        pf = load_plan(args.plan) if args.plan else None
        check_outputs({"chrome_trace": args.chrome_trace},  # before the simulation, not after it
                      {"plan": args.plan, "arrivals": args.arrivals, "replay": args.replay, **source_files(args, pf)})
        source = source_of(args, (pf.extra.get("profile") or {}) if pf else None, args.plan)
        profile = at_horizon(profile_of(source), args.horizon)
        base = pf.plan if pf else None
        auto_batch = args.workload != "fixed" and args.batch_size is None and args.max_batch is None and base is None
        args.batch_size = (args.batch_size or (args.max_batch if args.workload != "fixed" else None)
                           or (base.batch_size if base else 1))
        explicit_prompt = args.explicit_prompt = args.prompt_tokens  # None: not given (an arrivals file may give it)
        args.prompt_tokens = DEFAULT_PROMPT_TOKENS if explicit_prompt is None else explicit_prompt
        workload, notes = workload_from_args(args), []
        args.summary = {}  # what the table's workload line says beyond the Workload (print_table)
        if args.workload == "arrivals":
            workload, notes, args.summary["prompts"] = arrivals_extras(args.arrivals, workload, explicit_prompt)
        profile, mean_context = at_workload_context(source, profile, workload)
        if mean_context is not None:  # the rounds follow the batch's context; the analytic column takes the mean
            args.summary["context"] = growing_note(mean_context, "the analytic column")
            args.summary["growth_source"] = source
        if auto_batch:  # a stream of requests with no batch size given: batch them as a server would
            workload, args.summary["batch"] = default_max_batch(profile, workload, args.mode)
            args.batch_size = args.max_batch = workload.max_batch
        plan = resolve_plan(args, profile, base)
        replay = read_trace(args.replay) if args.replay else None
        if replay is not None:  # refused now, before any warning, so bad input stays one line
            outcome_source(profile, plan_for_mode(profile, plan, args.mode), replay)
        memory = at_last_token(source, profile, workload)
        for line in [*notes, *input_warnings(profile, plan, workload, replay, args, memory)]:  # before the run
            print(f"{PROG}: warning: {line}", file=sys.stderr)
        progress = not args.no_progress and not args.json and sys.stderr.isatty()
        growing = args.summary.get("growth_source")  # each round at its batch's mean context (prompts + tokens)
        result = simulate(profile, plan, mode=args.mode, seed=args.seed, workload=workload,
                          chrome_trace=bool(args.chrome_trace), progress=progress, outcomes=replay,
                          profile_at=ProfileAt(growing) if growing else None)
        if args.chrome_trace:
            save_json_atomic(args.chrome_trace, json.dumps(result.chrome_trace(), separators=(",", ":")),
                             "chrome_trace")
    except ConfigError as e:
        fail(PROG, e)
    warning = host_report(profile)["warning"]
    if warning:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if result.timeline_cut_ms is not None:
        print(f"{PROG}: warning: the timeline in {args.chrome_trace} ends at {result.timeline_cut_ms:.0f} ms of "
              f"{result.metrics.sim_ms:.0f} ms (its span limit); simulate fewer tokens for a whole one", file=sys.stderr)
    report(profile, result, args)
    return 0


def report(profile: Profile, result: SimResult, args) -> None:
    """Print the result: JSON (--json) or the table with the analytic column and the 90% interval."""
    base_mode = "ssd" if args.mode.startswith("ssd") else args.mode
    predicted = predict(profile, result.plan, base_mode)
    low, high = scaled_interval(profile, result.plan, base_mode, result.metrics.per_seq_tok_s, result.metrics.sequences)
    grown = _growth(result, base_mode, args)
    if args.json:
        context = {"context_note": args.summary["context"]} if args.summary.get("context") else {}
        context |= {"context_growth": grown} if grown else {}
        out = result.to_dict() | context | {"profile": profile.name, "predicted": predicted.to_dict(),
                                  "interval_90": {"per_seq_tok_s": [low, high], "note": INTERVAL_NOTE}}
        print(json.dumps(json_safe(out), indent=2))
        sys.stdout.flush()
        return
    print_table(profile, result, predicted, args)
    if grown:
        print(growth_line(base_mode, grown[base_mode], grown["prompt_tokens"], grown["output_tokens"],
                          result.plan.batch_size, "the simulated column charges each round at its batch's context"))
    if math.isfinite(low) and math.isfinite(high):
        print(f"90% interval of tok/s per sequence: {low:.2f}-{high:.2f} ({INTERVAL_NOTE})")
    else:
        print("90% interval of tok/s per sequence: - (no sequence decoded a token after its first)")
    sys.stdout.flush()


def _growth(result: SimResult, mode: str, args) -> dict | None:
    """The simulated mode's analytic round over the context growing from the mean prompt to prompt + output
    (cli.growth), when the latencies were taken at the workload's mean decode context; else None."""
    source = getattr(args, "summary", {}).get("growth_source")
    if source is None:
        return None
    prompt, output = mean_lengths(result.workload)
    g = growth(source, prompt, output, result.plan.K, result.plan, modes=(mode,))
    return {"prompt_tokens": prompt, "output_tokens": output, **g}


INTERVAL_NOTE = ("the profile's uncertainty (workload, run latency, interference, assumed curves) around the "
                 "simulated value, for a run of this many sequences")


def workload_from_args(args) -> Workload:
    """The simulated workload from the flags (raises ConfigError on inconsistent flags)."""
    if args.arrivals is not None and args.workload != "arrivals":
        raise ConfigError("arrivals", "--arrivals FILE needs --workload arrivals")
    if args.workload == "arrivals":
        return _arrivals_workload(args)
    if args.workload == "poisson":
        if args.rate is None or args.rate <= 0:
            raise ConfigError("rate", f"--workload poisson needs --rate R (requests per second, {MIN_RATE:g}..{MAX_RATE:g})")
        return Workload("poisson", args.num_requests or 100, args.max_batch or args.batch_size, args.rate, args.tokens,
                        args.output_dist, args.prompt_tokens)
    for flag, kinds in (("rate", "poisson"), ("max_batch", "poisson or arrivals")):
        if getattr(args, flag) is not None:
            raise ConfigError(flag, f"--{flag.replace('_', '-')} only applies to --workload {kinds}")
    b = args.batch_size
    return Workload("fixed", args.num_requests or b, b, 0.0, args.tokens, args.output_dist, args.prompt_tokens)


def _arrivals_workload(args) -> Workload:
    """--workload arrivals: the requests of --arrivals FILE, batched continuously up to --max-batch."""
    if args.arrivals is None:
        raise ConfigError("arrivals", f"--workload arrivals needs --arrivals FILE ({ARRIVALS_HINT}); for requests "
                                      "all at t = 0 use --workload fixed, for random arrivals --workload poisson")
    for flag in ("rate", "num_requests"):
        if getattr(args, flag) is not None:
            raise ConfigError(flag, f"--{flag.replace('_', '-')} does not apply to --workload arrivals: the file "
                                    "gives every request")
    return read_arrivals(args.arrivals, args.max_batch or args.batch_size, args.tokens, args.prompt_tokens,
                         args.output_dist, file_prompts=getattr(args, "explicit_prompt", None) is None)


def arrivals_extras(path: str, workload: Workload, prompt_flag: int | None) -> tuple[Workload, list[str], str | None]:
    """What the workload line and warnings say of an arrivals file beyond sim.workload.read_arrivals, which reads
    its arrival_ms, output_tokens and prompt_tokens (one number, or one per request: each request prefills its
    own): where the prompts came from, and keys nothing reads. Returns the workload, warning lines, and what the
    workload line says of the file's prompts (None: the file gives none)."""
    data = read_json_object(path, "arrivals", f"write {ARRIVALS_HINT}")
    warnings = []
    unknown = sorted(set(data) - {"arrival_ms", "output_tokens", "prompt_tokens"})
    if unknown:
        warnings.append(f"{path}: {', '.join(unknown)} not read (an arrivals file holds arrival_ms and, "
                        "optionally, output_tokens and prompt_tokens)")
    if "prompt_tokens" not in data:
        return workload, warnings, None
    values = file_prompt_lengths(data, workload.num_requests, path)
    lo, hi = min(values), max(values)
    held = f"the file's {lo}-{hi}" if lo != hi else f"the file's {lo}"
    if prompt_flag is not None:
        return workload, warnings, f"--prompt-tokens; {held} not used"
    return workload, warnings, "the file's" if lo == hi else "the file's, per request"


def default_max_batch(profile: Profile, workload: Workload, mode: str = "ssd") -> tuple[Workload, str]:
    """No -b, --max-batch or plan file for a stream of requests: decode up to all of them together, at most what the
    profile's KV memory holds in `mode` (Profile.fits; a measured profile: its max_batch_size); the workload so
    batched and what the workload line says."""
    counted = _memory_mode(mode)
    cap = min(workload.num_requests, max(1, profile.fits(counted)))
    why = ("every request" if cap == workload.num_requests else
           "the profile's max_batch_size" if profile.memory is None else f"what {counted.upper()}'s KV caches fit")
    return dataclasses.replace(workload, max_batch=cap), f"by default {why}; --max-batch B chooses"


def _memory_mode(mode: str) -> str:
    """ssd-sim's --mode as model.memory counts it: every SSD backup keeps the same caches."""
    return "ssd" if mode.startswith("ssd") else mode


def workload_line(wl: Workload, summary: dict | None = None) -> str:
    """What the simulated workload holds, for the table: requests, their output (and, for arrivals, prompt) lengths,
    how they arrive and the batch cap; `summary` says where a default came from (main)."""
    summary = summary or {}
    if wl.output_lengths:
        lens = sorted(wl.output_lengths)
        lo, hi = lens[0], lens[-1]
        out = (f"{wl.num_requests} requests x {lo} output tokens" if lo == hi else
               f"{wl.num_requests} requests x {lo}-{hi} output tokens (median {int(np.median(lens))})")
    else:
        dist = "" if wl.output_dist == "fixed" else f" ({wl.output_dist}, mean)"
        out = f"{wl.num_requests} sequences x {wl.output_tokens} tokens{dist}"
    batch = f"batch <= {wl.max_batch}" + (f" ({summary['batch']})" if summary.get("batch") else "")
    if wl.kind == "arrivals":
        span = wl.arrival_ms[-1] - wl.arrival_ms[0] if wl.arrival_ms else 0.0
        prompts = f" ({summary['prompts']})" if summary.get("prompts") else ""
        lens = sorted(wl.prompt_lengths)
        said = (f"{lens[0]}-{lens[-1]} tokens (median {int(np.median(lens))})" if lens
                else f"{wl.prompt_tokens} tokens")
        return f"{out}, prompts {said}{prompts}; arrivals over {span:,.0f} ms, {batch}"
    if wl.kind == "poisson":
        return f"{out}; poisson, {wl.rate:g} req/s, {batch}"
    return f"{out} ({wl.kind}, batch {wl.max_batch})"


def input_warnings(profile: Profile, plan: Plan, workload: Workload, replay: Trace | None, args,
                   memory: Profile | None = None) -> list[str]:
    """One line each for valid input almost certainly not meant (ssd_sim.io.sanity, model.tracematch): arrivals
    spread over hours of idling, a replayed trace of another setup than the profile's, a batch whose KV caches do
    not fit `memory`'s devices (plan.report.memory_report; default: the profile's)."""
    busy = None if workload.kind == "fixed" else decode_ms(profile, plan, workload, args.mode)
    lines = [rate_warning(workload.rate, workload.num_requests, workload.num_requests, busy,
                          waiting="simulated waiting") if workload.kind == "poisson" else None,
             arrivals_warning(args.arrivals, workload.arrival_ms, busy) if workload.kind == "arrivals" else None,
             mismatch_line(replay, profile) if replay is not None else None,
             overload(profile, plan, workload, args.mode, args.seed) if workload.kind != "fixed" else None,
             ignored_at_greedy(knob_flags(args), plan.temperature),
             memory_report(memory or profile, [workload.max_batch], plan, _memory_mode(args.mode))["warning"]]
    return [line for line in lines if line]


def overload(profile: Profile, plan: Plan, workload: Workload, mode: str, seed: int) -> str | None:
    """One line when the arrivals offer more output tok/s than the replica delivers at its batch cap (analytic)."""
    load = Load.of(workload, seed)
    cap = predict(profile, plan.replace(batch_size=workload.max_batch), "ssd" if mode.startswith("ssd") else mode)
    return overload_line(load.offered_tok_s, cap.total_tok_s, f"this replica (b <= {workload.max_batch})")


def decode_ms(profile: Profile, plan: Plan, workload: Workload, mode: str) -> float:
    """The analytic time to decode every request of the workload one after another, alone in the batch (ms)."""
    tokens = sum(workload.output_lengths) or workload.num_requests * workload.output_tokens
    one = predict(profile, plan.replace(batch_size=1), "ssd" if mode.startswith("ssd") else mode)
    return tokens / one.per_seq_tok_s * 1e3 if one.per_seq_tok_s > 0 else math.inf


def resolve_plan(args, profile: Profile, base: Plan | None) -> Plan:
    """The plan file with the knob flags on top (ssd_sim.plan.knobs.resolve); what is open (no plan file, or a
    fan-out a new K dropped) the planner chooses for this batch with the fixed knobs kept."""
    res = resolve(base, knob_flags(args))
    if base is not None and "fan_out" not in res.dropped:
        return res.plan()
    request = PlanRequest(batch_size=args.batch_size, temperature=res.workload("temperature"),
                          draft_devices=res.workload("draft_devices"), knobs=res.knobs, objective=args.objective)
    result = make_plan(profile, request)
    plan = result.plan
    if args.mode == "sd" and args.num_speculative_tokens is None and args.fan_out is None:
        K = result.sd.num_speculative_tokens  # the best SD K, not the SSD plan's
        plan = plan.replace(num_speculative_tokens=K, fan_out=(1,) * (K + 1), fan_out_miss=(1,) * (K + 1))
    return plan


def print_table(profile: Profile, result: SimResult, predicted: Prediction, args) -> None:
    from rich.console import Console
    from rich.table import Table

    m, plan = result.metrics, result.plan
    wl = result.workload
    if wl.kind == "fixed":
        title = f"ssd-sim {result.mode} on {profile.name}: {workload_line(wl)}, seed {result.seed}"
    else:  # the longer summary of a stream on its own line above the table
        title = f"ssd-sim {result.mode} on {profile.name}: {wl.kind} workload, seed {result.seed}"
    t = Table(title=title, title_justify="left")
    t.add_column("metric")
    t.add_column("simulated", justify="right")
    t.add_column("analytic", justify="right")
    for name, sim, pred in rows(m, predicted):
        t.add_row(name, sim, pred)
    console = Console(width=None if sys.stdout.isatty() else 120)
    if wl.kind != "fixed":
        console.print(f"workload: {workload_line(wl, getattr(args, 'summary', None))}", soft_wrap=True, markup=False,
                      highlight=False)
    console.print(t)
    if getattr(args, "summary", {}).get("context"):
        console.print(args.summary["context"], soft_wrap=True, markup=False, highlight=False)
    if m.num_speculative_tokens:
        fo = f" fan-out {list(plan.fan_out)} / miss {list(plan.fan_out_miss)}" if plan.mode == "ssd" else ""
        thr = f" (b* = {plan.backup_threshold:g})" if plan.backup == "adaptive" else ""
        console.print(f"plan: K = {plan.K}{fo}, C = {plan.c_label}, backup {plan.backup}{thr}, "
                      f"jit redraft {plan.jit_redraft}, draft devices {plan.draft_devices}")
    if args.chrome_trace:
        console.print(f"timeline: {args.chrome_trace} (open in ui.perfetto.dev or chrome://tracing)")


def rows(m, p: Prediction) -> list[tuple[str, str, str]]:
    """Table rows: (metric, simulated, analytic)."""

    def f(v, fmt="{:.1f}"):
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)

    if not m.rounds:  # no decode round ran (every sequence ended at its first token): per-round numbers undefined
        m = dataclasses.replace(m, round_ms=None, mean_batch=None, mean_accept_len=None, acceptance_rate=None)

    pct = "{:.1%}"
    out = [
        ("tok/s per sequence", f(m.per_seq_tok_s), f(p.per_seq_tok_s)),
        ("tok/s total", f(m.total_tok_s), f(p.total_tok_s)),
        ("tok/s per device", f(m.tok_s_per_device), f(p.tok_s_per_device)),
        ("TPOT p50 / p90 / p99 (ms)", " / ".join(f(v, "{:.2f}") for v in (m.tpot_ms_p50, m.tpot_ms_p90, m.tpot_ms_p99)),
         f(1e3 / p.per_seq_tok_s, "{:.2f}")),
        ("TTFT p50 / p90 / p99 (ms)", " / ".join(f(v) for v in (m.ttft_ms_p50, m.ttft_ms_p90, m.ttft_ms_p99)), "-"),
        ("round (ms)", f(m.round_ms, "{:.2f}"), f(p.round_ms, "{:.2f}")),
        ("mean batch", f(m.mean_batch, "{:.2f}"), str(p.batch_size)),
    ]
    if m.num_speculative_tokens:
        out += [("mean acceptance length (incl. bonus)", f(m.mean_accept_len, "{:.3f}"),
                 f(p.tokens_per_round, "{:.3f}")),
                ("acceptance rate", f(m.acceptance_rate, pct), "-")]
    if m.hit_rate is not None:
        out += [("cache hit rate", f(m.hit_rate, pct), f(p.p_hit, pct)),
                ("  after a cache round / after a backup round",
                 f"{f(m.primary_hit_rate, pct)} / {f(m.backup_hit_rate, pct)}", "-"),
                ("rounds with every sequence hitting", f(m.all_hit_rounds, pct), f(p.p_all_hit, pct)),
                ("tokens per round on hit / miss", f"{f(m.tokens_per_round_hit, '{:.2f}')} / "
                 f"{f(m.tokens_per_round_miss, '{:.2f}')}", f"{f(p.e_hit, '{:.2f}')} / {f(p.e_miss, '{:.2f}')}"),
                ("backup rounds (jit / fast)", f"{m.backup_rounds['jit']} / {m.backup_rounds['fast']}", "-"),
                ("draft busy", f(m.draft_busy, pct), "-"),
                ("target waits for the draft", f"{m.target_wait_share:.1%} ({m.target_wait_ms:.0f} ms)", "-")]
    out.append(("target busy", f(m.target_busy, pct), "-"))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
