"""`ssd-plan`: pick K, fan-out, Saguaro C and the backup policy for a profile; emit a plan file and engine flags.

    ssd-plan --preset llama70b-1b-h100                      # search everything at b=1, greedy
    ssd-plan --preset llama70b-1b-h100 -b 8 -t 1 --json     # another workload, machine-readable
    ssd-plan --preset qwen32b-0.6b-h100 -k 4 --fan-out 3    # evaluate a fixed configuration
    ssd-plan --plan plan.json --emit ssd-engine             # flags for an existing plan file
    ssd-plan --preset llama70b-1b-h100 --batch-sizes 1,2,4,8,16   # one row per batch size: best AR / SD / SSD
    ssd-plan calibrate traces/*.jsonl -o profile.json       # fit a profile to runtime traces
    ssd-plan holdout traces/*.jsonl                         # check it on requests it never saw (random halves)
    ssd-plan workload metrics.txt --engine vllm -t 0 -o workload.json   # acceptance from an engine's metrics
    ssd-plan capacity --preset llama70b-1b-h100 --rate 10 --tpot-ms 27   # the cheapest deployment for a load
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace

from ssd_sim.cli.args import (
    OneLineParser,
    add_horizon_arg,
    add_knob_args,
    batch_size_list,
    bounded_int,
    cli_entry,
    fail,
    knob_flags,
)
from ssd_sim.cli.growth import MODES, ProfileAt, growth, shown_pct
from ssd_sim.cli.source import (
    add_source_args,
    at_context,
    at_last_token,
    context_for,
    context_note,
    plan_relative,
    profile_of,
    source_files,
    source_of,
    without_context,
)
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.limits import MAX_BUDGET, MAX_K, MAX_TOKENS
from ssd_sim.io.outputs import check_outputs
from ssd_sim.model.presets import list_presets
from ssd_sim.model.profile import Profile
from ssd_sim.plan.emit import ENGINES
from ssd_sim.plan.intervals import at_horizon, horizon_note
from ssd_sim.plan.knobs import WORKLOAD, Knobs, ignored_at_greedy, resolve
from ssd_sim.plan.plan import Plan, PlanFile, load_plan
from ssd_sim.plan.planner import (
    MIN_C_GAIN_PCT,
    OBJECTIVES,
    PlanRequest,
    PlanResult,
    SearchLimits,
    bound_notes,
    make_plan,
)
from ssd_sim.plan.predict import plan_point, predict_ssd
from ssd_sim.plan.report import build_report, memory_report, plan_file
from ssd_sim.plan.whatif import batch_sweep
from ssd_sim.sim.workload import (
    DEFAULT_OUTPUT_TOKENS,
    DEFAULT_PROMPT_TOKENS,
    Workload,
    fixed_batch,
    refilled_batches,
)

PROG = "ssd-plan"
GROWTH_CANDIDATES = 32  # the best plans at the mean context re-ranked over the growing context (prompt / output lengths)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Plan Speculative Speculative Decoding (SSD / Saguaro): search K, the cache budget, the "
                    "fan-out for the hit and miss case, Saguaro C and the backup policy, and predict tok/s "
                    "of autoregressive, the best synchronous SD and SSD. Knob flags fix a value; the rest "
                    "is searched. `ssd-plan calibrate --help` fits a profile to runtime traces; `ssd-plan "
                    "holdout --help` checks such a calibration on requests it never saw; `ssd-plan "
                    "workload --help` reads an engine's speculative-decoding metrics into a workload profile; `ssd-plan capacity "
                    "--help` finds the cheapest deployment that serves a load within TTFT / TPOT targets.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    src = p.add_argument_group("profile (latency + acceptance model)")
    src.add_argument("--preset", metavar="NAME", help=f"built-in preset: {', '.join(list_presets())}")
    src.add_argument("--profile", metavar="FILE", help="a profile JSON file (e.g. from `ssd-plan calibrate`)")
    src.add_argument("--plan", metavar="FILE", help="evaluate this plan file: its knobs are fixed (flags "
                     "still override); its profile is used unless --preset/--profile is given")
    add_source_args(src)
    src.add_argument("--list-presets", action="store_true", help="list the built-in presets and exit")
    src.add_argument("--explain", action="store_true",
                     help="also print where every profile number comes from (measured / derived / assumed)")
    add_knob_args(p)
    w = p.add_argument_group("workload lengths (a GPU preset's or spec pair's KV reads; measured profiles have none)")
    w.add_argument("--prompt-tokens", type=bounded_int(0, MAX_TOKENS, "prompt tokens per request"), metavar="P",
                   help=f"mean prompt tokens per request (0..{MAX_TOKENS}; default {DEFAULT_PROMPT_TOKENS} when "
                        "--tokens is given): the latencies are taken at the mean decode context, P + N / 2 cached "
                        "tokens per sequence, instead of the preset's own or --context")
    w.add_argument("--tokens", type=bounded_int(1, MAX_TOKENS, "output tokens per request"), metavar="N",
                   help=f"mean output tokens per request (1..{MAX_TOKENS}; default {DEFAULT_OUTPUT_TOKENS} when "
                        "--prompt-tokens is given)")
    s = p.add_argument_group("search")
    s.add_argument("--objective", choices=OBJECTIVES, default="latency",
                   help="latency: maximise tok/s per sequence; throughput-per-device: total tok/s divided by "
                        "the accelerators used (the SSD draft device counts). Default: latency")
    s.add_argument("--max-k", type=bounded_int(1, MAX_K, "the largest K searched"), default=10, metavar="K",
                   help=f"largest K searched, for SSD and SD (tokens, 1..{MAX_K}; default 10)")
    s.add_argument("--budget-cap", type=bounded_int(1, MAX_BUDGET, "guesses per sequence and round"), default=128,
                   metavar="N", help=f"largest cache budget per sequence searched (bonus-token guesses, "
                                     f"1..{MAX_BUDGET}; default 128)")
    s.add_argument("--simulate", nargs="?", const=20000, type=bounded_int(1, MAX_TOKENS, "tokens per sequence"),
                   metavar="TOKENS",
                   help="re-rank the best analytic candidates with the discrete-event simulator over "
                        f"TOKENS generated tokens per sequence (1..{MAX_TOKENS}, default 20000) and report "
                        "simulated tok/s")
    s.add_argument("--batch-sizes", type=batch_size_list, metavar="B[,B..]",
                   help="plan at each of these batch sizes (e.g. 1,2,4,8,16) and print, instead of the one plan's report, one row per batch size: "
                        "the best AR, SD and SSD (tok/s in total and per sequence, K, SSD's fan-out, backup and b*) "
                        "and the recommendation; --json and -o hold it as batch_sweep (the plan file's plan stays "
                        "the one at -b)")
    s.add_argument("--seed", type=bounded_int(0, 2**32 - 1, "simulator seed"), default=0,
                   help="simulator seed (with --simulate; 0..2^32-1)")
    s.add_argument("--risk", type=_quantile, metavar="Q",
                   help="rank plans by the Q-quantile of their tok/s over the profile's uncertainty instead of the "
                        "prediction (e.g. 0.1: best in the 10%% worst case); default: the prediction")
    add_horizon_arg(s)
    o = p.add_argument_group("output")
    o.add_argument("-o", "--output", metavar="FILE", help="write the plan file (JSON) here")
    o.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    o.add_argument("--emit", choices=ENGINES,
                   help="print only the ready-to-run command for this engine (ssd-engine = the reference SSD "
                        "engine; vllm / sglang = the best plain-SD fallback): one line, the last, after '#' "
                        "comment lines with its notes and the engine's repository and version, so the whole "
                        "output pastes into a shell")
    return p


@cli_entry(PROG)
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:
        from ssd_sim.cli.calibrate import main as calibrate_main

        return calibrate_main(argv[1:])
    if argv[:1] == ["capacity"]:
        from ssd_sim.cli.capacity import main as capacity_main

        return capacity_main(argv[1:])
    if argv[:1] == ["holdout"]:
        from ssd_sim.cli.holdout import main as holdout_main

        return holdout_main(argv[1:])
    if argv[:1] == ["workload"]:
        from ssd_sim.cli.workload import main as workload_main

        return workload_main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.list_presets:
        return _print_presets()
    try:
        pf = load_plan(args.plan) if args.plan else None
        check_outputs({"output": args.output}, {"plan": args.plan, **source_files(args, pf)})  # before the search
        if args.batch_sizes and (args.emit or args.simulate):
            raise ConfigError("batch_sizes", f"--batch-sizes sweeps analytic plans; {'--emit' if args.emit else '--simulate'} "
                                             "applies to one plan: drop one of them")
        profile, base_extra, knobs, workload = _resolve(args, pf)
        profile = at_horizon(profile, args.horizon)
        rank = _growth_rank(base_extra, args)
        request = PlanRequest(batch_size=workload["batch_size"], temperature=workload["temperature"],
                              draft_devices=workload["draft_devices"], knobs=knobs, objective=args.objective,
                              limits=SearchLimits(k_max=args.max_k, budget_cap=args.budget_cap,
                                                  top_n=GROWTH_CANDIDATES if rank else SearchLimits.top_n),
                              risk=args.risk, rank=rank)
        result = make_plan(profile, request)
        at_end = _at_last_token(profile, base_extra, workload["batch_size"])
    except ConfigError as e:
        fail(PROG, e)
    result, simulated = _simulate(profile, result, args, base_extra) if args.simulate else (result, None)
    report = build_report(profile, result, simulated, source=base_extra)
    if base_extra.get("lengths"):
        report["context_growth"] = _growth_report(base_extra, result)
    if args.batch_sizes:
        report["batch_sweep"] = batch_sweep(profile, request, args.batch_sizes)
    report["memory"] = memory_report(at_end, [result.plan.batch_size, *(args.batch_sizes or ())], result.plan,
                                     report["recommended_mode"])
    if args.emit and not report["engine_flags"][args.emit].get("supported", True):
        fail(PROG, ConfigError("emit", f"{args.emit}: {report['engine_flags'][args.emit]['notes'][0]}; "
                                       "choose vllm or sglang"))
    for warning in (report["host"]["warning"], report.get("latency_tables", {}).get("warning"), report["memory"]["warning"],
                    ignored_at_greedy(knob_flags(args), result.plan.temperature)):
        if warning:
            print(f"{PROG}: warning: {warning}", file=sys.stderr)
    if args.output:
        try:
            recorded = report | {"profile": plan_relative(report["profile"], args.output)}  # readable from anywhere
            save_json_atomic(args.output, plan_file(result, recorded).to_json())
        except ConfigError as e:
            fail(PROG, e)
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.emit:
        print("\n".join(emit_lines(args.emit, report["engine_flags"][args.emit])))
    elif args.batch_sizes:
        print_sweep(profile, result, report)
        if args.output:
            print(f"plan written to {args.output} (the plan at b = {result.plan.batch_size}, -b chooses; with the sweep "
                  "as batch_sweep)")
    else:
        print_report(profile, result, report, explain=args.explain)
        if args.output:
            print(f"plan written to {args.output}")
    return 0


def growth_summary(g: dict) -> str:
    """One line: the tok/s per sequence over the growing context, and how much the mean context overstates each."""
    prompt, output = g["prompt_tokens"], g["output_tokens"]
    parts = ", ".join(f"{m.upper()} {g[m]['tok_s']:.2f} ({shown_pct(g[m]['mean_context_err_pct']):+.1f}%)" for m in MODES)
    staggered = shown_pct(g["ssd"]["staggered_err_pct"])
    return (f"over the context growing from {prompt} to {prompt + output} tokens (mean round of the same plans, the "
            f"batch's rows in step): {parts} tok/s per sequence, in brackets how much slower the round is than at the "
            f"mean context (SSD with the rows at independent points of their decode, as continuous batching keeps "
            f"them: {g['ssd']['staggered_tok_s']:.2f}, {staggered:+.1f}%). AR and SD rounds are linear in the context; "
            f"SSD's max(T_v, T_p) is not, so the best {GROWTH_CANDIDATES} SSD plans at the mean context were ranked by "
            "their tok/s over the growth with the rows in step")


def emit_lines(engine: str, flags: dict) -> list[str]:
    """What --emit prints: the notes and then the engine's repository and version as shell comments, the command as
    the last line (one line, never wrapped)."""
    notes = [f"# note: {n}" for n in flags["notes"] if n != flags["source"]]
    return [*notes, f"# {engine}: {flags['source']}", flags["command"]]


def _resolve(args, pf: PlanFile | None) -> tuple[Profile, dict, Knobs, dict]:
    """Profile, plan-file info, fixed knobs and workload from the arguments and the loaded --plan file `pf`
    (ssd_sim.plan.knobs.resolve)."""
    info = source_of(args, (pf.extra.get("profile") or {}) if pf else None, args.plan)
    res = resolve(pf.plan if pf else None, knob_flags(args))
    workload = {key: res.workload(key) for key in WORKLOAD}
    info, note, lengths = _at_lengths(args, info, workload["batch_size"])
    profile = profile_of(info)
    source = {"profile": {"name": profile.name, **info}}
    if note:  # the lengths moved the context: say so, and keep them for the growth check
        source |= {"context_note": note, "lengths": lengths}
    return profile, source, res.knobs, workload


def _growth_rank(source: dict, args):
    """With prompt / output lengths: the score that ranks SSD plans by tok/s over the growing context (cli.growth),
    else None."""
    if not source.get("lengths"):
        return None
    info, (prompt, output) = _profile_source(source), source["lengths"]
    return lambda plan: growth(info, prompt, output, 1, plan, modes=("ssd",))["ssd"]["tok_s"]


def _growth_report(source: dict, result: PlanResult) -> dict:
    """The plans' tok/s over a context growing from P to P + N (cli.growth) against the mean-context prediction."""
    prompt, output = source["lengths"]
    g = growth(_profile_source(source), prompt, output, result.sd.num_speculative_tokens, result.plan)
    return {"prompt_tokens": prompt, "output_tokens": output, **g}


