"""`ssd-plan holdout TRACES...`: how well a calibration of these traces predicts runs on text it never saw.

Per draw, the requests of the runs (one prompt pool, batch size 1) are split at random into halves A and B; the
profile calibrated on half A of every run predicts half B of each (the simulator, the run's own plan), and each
prediction's 90% interval is checked against what half B measured (ssd_sim.sim.holdout). The table gives, per run,
the median and worst tok/s error over the draws and how many intervals held, beside the *floor*: the run's own half A
taken as the prediction of its half B, which no model beats on average (the requests differ). Both halves ran in the
same session, so this checks the model and the text, not the host's drift between a calibration and a run hours
later. Bad input: one line naming the field, exit 2, no file written.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import PurePath

from rich.console import Console
from rich.table import Table

from ssd_sim.cli.args import OneLineParser, cli_entry, fail
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.outputs import check_outputs
from ssd_sim.io.probe import load_probe
from ssd_sim.io.trace import read_trace
from ssd_sim.model.mix import tags_by_range
from ssd_sim.sim.holdout import MIN_HALF, REGRET_OK, check_halves

PROG = "ssd-plan holdout"


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Check a calibration on text it never saw: calibrate on a random half of "
                      "the runs' requests, predict the other half of each run, and report the tok/s errors and how "
                      "often the 90% intervals held, over several random halves.")
    p.add_argument("traces", nargs="+", help="JSONL traces written by ssd-run over the same prompts at batch size 1 "
                                             "(one setup: AR, SD and SSD runs, any K, T and C)")
    p.add_argument("--draws", type=int, default=5, help="random halves to draw (default 5; each calibrates once and "
                                                        "simulates every run: about 0.5-1 s per run and draw on 2 "
                                                        "cores)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random halves (default 0)")
    p.add_argument("--probe", metavar="FILE", help="a probe of the same setup and host (`ssd-run probe -o FILE`) for "
                                                   "the latencies, as in `ssd-plan calibrate --probe`")
    p.add_argument("--tags", metavar="CLASS=FIRST-LAST,...",
                   help="request classes by sequence range, for traces whose headers record none (as in "
                        "`ssd-plan calibrate --tags`)")
    p.add_argument("--no-mix", action="store_true",
                   help="calibrate on half A as it is; by default, where the traces record request classes, each "
                        "draw's calibration is weighted to half B's class shares (what a user knows of their traffic)")
    p.add_argument("--allow-leaks", action="store_true",
                   help="report a draw whose half B shares more than 5%% of its text with half A (the same prompt "
                        "twice, or sampled runs with one seed) instead of refusing it")
    p.add_argument("-o", "--output", metavar="FILE", help="write the whole report (every run of every draw) as JSON")
    p.add_argument("--json", action="store_true", help="print the report as JSON instead of tables")
    return p


@cli_entry(PROG)
def main(argv: list[str] | None = None) -> int:
    """`ssd-plan holdout TRACES...`."""
    args = build_parser().parse_args(argv)
    try:
        check_outputs({"output": args.output}, {"traces": args.traces, "probe": args.probe})
        probe = load_probe(args.probe) if args.probe else None
        tags = tags_by_range(args.tags) if args.tags is not None else None
        traces = {}
        for path, name in zip(args.traces, run_names(args.traces), strict=True):
            t = read_trace(path)
            traces[name] = t.with_tags(tags) if tags and not t.header.request_tags else t
        report = check_halves(traces, args.draws, args.seed, probe, weigh=not args.no_mix,
                              allow_leaks=args.allow_leaks)
        if args.output:
            save_json_atomic(args.output, json.dumps(report, indent=2), "output")
    except ConfigError as e:
        fail(PROG, e)
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
    else:
        print_report(report)
        if args.output:
            print(f"report written to {args.output}")
    return 0


def run_names(paths: list[str]) -> list[str]:
    """Each trace's name in the report: its file name where those are unique, else the path as given. A run's
    simulation seeds come from its name and draw (sim.holdout.run_seed), so the numbers do not depend on the folder
    the command runs from, and match bench/fidelity.py's for the same files."""
    names = [PurePath(p).name for p in paths]
    return names if len(set(names)) == len(names) else list(paths)


def print_report(report: dict) -> None:
    """The per-run table and the summary lines (rich)."""
    con = Console(width=None if sys.stdout.isatty() else 120)
    n = report["draws"]
    t = Table(title=f"{n} random halves of {report['requests']} requests: calibrated on half A of every run, "
                    "predicted half B of each")
    for col in ("run", "mode", "T", "measured tok/s", "predicted", "median err", "worst |err|", "floor worst",
                "inside 90%"):
        t.add_column(col, justify="left" if col in ("run", "mode") else "right", overflow="fold")
    for run, v in report["per_run"].items():
        rows = [r for r in report["runs"] if r["run"] == run]
        first = rows[0]
        mode = first["mode"] + (f" K={first['K']}" if first["mode"] != "ar" else "")
        t.add_row(run, mode, f"{first['temperature']:g}", f"{statistics.median(r['measured_tok_s'] for r in rows):.3f}",
                  f"{statistics.median(r['predicted_tok_s'] for r in rows):.3f}", f"{v['median_err_pct']:+.1f}%",
                  f"{v['worst_abs_err_pct']:.1f}%", f"{v['floor_worst_abs_err_pct']:.1f}%",
                  f"{round(v['coverage_90'] * v['draws'])} of {v['draws']}")
    con.print(t)
    con.print(f"tok/s error over {report['predicted']} predictions: median {report['median_abs_err_pct']:.1f}%, "
              f"worst {report['worst_abs_err_pct']:.1f}%; inside their 90% intervals: {report['inside']} of "
              f"{report['predicted']} ({report['inside'] / report['predicted']:.0%}); horizon "
              f"{', '.join(report['horizons'])}" + ("; each draw weighted to half B's request classes"
                                                   if report["weighted"] else ""))
    picks = [c for c in report["choices"] if "recommended_ok" in c]
    if picks:
        con.print(f"the mode the planner's rule recommends measured within {REGRET_OK:g}% of the fastest run in "
                  f"{sum(c['recommended_ok'] for c in picks)} of {len(picks)} choices (one per draw and workload: "
                  "prompts, T, b)")
    if report["half"] < MIN_HALF:
        con.print(f"note: halves of {report['half']} requests; the floor column is how far such halves differ by "
                  "themselves, so errors near it are the requests', not the model's: record more prompts to narrow it")
    con.print("both halves ran in the same session: this checks the model and the text, not the host's drift between "
              "a calibration and a run hours later (ssd-plan's default intervals, horizon later, take that drift)")
    for line in report["left_out"]:
        con.print(f"left out: {line}")
    for w in report["leaks"]:
        con.print(f"NOT A HOLD-OUT (--allow-leaks): {w}")
    for w in report["warnings"]:
        con.print(f"warning: {w}")


if __name__ == "__main__":
    raise SystemExit(main())
