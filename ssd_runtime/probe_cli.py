"""`ssd-run probe -o PROBE.json`: time every forward shape the planner asks about on this host (ssd_runtime.probe).

    ssd-run probe -o runs/probe.json                       # the default pair, b = 1, 2, 4, K up to 8
    ssd-plan calibrate runs/*.jsonl --probe runs/probe.json -o profile.json

The probe file is what `ssd-plan calibrate --probe` turns into measured latency tables; `calibrate-here` probes
by itself. Bad input: one line naming the flag, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics

from ssd_sim.cli.args import OneLineParser, add_knob_arg, fail, positive_int
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.outputs import check_outputs, claim_outputs
from ssd_sim.io.probe import idle_extra
from ssd_sim.io.values import int_list

from .probe import ProbeGrid, check_idle_gaps, run_probe

PROG = "ssd-run probe"


def add_probe_args(p: OneLineParser, with_temperature: bool = True) -> None:
    """The grid flags (shared with calibrate-here)."""
    g = p.add_argument_group("probe grid")
    d = ProbeGrid()
    g.add_argument("--probe-batch", type=int_list, default=d.batch, metavar="B[,B..]",
                   help=f"sequences per forward (default {','.join(map(str, d.batch))}; the batch sizes you will plan)")
    g.add_argument("--probe-max-k", type=positive_int, default=d.max_k, metavar="K",
                   help=f"verifies and glues of up to K + 1 tokens (default {d.max_k})")
    g.add_argument("--probe-branch-rows", type=int_list, default=d.branch_rows, metavar="R[,R..]",
                   help="draft tree-step rows, b x budget (default " + ",".join(map(str, d.branch_rows)) + ")")
    g.add_argument("--probe-repeats", type=positive_int, default=d.repeats, metavar="N",
                   help=f"timed samples per shape, interleaved (default {d.repeats})")
    g.add_argument("--probe-idle-gaps", type=idle_gaps_arg, default=d.idle_gaps_ms, metavar="MS[,MS..]|none",
                   help="sleeps before the after-idle forwards, ascending ms (default "
                        + ",".join(f"{x:g}" for x in d.idle_gaps_ms) + "; none skips them)")
    if with_temperature:
        g.add_argument("--context", type=positive_int, default=d.context, metavar="TOKENS",
                       help=f"cached tokens per row: your prompts' length + half the output (default {d.context})")
        add_knob_arg(g, "temperature", default=0.0)  # the sampling the verify and the draft do (0: greedy)


def idle_gaps_arg(text: str) -> tuple[float, ...]:
    """'5,50,500' -> (5.0, 50.0, 500.0) ms; 'none' -> () (no after-idle forwards)."""
    if text.strip().lower() == "none":
        return ()
    try:
        gaps = tuple(float(x) for x in text.split(","))
        check_idle_gaps(gaps)
    except (ValueError, ConfigError):  # at parse time: calibrate-here probes only after its runs
        raise argparse.ArgumentTypeError(f"must be ascending ms in (0, 10000] like 5,50,500 or none, got {text!r}") \
            from None
    return gaps


def grid_from_args(args, context: int, temperature: float) -> ProbeGrid:
    return ProbeGrid(batch=args.probe_batch, max_k=args.probe_max_k, branch_rows=args.probe_branch_rows,
                     context=context, repeats=args.probe_repeats, temperature=temperature,
                     transfer_k=tuple(sorted({1, max(1, args.probe_max_k // 2), args.probe_max_k})),
                     idle_gaps_ms=args.probe_idle_gaps)


def main(argv: list[str]) -> int:
    from .cli import add_model_args, model_specs

    p = OneLineParser(prog=PROG, description="Time the target's and the draft's forwards at every shape the planner "
                      "asks about, both models at once, and the transfer; write a probe file for `ssd-plan "
                      "calibrate --probe`.")
    add_model_args(p)
    add_probe_args(p)
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="probe JSON to write")
    p.add_argument("--no-pin", action="store_true", help="do not pin the two processes to one core each")
    args = p.parse_args(argv)
    with contextlib.ExitStack() as stack:
        try:
            specs = model_specs(args, with_draft=True)
            check_outputs({"output": args.output}, {role: s.path for role, s in specs.items() if s})
            stack.enter_context(claim_outputs({"output": args.output}))  # one probe writes this file at a time
            grid = grid_from_args(args, args.context, args.temperature)
        except ConfigError as e:
            fail(PROG, e)
        res = run_probe(specs["target"], specs["draft"], grid, pin=not args.no_pin)
        save_json_atomic(args.output, json.dumps(res.to_dict(), indent=1), "output")
    print_summary(res)
    print(f"probe written to {args.output} ({res.wall_s:.0f} s); next: ssd-plan calibrate TRACES --probe {args.output}")
    return 0


def print_summary(res) -> None:
    """A few lines: the probed ranges, the cheapest and dearest shapes, slowdowns, transfer."""
    for role in ("target", "draft"):
        med = {s: statistics.median(v) for s, v in getattr(res, role).items()}
        lo, hi = min(med, key=med.get), max(med, key=med.get)
        print(f"{role}: {len(med)} shapes, {med[lo]:.2f} ms ({lo[0]} {lo[1]}x{lo[2]}) .. {med[hi]:.2f} ms "
              f"({hi[0]} {hi[1]}x{hi[2]})")
    i = res.interference
    print(f"both busy: verify +{i['one_row']:.0%} beside one-row draft steps, +{i['rows']:.0%} beside "
          f"{i['rows_draft_shape'][1]}-row steps; draft +{i['draft']:.0%} beside a verify")
    if res.transfer:  # at the smallest probed batch (--probe-batch need not hold 1)
        b0 = min(b for b, _ in res.transfer)
        one = [statistics.median(v) for (b, _), v in res.transfer.items() if b == b0]
        print(f"transfer: {statistics.median(one):.2f} ms per request + reply at b = {b0}")
    for role, d in res.after_idle.items():
        back = {s: statistics.fmean(v) for s, v in d["back"].items()}
        extra = {gap: idle_extra(back, {s: statistics.fmean(v) for s, v in by_shape.items()})
                 for gap, by_shape in d["after"].items()}
        cost = [f"{ms:+.1f} ms ({frac:+.0%}) after {gap:g} ms" for gap, (ms, frac) in extra.items()]
        print(f"{role} after a sleep: {', '.join(cost)}")