def _at_last_token(profile: Profile, source: dict, batch_size: int) -> Profile:
    """With --prompt-tokens / --tokens: the pair at the batch's last token (cli.source.at_last_token), else
    `profile` (its latencies' context is the one the batch must fit)."""
    if not source.get("lengths"):
        return profile
    prompt, output = source["lengths"]
    return at_last_token(without_context(_profile_source(source)), profile, fixed_batch(batch_size, output, prompt))


def _profile_source(source: dict) -> dict:
    """The profile source (cli.source) _resolve recorded, without the profile's name."""
    return {k: v for k, v in source["profile"].items() if k != "name"}


def _at_lengths(args, info: dict, batch_size: int) -> tuple[dict, str | None, tuple[int, int] | None]:
    """The source at the mean decode context of --prompt-tokens / --tokens (source.workload_context), the line that
    says so and the (prompt, output) lengths; unchanged without them. They replace a context a plan file recorded,
    and they conflict with --context; a measured profile has no KV term for them to move (a warning says so)."""
    if args.prompt_tokens is None and args.tokens is None:
        return info, None, None
    if args.context is not None:
        raise ConfigError("context", "--context and --prompt-tokens / --tokens both set the context the latencies "
                                     "are taken at: give one of them")
    prompt = DEFAULT_PROMPT_TOKENS if args.prompt_tokens is None else args.prompt_tokens
    output = DEFAULT_OUTPUT_TOKENS if args.tokens is None else args.tokens
    unset = without_context(info)
    c = context_for(unset, profile_of(unset), fixed_batch(batch_size, output, prompt))
    if c is None:
        print(f"{PROG}: warning: --prompt-tokens / --tokens change nothing here: the profile's latencies are measured "
              "(no per-row KV term to move with the context)", file=sys.stderr)
        return info, None, None
    return at_context(unset, c), f"{context_note(c)}; {prompt} prompt + {output} output tokens", (prompt, output)


