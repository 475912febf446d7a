"""`ssd-plan capacity`: the cheapest deployment that serves a load within TTFT / TPOT targets (ssd_sim.sim.capacity).

    ssd-plan capacity --preset llama70b-1b-h100 --rate 10 --num-requests 10000 --tokens 512 \\
        --ttft-ms 500 --tpot-ms 8 --gpu-price 2.5
    ssd-plan capacity --profile P.json --arrivals log.json --tpot-ms 120 --tpot-pct 99 --routers round-robin,least-loaded

Prints the cheapest configuration per mode (replicas x batch cap, GPUs, the percentiles, margins, tok/s, $ per
million tokens), the cheapest overall, and SD / AR on the same GPUs as more replicas. Bad input is one line, exit 2.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import NoReturn

from rich.console import Console
from rich.table import Table

from ssd_sim.cli.args import (
    OneLineParser,
    Terminated,
    add_knob_arg,
    bounded_int,
    cli_entry,
    fail,
    nonneg_float,
    print_error,
    stopped,
)
from ssd_sim.cli.growth import ProfileAt, growth, growth_line, mean_lengths
from ssd_sim.cli.source import (
    add_source_args,
    at_workload_context,
    growing_note,
    profile_of,
    source_files,
    source_of,
)
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.limits import MAX_REQUESTS, MAX_TOKENS
from ssd_sim.io.outputs import check_outputs
from ssd_sim.io.values import first_repeat, int_list
from ssd_sim.sim.capacity import (
    MODES,
    Capacity,
    Load,
    Outcome,
    SearchResult,
    Targets,
    outcome_row,
    overload_line,
    same_gpus,
    search,
)
from ssd_sim.sim.metrics import json_safe
from ssd_sim.sim.router import ROUTERS
from ssd_sim.sim.workload import MAX_RATE, MIN_RATE, OUTPUT_DISTS, Workload, read_arrivals

PROG = "ssd-plan capacity"


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="The cheapest deployment (mode, replicas, batch cap, backup) that serves "
                      "a load within TTFT / TPOT targets, by simulating the load across replicas behind a router.")
    src = p.add_argument_group("profile (one of)")
    src.add_argument("--preset", metavar="NAME", help="built-in profile (see ssd-plan --list-presets)")
    src.add_argument("--profile", metavar="FILE", help="profile JSON (from ssd-plan calibrate)")
    add_source_args(src)
    w = p.add_argument_group("load")
    w.add_argument("--rate", type=nonneg_float, metavar="R", help=f"Poisson arrivals, requests per second "
                   f"({MIN_RATE:g}..{MAX_RATE:g})")
    w.add_argument("--num-requests", type=bounded_int(1, MAX_REQUESTS, "requests"), default=10_000, metavar="N",
                   help="requests of the Poisson load (default 10000)")
    w.add_argument("--arrivals", metavar="FILE", help='instead of --rate: {"arrival_ms": [...], "output_tokens": '
                   '[...] (optional), "prompt_tokens": [...] or one number (optional)}, times in ms from the start; '
                   'each request prefills its own prompt')
    w.add_argument("--tokens", type=bounded_int(1, MAX_TOKENS, "output tokens per request"), default=512, metavar="N",
                   help="mean output tokens per request (default 512)")
    w.add_argument("--output-dist", choices=OUTPUT_DISTS, default="fixed", help="output lengths around --tokens")
    w.add_argument("--prompt-tokens", type=bounded_int(0, MAX_TOKENS, "prompt tokens"), default=128, metavar="P",
                   help="prompt tokens per request (default 128; an arrivals file's prompt_tokens replace it)")
    add_knob_arg(w, "temperature")
    t = p.add_argument_group("targets (at least one)")
    t.add_argument("--ttft-ms", type=nonneg_float, metavar="MS", help="time to first token target (ms)")
    t.add_argument("--ttft-pct", type=nonneg_float, default=90.0, metavar="P", help="its percentile (default 90)")
    t.add_argument("--tpot-ms", type=nonneg_float, metavar="MS", help="time per output token target (ms)")
    t.add_argument("--tpot-pct", type=nonneg_float, default=90.0, metavar="P", help="its percentile (default 90)")
    s = p.add_argument_group("search")
    s.add_argument("--tp-options", type=int_list, metavar="N[,N..]",
                   help="with --target/--draft/--gpu: tensor-parallel degrees of the target to consider (e.g. 1,2,4,8); "
                        "default the one --tp gives")
    s.add_argument("--gpu-price", type=nonneg_float, metavar="USD", help="price per GPU-hour (for $ per M tokens)")
    s.add_argument("--modes", default="ar,sd,ssd", help="modes to consider (default ar,sd,ssd)")
    s.add_argument("--batch-caps", type=int_list, default=(1, 2, 4, 8, 16, 32), metavar="B[,B..]",
                   help="batch caps per replica to consider (default 1,2,4,8,16,32)")
    s.add_argument("--routers", default="round-robin", help=f"routers to consider: {', '.join(ROUTERS)}")
    s.add_argument("--max-replicas", type=bounded_int(1, 4096, "replicas"), default=64, metavar="R",
                   help="most replicas of one configuration (default 64)")
    s.add_argument("--jobs", type=bounded_int(1, 256, "processes"), default=min(os.cpu_count() or 1, 8), metavar="N",
                   help="processes simulating replicas (default: the CPU count, at most 8; 1 = this process)")
    s.add_argument("--ray", action="store_true", help="simulate on a Ray cluster (ray.util.multiprocessing.Pool; "
                                                      "needs `pip install ray`): the same results as --jobs")
    s.add_argument("--seed", type=bounded_int(0, 2**32 - 1, "random seed"), default=0, help="random seed")
    o = p.add_argument_group("output")
    o.add_argument("--json", action="store_true", help="print the result as JSON")
    o.add_argument("-o", "--output", metavar="FILE", help="write the result (JSON) here")
    return p


def _names(text: str, allowed: tuple[str, ...], field: str) -> tuple[str, ...]:
    """A comma list of `allowed` names, each once (an empty or repeated entry is refused, as --batch-caps does)."""
    names = tuple(x.strip() for x in text.split(","))
    bad = [n for n in names if n not in allowed]
    if bad or not names:
        raise ConfigError(field, f"{(bad or [text])[0]!r} is not one of {', '.join(allowed)}; give a comma list")
    twice = first_repeat(names)
    if twice is not None:
        raise ConfigError(field, f"names {twice!r} twice; give each once")
    return names


def load_of(args) -> tuple[Load, Workload]:
    """The load from --rate / --arrivals (exactly one), and the workload it was drawn from."""
    if (args.rate is None) == (args.arrivals is None):
        raise ConfigError("rate", "give the load as --rate R (requests per second) or --arrivals FILE, one of them")
    if args.arrivals is not None:
        wl = read_arrivals(args.arrivals, 1, args.tokens, args.prompt_tokens, args.output_dist)
    else:
        wl = Workload("poisson", args.num_requests, 1, args.rate, args.tokens, args.output_dist, args.prompt_tokens)
    return Load.of(wl, args.seed), wl


def profiles_of(args, workload: Workload) -> tuple[list, str | None, dict[int, dict]]:
    """The profile of the source flags, or with --tp-options one per tensor-parallel degree (specs only), each at the
    workload's mean decode context where its latencies depend on it (cli.source.at_workload_context); the line saying so and
    that the simulations follow each round's context (None if not); and then each profile's source (no context) by
    target devices."""
    source = source_of(args)
    if args.tp_options and "spec" not in source:
        raise ConfigError("tp_options", "--tp-options needs a pair from specs (--target, --draft, --gpu): a preset's or "
                                        "profile's latencies hold for its own TP only")
    sources = [{"spec": {**source["spec"], "tp": tp}} for tp in args.tp_options] if args.tp_options else [source]
    found, kept, left_out = [], [], []
    for s in sources:
        try:
            found.append(at_workload_context(s, profile_of(s), workload))
            kept.append(s)
        except ConfigError as e:  # a degree too small for the weights or one sequence's KV cache: the others may fit
            if not args.tp_options or e.field not in ("tp", "context") or s is sources[-1] and not found:
                raise
            left_out.append(f"--tp {s['spec']['tp']} left out: {e}")
    for line in left_out:
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    sources, profiles, mean = kept, [p for p, _ in found], found[0][1]
    if mean is None:
        return profiles, None, {}
    by_tp = {p.latency.target_devices: s for s, p in zip(sources, profiles, strict=True)}
    return profiles, growing_note(mean, "the plans and the analytic bounds"), by_tp


def growth_of(sources: dict[int, dict], by_tp: dict, result: SearchResult, workload: Workload) -> dict | None:
    """The cheapest SSD deployment's plan at its batch cap over the context growing from the mean prompt to prompt +
    output (cli.growth), when the latencies were taken at the mean decode context (`sources`, from profiles_of, not
    empty); else None."""
    ssd = result.per_mode.get("ssd")
    if ssd is None or not sources:
        return None
    c = ssd.config
    plan, _ = by_tp[c.tp].plan("ssd", c.max_batch, c.backup)
    prompt, output = mean_lengths(workload)
    g = growth(sources[c.tp], prompt, output, 1, plan.replace(batch_size=c.max_batch), modes=("ssd",))["ssd"]
    return {"prompt_tokens": prompt, "output_tokens": output, "batch": c.max_batch, **g}


def _growing(sources: dict[int, dict], profile) -> ProfileAt | None:
    """The simulations' profile at each round's context, where the latencies depend on it (else None)."""
    source = sources.get(profile.latency.target_devices)
    return ProfileAt(source) if source else None


def _pool(args):
    """(a map function, the pool to close): Ray's Pool with --ray, a process pool with --jobs > 1, else map."""
    if args.ray:
        try:
            from ray.util.multiprocessing import Pool
        except ImportError:
            raise ConfigError("ray", "Ray is not installed here: `pip install ray`, or drop --ray (a local process "
                                     "pool gives the same results)") from None
        pool = Pool()
        return pool.map, pool
    if args.jobs > 1:
        pool = ProcessPoolExecutor(max_workers=args.jobs, initializer=_quiet_worker)
        return pool.map, pool
    return map, None


