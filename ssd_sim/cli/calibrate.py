"""`ssd-plan calibrate TRACES... -o PROFILE.json`: fit a profile to runtime traces and print the fit report.

The fitting itself is ssd_sim.model.calibrate; this module only parses arguments, checks that -o can be written
before any fitting, writes the profile atomically (through a symlink, never over it) and prints tables. Bad
input: one line `ssd-plan calibrate: error: FIELD: ...` on stderr, exit status 2, no file written.
"""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from ssd_sim.cli.args import OneLineParser, cli_entry, fail
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.outputs import check_outputs
from ssd_sim.io.probe import load_probe
from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import CalibrationReport, calibrate_traces
from ssd_sim.model.mix import RequestMix, tags_by_range
from ssd_sim.model.profile import Profile

PROG = "ssd-plan calibrate"


@cli_entry(PROG)  # a closed stdout ends quietly; Ctrl-C / SIGTERM end with one line and status 130 / 143
def main(argv: list[str] | None = None) -> int:
    """`ssd-plan calibrate TRACES... -o PROFILE.json`."""
    p = OneLineParser(prog=PROG,
                      description="Fit a profile (latency + acceptance model) to ssd-run traces; use it with "
                                  "`ssd-plan --profile FILE` and `ssd-sim --profile FILE`.")
    p.add_argument("traces", nargs="+", help="JSONL traces written by ssd-run (one setup)")
    p.add_argument("-o", "--output", required=True, help="profile JSON to write")
    p.add_argument("--name", help="profile name (default: calibrated-<trace folder>)")
    p.add_argument("--probe", metavar="FILE", help="a probe of the same setup and host (`ssd-run probe -o FILE`): its "
                   "measured latency tables, slowdowns and transfer replace the curves fitted to the traces' rounds")
    p.add_argument("--mix", metavar="CLASS=SHARE,...",
                   help="the request classes of the traffic to predict, e.g. code=0.6,chat=0.4 (shares or counts): "
                        "each class' calibrated requests weigh its share, by the classes the traces' headers record "
                        "(ssd-run tags prompts of its built-in sets and a prompt file's \"tag\" field); default: the "
                        "traces' own mix")
    p.add_argument("--tags", metavar="CLASS=FIRST-LAST,...",
                   help="request classes by sequence range (seq i = a run's i-th prompt, from 0), e.g. "
                        "code=0-23,chat=24-47, for traces whose headers record none (made before ssd-run wrote "
                        "request_tags); traces that record their own keep them")
    p.add_argument("--json", action="store_true", help="print the fit report as JSON")
    args = p.parse_args(argv)
    try:
        check_outputs({"output": args.output}, {"traces": args.traces, "probe": args.probe})  # before the fit
        probe = load_probe(args.probe) if args.probe else None
        mix = RequestMix.parse(args.mix) if args.mix is not None else None
        tags = tags_by_range(args.tags) if args.tags is not None else None
        traces = [read_trace(t) for t in args.traces]
        traces = [t.with_tags(tags) if tags and not t.header.request_tags else t for t in traces]
        profile, report = calibrate_traces(traces, args.traces, args.name, probe=probe, mix=mix)
        data = profile.to_dict()
        data["calibration"] = report.to_dict()
        save_json_atomic(args.output, json.dumps(data, indent=2), "output")
    except ConfigError as e:
        fail(PROG, e)
    for line in report.duplicates:  # a trace given twice was counted once
        print(f"{PROG}: warning: {line}", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(profile, report)
        print(f"profile written to {args.output}")
    return 0


def print_report(profile: Profile, report: CalibrationReport) -> None:
    """Fit quality tables (rich)."""
    con = Console(width=None if sys.stdout.isatty() else 120)
    t = Table(title=f"latency fits ({len(report.traces)} traces)")
    for col in ("model", "samples", "R^2", "median |err|", "max |err|", "fixed ms", "token ms", "exponent"):
        t.add_column(col, justify="left" if col == "model" else "right")
    for role, f in report.latency.items():
        if role in ("interference", "probe"):
            continue
        pr = f["params"]
        t.add_row(role, str(f["samples"]), f"{f['r2']:.3f}", f"{f['median_abs_rel_err']:.1%}",
                  f"{f['max_abs_rel_err']:.1%}", f"{pr['fixed_ms']:.2f}", f"{pr['token_ms']:.3f}",
                  f"{pr['token_exponent']:.3f}")
    con.print(t)
    if "probe" in report.latency:
        pr = report.latency["probe"]
        ratios = ", ".join(f"{v:.2f}" for v in pr["runs_vs_table"].values()) or "no AR / SD traces"
        con.print(f"latency from the probe {pr['path']} (the fits above are the traces' own, for comparison): "
                  f"target {report.latency['target']['table_range']}, draft {report.latency['draft']['table_range']}; "
                  f"runs' verify / table: {ratios}")
        if pr.get("timed"):
            con.print(f"timed: {pr['timed']}")
        con.print(f"after an idle wait: {pr['after_idle']['source']}")
    con.print("overheads (ms): " + ", ".join(f"{k}={v:.2f}" for k, v in report.overheads.items() if v is not None))
    con.print(f"target beside the draft: {report.latency['interference']['source']}")
    con.print(f"draft beside the target: {report.latency['interference']['draft_source']}")
    t = Table(title="acceptance and hit curves at the traced (T, C)")
    cols = ["T", "C", "per-position acceptance counted (95% CI)"]
    cols += ["derived from logged distributions"] if report.logged else []
    for col in cols + ["primary miss(1), r (ranks)", "backup miss(1), r (ranks)"]:
        t.add_column(col)
    for e in report.acceptance:
        acc = ", ".join(f"{p['acceptance']:.2f} [{p['ci95'][0]:.2f},{p['ci95'][1]:.2f}]"
                        for p in e["per_position"][:4])
        derived = [", ".join(f"{a:.2f}" for a in e.get("derived_acceptance", [])[:4])] if report.logged else []
        hp, hb = e["primary_hit"], e["backup_hit"]
        t.add_row(f"{e['temperature']:g}", f"{e['saguaro_c']:g}", acc, *derived,
                  f"{hp['miss_at_one']:.2f}, {hp['r']:.2f} (n={hp['samples']})",
                  f"{hb['miss_at_one']:.2f}, {hb['r']:.2f} (n={hb['samples']})")
    con.print(t)
    if report.logged:
        lg = report.logged
        con.print(f"acceptance model: derived from {lg['contexts']} logged contexts (top-{lg['top_n']}), contexts per "
                  f"position {lg['positions']}, truncation bound {lg['truncation_bound']:.3f}"
                  + (f" ({lg['truncation_share']:.0%} of it added back, measured on {lg['truncation_counted']} counted "
                     "draft tokens at T > 0)" if lg.get("truncation_counted") else ""))
    if "acceptance.mix" in profile.provenance:
        con.print(f"workload mix: {profile.provenance['acceptance.mix']}")
    if line := report.unsteady_line():
        con.print(line)
    for w in report.warnings:
        con.print(f"warning: {w}")
    con.print(f"profile {profile.name}: max batch {profile.max_batch_size}")


if __name__ == "__main__":
    raise SystemExit(main())