def _simulate(profile: Profile, result: PlanResult, args, source: dict) -> tuple[PlanResult, dict]:
    """Re-rank the analytic candidates with the simulator: the result with the simulated winner as its plan, and
    the simulation's report (source: what _resolve recorded; with lengths the simulation decodes requests of them)."""
    from ssd_sim.sim.rerank import rerank

    workload, profile_at = _simulated_lengths(result, args, source)
    rr = rerank(profile, result, tokens=args.simulate, seed=args.seed, workload=workload, profile_at=profile_at)
    if rr.changed:
        result = replace(result, plan=rr.plan, ssd=rr.ranked[0][1], binding=result.binding
                         + " (for the analytic pick; the simulator preferred another candidate)")
    m = rr.metrics
    lengths = ({"requests": workload.num_requests, "prompt_tokens": workload.prompt_tokens,
                "output_tokens": workload.output_tokens} if workload else {})
    return result, {
        "tokens_per_sequence": args.simulate, **lengths, "seed": args.seed, "changed_plan": rr.changed,
        "ssd_tok_s": m.per_seq_tok_s, "ssd_total_tok_s": m.total_tok_s, "ssd_tok_s_per_device": m.tok_s_per_device,
        "p_hit": m.hit_rate, "mean_accept_len": m.mean_accept_len,
        "ar_tok_s": rr.baselines["ar"].per_seq_tok_s, "sd_tok_s": rr.baselines["sd"].per_seq_tok_s,
        "candidates": [{"num_speculative_tokens": p.K, "fan_out": list(p.fan_out), "saguaro_c": p.saguaro_c,
                        "saguaro_c_list": list(p.saguaro_c_list), "backup": p.backup_for(p.batch_size), "analytic_tok_s": pred.per_seq_tok_s,
                        "simulated_tok_s": sm.per_seq_tok_s} for p, pred, sm in rr.ranked],
    }