def _quiet_worker() -> None:
    """A worker ends at SIGTERM without a traceback (it inherits the CLI's handler, which raises) and leaves Ctrl-C to
    the parent, which stops the pool (_close)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _close(pool, finished: bool) -> None:
    """Close the pool: after a finished search, wait for its idle workers; after bad input, drop the queued simulations
    and wait only for the running ones (the workers are alive: a clean exit)."""
    if pool is None:
        return
    if not hasattr(pool, "shutdown"):  # Ray's multiprocessing Pool
        (pool.close if finished else pool.terminate)()
        return
    pool.shutdown(cancel_futures=not finished)


def _stop(pool, err: BaseException) -> NoReturn:
    """A dead worker, Ctrl-C or SIGTERM during the search: its one line and exit status. With a local process pool the
    workers are stopped and the process leaves at once: Python 3.11's executor cannot be unwound once its workers are
    gone (its threads, stuck feeding or failing their work, hang the exit or print tracebacks), and nothing has been
    written yet (-o comes after the search)."""
    if isinstance(err, BrokenProcessPool):
        print_error(PROG, ConfigError("jobs", "a simulation worker process died (killed, or out of memory); nothing "
                                              "was written: run again, or with --jobs 1"))
        status = 2
    else:
        status = stopped(PROG, err)
    if pool is None or not hasattr(pool, "shutdown"):
        raise SystemExit(status)  # no pool, or Ray's: main's finally closes it as usual
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in multiprocessing.active_children():  # the pool's workers
        proc.terminate()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


@cli_entry(PROG)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    pool, finished = None, False
    try:
        check_outputs({"output": args.output}, {"arrivals": args.arrivals, **source_files(args)})
        targets = Targets(args.ttft_ms, args.tpot_ms, args.ttft_pct, args.tpot_pct)
        modes = _names(args.modes, MODES, "modes")
        routers = _names(args.routers, ROUTERS, "routers")
        load, wl = load_of(args)
        profiles, args.context_note, sources = profiles_of(args, wl)
        profile = profiles[0]
        mapper, pool = _pool(args)
        by_tp = {p.latency.target_devices: Capacity(p, load, targets, args.temperature or 0.0, args.gpu_price,
                                                    args.seed, mapper, profile_at=_growing(sources, p))
                 for p in profiles}
        result = search(list(by_tp.values()), modes, args.batch_caps, routers, args.max_replicas)
        ref = anchor(result)
        answer = _same_gpus(by_tp[ref.config.tp], result) if ref else {}
        finished = True
    except ConfigError as e:
        fail(PROG, e)
    except (BrokenProcessPool, KeyboardInterrupt, Terminated) as e:
        _stop(pool, e)
    finally:
        _close(pool, finished)
    data = _to_json(profile, load, targets, result, answer) | ({"context_note": args.context_note}
                                                              if args.context_note else {})
    growth_check = growth_of(sources, by_tp, result, wl)
    if growth_check:
        data["context_growth"] = growth_check
    if args.output:
        save_json_atomic(args.output, json.dumps(json_safe(data), indent=2), "output")
    if args.json:
        print(json.dumps(json_safe(data), indent=2))
    else:
        _print(profile, load, targets, result, answer, args)
        if growth_check:
            print(growth_line("ssd", growth_check, growth_check["prompt_tokens"], growth_check["output_tokens"],
                              growth_check["batch"], "the simulations charge each round at its batch's context, "
                                                     "so their TPOTs hold for the whole decode"))
    return 0


def anchor(result: SearchResult) -> Outcome | None:
    """What the other modes are compared with on the same GPUs: SSD's cheapest (is SSD worth its draft device?),
    else the cheapest overall."""
    return result.per_mode.get("ssd") or result.best


def _same_gpus(cap: Capacity, result: SearchResult) -> dict[str, Outcome | None]:
    """The other modes on the anchor's GPUs (SSD's cheapest), as more or fewer replicas at their own best cap."""
    ref = anchor(result)
    if ref is None:
        return {}
    out = {}
    for mode, o in result.per_mode.items():
        if mode != ref.config.mode:
            c = o.config if o is not None else ref.config
            out[mode] = same_gpus(cap, ref.gpus, mode, c.max_batch, c.router, c.backup if mode == "ssd" else "-")
    return out


def _to_json(profile, load: Load, targets: Targets, result: SearchResult, answer: dict) -> dict:
    return {"profile": profile.name, "load": {"requests": len(load.arrival_ms), "offered_tok_s": load.offered_tok_s,
                                              "mean_output_tokens": float(load.output_tokens.mean())},
            "targets": {"ttft_ms": targets.ttft_ms, "ttft_pct": targets.ttft_pct, "tpot_ms": targets.tpot_ms,
                        "tpot_pct": targets.tpot_pct},
            **result.to_dict(),
            "same_gpus": {"as": outcome_row(anchor(result)) if anchor(result) else None,
                          **{m: outcome_row(o) if o else None for m, o in answer.items()}}}


def _cfg(o: Outcome) -> str:
    c = o.config
    backup = f", {c.backup} backup" if c.mode == "ssd" else ""
    router = "" if c.router == "round-robin" else f", {c.router}"
    return f"{c.replicas} x TP={c.tp} b<={c.max_batch}{backup}{router}"


def _print(profile, load: Load, targets: Targets, result: SearchResult, answer: dict, args) -> None:
    con = Console(width=None if sys.stdout.isatty() else 120)
    want = [f"TTFT p{targets.ttft_pct:g} <= {targets.ttft_ms:g} ms" if targets.ttft_ms else "",
            f"TPOT p{targets.tpot_pct:g} <= {targets.tpot_ms:g} ms" if targets.tpot_ms else ""]
    con.print(f"{profile.name}: {len(load.arrival_ms)} requests, {float(load.output_tokens.mean()):.0f} output tokens "
              f"each on average, {load.offered_tok_s:,.0f} tok/s offered; targets: {', '.join(w for w in want if w)}")
    if args.context_note:
        con.print(args.context_note, soft_wrap=True, markup=False, highlight=False)
    t = Table(title="cheapest configuration per mode (simulated on the whole load)")
    for col in ("mode", "replicas x cap", "GPUs", f"TTFT p{targets.ttft_pct:g} ms", f"TPOT p{targets.tpot_pct:g} ms",
                "smallest margin", "tok/s", "$ / M tokens"):
        t.add_column(col, justify="left" if col in ("mode", "replicas x cap") else "right")
    for mode, o in result.per_mode.items():
        if o is None:
            t.add_row(mode.upper(), f"none within {args.max_replicas} replicas", "-", "-", "-", "-", "-", "-")
            continue
        t.add_row(mode.upper(), _cfg(o), str(o.gpus), f"{o.ttft_ms:.1f}", f"{o.tpot_ms:.2f}",
                  f"{min(o.margins.values()):+.0%}", f"{o.tok_s:,.0f}", _usd(o))
    con.print(t)
    best = result.best
    if best is None:
        worst = max(result.outcomes, key=lambda o: o.config.replicas, default=None)
        line = overload_line(load.offered_tok_s, load.offered_tok_s / worst.rho, f"{worst.config.replicas} replicas") \
            if worst is not None and worst.rho > 0 else None
        con.print(f"no configuration meets the targets within {args.max_replicas} replicas" + (f"; {line}" if line
                                                                                              else ""))
        return
    cost = f" ({_usd(best)} per M tokens)" if best.usd_per_mtok is not None else ""
    con.print(f"cheapest: {best.config.mode.upper()} {_cfg(best)} on {best.gpus} GPUs{cost}; "
              + ", ".join(f"{k.upper()} margin {v:+.0%}" for k, v in best.margins.items()))
    ref = anchor(result)
    for mode, o in answer.items():
        head = f"{mode.upper()} on {ref.config.mode.upper()}'s {ref.gpus} GPUs"
        if o is None:
            con.print(f"{head}: not even one replica fits")
            continue
        verdict = "meets the targets" if o.meets else "misses them"
        con.print(f"{head} ({_cfg(o)}): TTFT {o.ttft_ms:.1f} ms, TPOT "
                  f"{o.tpot_ms:.2f} ms: {verdict}" + ("; " + overload_line(load.offered_tok_s, load.offered_tok_s /
                                                                             o.rho, "those replicas")
                                                      if o.overloaded else ""))


def _usd(o: Outcome) -> str:
    return "-" if o.usd_per_mtok is None or not math.isfinite(o.usd_per_mtok) else f"${o.usd_per_mtok:.3f}"


if __name__ == "__main__":
    raise SystemExit(main())