def _simulated_lengths(result: PlanResult, args, source: dict) -> tuple[Workload | None, ProfileAt | None]:
    """With prompt / output lengths (a GPU preset or spec pair): the requests --simulate decodes (batches of b requests
    of those lengths, at least --simulate tokens per sequence slot) and the profile at each round's context; else
    (None, None): one steady batch of --simulate tokens at the profile's context."""
    if not source.get("lengths"):
        return None, None
    prompt, output = source["lengths"]
    return (refilled_batches(result.plan.batch_size, output, prompt, args.simulate),
            ProfileAt(_profile_source(source)))


def _quantile(text: str) -> float:
    from ssd_sim.cli.args import unit_float

    q = unit_float(text)
    if not 0.0 < q <= 0.5:
        raise argparse.ArgumentTypeError(f"{q} must be a quantile in (0, 0.5], e.g. 0.1")
    return q


def _print_presets() -> int:
    from rich.console import Console
    from rich.table import Table

    from ssd_sim.model.presets import get_preset

    t = Table(title="built-in presets")
    t.add_column("name")
    t.add_column("description")
    for name in list_presets():
        t.add_row(name, get_preset(name).description)
    Console().print(t)
    return 0


def print_sweep(profile: Profile, result: PlanResult, report: dict) -> None:
    """--batch-sizes: one row per batch size (plan.whatif.batch_sweep), rich, never wrapped mid-row off a terminal."""
    from rich.console import Console
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 120)
    plan, rows = result.plan, report["batch_sweep"]
    per_device = result.objective != "latency"
    con.print(f"[bold]{profile.name}[/]: {profile.description}")
    con.print(f"workload: temperature {plan.temperature:g}, draft devices {plan.draft_devices}; objective: "
              f"{result.objective}; the best plan of each mode at each batch size")
    first, first_label = ("tok_s_per_device", "per device") if per_device else ("total_tok_s", "total")
    t = Table(title=f"predicted decoding speed by batch size (SD, SSD: tok/s {first_label} / per sequence)")
    show_c = any(r["ssd"]["c_label"] != "1" for r in rows)
    cols = ["b", "AR per seq", "K SD / SSD", "SD", "SSD", "SSD fan-out hit; miss", *(["C"] if show_c else []),
            "backup (b*)", "best (P)"]
    for col in cols:
        left = col.startswith(("SSD fan", "backup", "best"))
        t.add_column(col, justify="left" if left else "right", overflow="fold" if "fan-out" in col else "ellipsis")
    for r in rows:
        ar, sd, ssd = r["ar"], r["sd"], r["ssd"]
        hit, miss = ssd["fan_out"], ssd["fan_out_miss"]
        fan = ",".join(map(str, hit)) + ("" if miss == hit else ";" + ",".join(map(str, miss)))
        b_star = "never" if ssd["b_star"] is None else f"{ssd['b_star']:g}"
        t.add_row(str(r["batch_size"]), f"{ar['per_seq_tok_s']:.1f}", f"{sd['K']} / {ssd['K']}",
                  f"{sd[first]:.1f} / {sd['per_seq_tok_s']:.1f}", f"{ssd[first]:.1f} / {ssd['per_seq_tok_s']:.1f}",
                  fan, *([ssd["c_label"]] if show_c else []), f"{ssd['backup']} ({b_star})",
                  f"{r['recommended_mode'].upper()} ({r['p_ssd_beats_sd']:.2f})")
    con.print(t)
    unit = rows[0]["decided_on"] if rows else "tok/s per sequence"
    con.print(f"best: the recommendation under '{result.objective}'; P: the probability that SSD beats SD in {unit} over "
              "the profile's uncertainty (the recommendation: the mode with the highest mean over it); b*: the batch size "
              "from which the row's plan "
              "runs the fast backup")
    bounds: dict[str, list[int]] = {}
    for r in rows:
        for note in r["search_bounds"]:
            bounds.setdefault(note, []).append(r["batch_size"])
    for note, bs in bounds.items():
        con.print(f"note: at b = {', '.join(map(str, bs))}: {note}")


def print_report(profile: Profile, result: PlanResult, report: dict, explain: bool = False) -> None:
    """Human-readable tables of the report (rich)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    con = Console(width=None if sys.stdout.isatty() else 120)
    plan = result.plan
    con.print(f"[bold]{profile.name}[/]: {profile.description}")
    con.print(f"workload: batch {plan.batch_size}, temperature {plan.temperature:g}, "
              f"draft devices {plan.draft_devices}; objective: {result.objective}")
    if report.get("context_note"):
        con.print(report["context_note"], soft_wrap=True, markup=False, highlight=False)
    if report.get("context_growth"):
        con.print(growth_summary(report["context_growth"]), soft_wrap=True, markup=False, highlight=False)
    t = Table(title="predicted decoding speed")
    for col in ("mode", "K", "tok/s per seq", "total tok/s", "devices", "tok/s per device", "vs AR",
                "tokens/round", "round ms"):
        t.add_column(col, justify="right" if col != "mode" else "left")
    eng = report["engine_flags"]["ssd-engine"]
    ref = report.get("reference_engine")
    rows = [(p.mode.upper(), p) for p in (result.ar, result.sd, result.ssd)]
    if ref is not None and ref["prediction_changed"]:  # the plan as the reference engine runs it (see its note)
        rows.append(("SSD (ssd-engine)", predict_ssd(profile, Plan.from_dict(eng["plan"]))))
    for label, p in rows:
        t.add_row(label, str(p.num_speculative_tokens or "-"), f"{p.per_seq_tok_s:.2f}",
                  f"{p.total_tok_s:.2f}", str(p.devices), f"{p.tok_s_per_device:.2f}",
                  f"{p.per_seq_tok_s / result.ar.per_seq_tok_s:.2f}x", f"{p.tokens_per_round:.2f}",
                  f"{p.round_ms:.1f}")
    con.print(t)
    s = result.ssd
    con.print(f"SSD: p_hit {s.p_hit:.3f} (whole batch {s.p_all_hit:.3f}), E_hit {s.e_hit:.2f}, "
              f"E_miss {s.e_miss:.2f} tokens; T_v {s.verify_ms:.2f} ms, T_p {s.draft_ms:.2f} ms, "
              f"backup ({s.backup}) {s.backup_ms:.2f} ms")
    def never(b: float) -> str:
        return "never" if math.isinf(b) else f"{b:g}"

    fixed = plan.backup == "adaptive" and plan.backup_threshold != result.b_star  # a threshold the user fixed
    thr = f"{never(plan.backup_threshold)}, fixed; the crossover is b*={never(result.b_star)}" if fixed else \
        never(result.b_star)
    con.print(f"plan: K={plan.K} fan_out={list(plan.fan_out)} fan_out_miss={list(plan.fan_out_miss)} "
              f"saguaro_c={plan.c_label} backup={plan.backup} (fast backup from b*={thr}; closed form "
              f"{result.b_star_closed_form:.2f})")
    if result.crossover is not None:
        cx = result.crossover
        con.print("b*: first batch size where fast beats jit, each re-planned per batch (tok/s per seq jit/fast): "
                  + ", ".join(f"b={b} {j:.1f}/{f:.1f}" for b, j, f in zip(cx.batch_sizes, cx.jit, cx.fast, strict=True)))
    x = result.ssd.per_seq_tok_s / result.sd.per_seq_tok_s
    captured = "" if math.isnan(result.gain_captured) else f"; the plan captures {result.gain_captured:.0%} of it"
    con.print(f"gain over SD: {x:.2f}x of at most {result.gain_bound:.2f}x (Corollary 9: (1 + T_SD) E_hit / E_SD)"
              + captured)
    con.print(f"binding: {result.binding}")
    for note in bound_notes(result):
        con.print(f"note: {note}")
    if result.c_per_position_gain_pct is not None:
        used = "used" if plan.saguaro_c_list else f"not used (below {MIN_C_GAIN_PCT:g}%)"
        con.print(f"per-position Saguaro C: {result.c_per_position_gain_pct:+.1f}% tok/s over the best single C ({used})")
    u = report["uncertainty"]
    con.print(f"{u['ar']['level']:.0%} intervals of tok/s per sequence: " + ", ".join(
        f"{m.upper()} {u[m]['low']:.2f}-{u[m]['high']:.2f}" for m in ("ar", "sd", "ssd"))
        + f"; SSD p_hit {u['p_hit']['low']:.2f}-{u['p_hit']['high']:.2f}")
    if u["session_spread_measured"] or u["horizon"] != "later":
        flag = "drop --horizon session for a later run" if u["horizon"] == "session" else "within it: --horizon session"
        con.print(f"  {horizon_note(u)}; {flag}")
    rec = report["recommended_mode"].upper()
    pr = report["predicted"]
    ratios = f"SSD {pr['speedup_ssd_vs_sd']:.2f}x SD, {pr['speedup_ssd_vs_ar']:.2f}x AR per sequence"
    if result.objective != "latency":  # the objective's own ratios first
        ratios = (f"SSD {s.tok_s_per_device / result.sd.tok_s_per_device:.2f}x SD, "
                  f"{s.tok_s_per_device / result.ar.tok_s_per_device:.2f}x AR per device; " + ratios)
    con.print(f"recommendation under '{result.objective}': [bold]{rec}[/] ({ratios}, using {s.devices} devices vs "
              f"{result.sd.devices}); SSD beats SD in {u['decided_on']} with probability {u['p_objective']:.2f}"
              + (f"; per sequence with probability {u['p_ssd_beats_sd']:.2f}" if result.objective != "latency" else "")
              + f" (recommended: the highest mean over the draws{'; a close call' if u['close_call'] else ''})")
    if ref is not None and ref["prediction_changed"]:
        unit = u["decided_on"]
        verdict = ("SD there, not SSD" if ref["recommended_mode"] != report["recommended_mode"]
                   else f"still {ref['recommended_mode'].upper()}")
        con.print(f"  as ssd-engine runs it (budget {result.plan.budget} -> {Plan.from_dict(eng['plan']).budget}, "
                  f"see its note): SSD {ref['ssd']:.2f} vs SD {ref['sd']:.2f} {unit}, {verdict}")
    if u["close_call"] or u["p_objective"] < 0.95:
        con.print(f"  largest uncertainty: {u['dominant_uncertainty']}; to settle it: {u['settle']}")
    if "simulated" in report:
        sim = report["simulated"]
        what = (f"{sim['requests']} requests of {sim['prompt_tokens']} + {sim['output_tokens']} tokens, each round at its "
                "batch's context" if "requests" in sim else f"{sim['tokens_per_sequence']} tokens/sequence")
        con.print(f"simulated ({what}, seed {sim['seed']}): "
                  f"AR {sim['ar_tok_s']:.2f}, SD {sim['sd_tok_s']:.2f}, SSD {sim['ssd_tok_s']:.2f} tok/s per sequence, "
                  f"hit rate {sim['p_hit']:.3f}" + ("; re-ranking changed the plan" if sim["changed_plan"] else ""))
    if eng["supported"]:  # the repository and version on the line above, the command alone on one unwrapped line
        con.print(f"ssd-engine, {eng['source']}:", soft_wrap=True, markup=False, highlight=False)
        con.print(eng["command"], soft_wrap=True, markup=False, highlight=False)
    else:
        con.print("ssd-engine: not supported")
    for note in eng["notes"]:
        if note != eng["source"]:
            con.print(f"  note: {escape(note)}")
    if explain:
        t = Table(title=f"where the numbers of {profile.name} come from")
        t.add_column("quantity")
        t.add_column("source")
        for k, v in profile.provenance.items():
            t.add_row(k, escape(v))
        con.print(t)
        for k, v in profile.provenance.items():
            if v.startswith(("assumed", "extrapolated", "conflict")):
                con.print(f"warning: {k} is {v.split(':')[0]}: {escape(v.split(':', 1)[-1].strip())}")
        pt = plan_point(profile, plan)
        if pt.source in ("assumed", "extrapolated") or pt.hit_source in ("assumed", "extrapolated"):
            con.print(f"warning: acceptance at T={plan.temperature:g}, C={plan.c_label} is "
                      f"{pt.source}{'' if not pt.hit_source or pt.hit_source == pt.source else f', hit rates {pt.hit_source}'}")
        for src in profile.sources:
            con.print(f"- {src}")
        measured = report["host"]["measured_on"]
        host = Host.from_dict(measured).label() if measured is not None else \
            "not host-specific (datasheets, published numbers)"
        con.print(f"measured on: {escape(host)}; this host: {escape(Host.from_dict(report['host']['here']).label())}")


if __name__ == "__main__":
    raise SystemExit(main())
