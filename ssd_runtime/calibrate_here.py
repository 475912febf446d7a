"""`ssd-run calibrate-here`: measure this host in a few minutes, write a calibrated profile, print its plan.

CPU latencies are per host (two hosts of one machine kind ran the same pair 1.7x apart, and the extra cost of a
multi-token verify, which decides K, differed too), so a profile measured elsewhere is a guess here. This
command runs a small fixed grid on this host, in one process pair (models loaded once, one warm-up job):

    ar      b = 1                     the target's one-token forward (the draft idle)
    sd-k2   b = 1                     verifies of 3 tokens, sequential draft steps
    sd-k4   b = 1                     verifies of 5 tokens
    sd-k6   b = 1, every prompt       verifies of 7 tokens, per-position acceptance up to position 6
    ssd-k2  b = 1, fan-out [0, 0, 1], every prompt
                                      one branch row per draft step while the target verifies (the
                                      interference of a matrix-vector draft stream: +46% on the verify of an
                                      AVX-512 EPYC host), lookups, transfers, bonus-token ranks (hit curves)
    ssd-k2  b = 1, fan-out [1, 1, 2]  four rows per step: the interference of multi-row steps
    ssd-k2  b = 2, fan-out [1, 1, 1]  two sequences: how latencies grow with the batch

(per --temperatures value but AR and b = 2), the latency-only runs on the first 4 selected prompts, then
probes (ssd_runtime.probe: the target and the draft timed at every shape the planner asks about, b in
--probe-batch and K up to --probe-max-k, both at once, and the transfer; at the prompts' median length + half the
output), then fits a profile as `ssd-plan calibrate --probe` does (it records this host): latencies from the
probe's tables, acceptance and hit curves from the runs on every prompt only (a few prompts would bias them), and
plans with it as `ssd-plan --profile`.
Acceptance varies more between prompts than between hosts (per prompt, 0.45 to 0.98 of the drafted tokens
on the built-in code set), so the default samples every other prompt of the set
(12 x 32 tokens; about 5 minutes on a 2-core CPU host, plus 2-7 for the probe: --no-probe skips it): pass
--prompts with a sample of your own workload to plan for it. Writes into --out: one trace per run, probe.json, manifest.json, profile.json and plan.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ssd_sim.cli.args import OneLineParser, fail
from ssd_sim.cli.plan import print_report
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host, isa_summary
from ssd_sim.io.jsonfile import save_json_atomic
from ssd_sim.io.outputs import claim_outputs
from ssd_sim.io.probe import load_probe
from ssd_sim.model.calibrate import calibrate
from ssd_sim.model.mix import RequestMix
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.report import build_report, plan_file

from .cli import (
    DEFAULT_LOG_TOPN,
    add_model_args,
    add_prompt_args,
    model_specs,
    prompt_ids,
    slice_label,
    tags_header,
)
from .probe_cli import add_probe_args

PROG = "ssd-run calibrate-here"


FEW = 4  # prompts of the runs that only measure latencies (the acceptance runs take every selected prompt)


@dataclass(frozen=True)
class Run:
    """One run of the calibration grid; `all_prompts` for the runs acceptance and hit curves come from."""

    name: str
    plan: Plan
    all_prompts: bool = False


def grid(temperatures: tuple[float, ...]) -> list[Run]:
    """The runs (see the module docstring): AR and the b = 2 SSD run once, the others per temperature."""
    runs = [Run("ar-b1-t0", Plan(mode="ar", batch_size=1))]
    for T in temperatures:
        t = f"t{T:g}"
        runs += [Run(f"sd-k2-b1-{t}", Plan(mode="sd", num_speculative_tokens=2, temperature=T)),
                 Run(f"sd-k4-b1-{t}", Plan(mode="sd", num_speculative_tokens=4, temperature=T)),
                 Run(f"sd-k6-b1-{t}", Plan(mode="sd", num_speculative_tokens=6, temperature=T), True),
                 Run(f"ssd-k2-f001-b1-{t}", Plan(num_speculative_tokens=2, fan_out=(0, 0, 1), backup="jit",
                                                 temperature=T), True),
                 Run(f"ssd-k2-f112-b1-{t}", Plan(num_speculative_tokens=2, fan_out=(1, 1, 2), backup="jit",
                                                 temperature=T))]
    T = temperatures[0]
    runs.append(Run(f"ssd-k2-f111-b2-t{T:g}", Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), backup="jit",
                                                   batch_size=2, temperature=T)))
    return runs


def build_parser() -> OneLineParser:
    p = OneLineParser(prog=PROG, description="Measure this host with a short AR / SD / SSD grid (a few minutes), "
                      "fit a profile to the traces and print the plan it implies. CPU latencies are per host: run "
                      "this before trusting any CPU prediction on new hardware.")
    add_model_args(p)
    add_prompt_args(p, default_tokens=32, default_num=12)
    p.set_defaults(prompt_stride=2)
    o = p.add_argument_group("calibration")
    o.add_argument("--temperatures", type=_temperatures, default=(0.0,), metavar="T[,T..]",
                   help="temperatures to measure acceptance at (default 0; e.g. 0,1 adds five runs)")
    o.add_argument("--out", metavar="DIR", help="new or empty folder for traces, profile.json, plan.json "
                   "(default runs/calibrate-here-<UTC time>)")
    o.add_argument("--name", help="profile name (default calibrated-here-<cpu>)")
    o.add_argument("--mix", metavar="CLASS=SHARE,...", type=_mix,
                   help="weigh the prompts' classes to your traffic's shares, e.g. code=0.7,chat=0.3 (with "
                        "--prompt-set pool or a prompt file with \"tag\" fields; ssd-plan calibrate --mix)")
    o.add_argument("--no-pin", action="store_true", help="do not pin the two processes to one core each")
    o.add_argument("--no-progress", action="store_true", help="no progress bar (one line per run instead)")
    o.add_argument("--no-probe", action="store_true", help="skip the probe: latencies fitted to the grid's rounds only "
                   "(curves, extrapolated beyond the grid's shapes)")
    add_probe_args(p, with_temperature=False)
    return p


def _mix(text: str) -> RequestMix:
    """--mix: a RequestMix, or argparse's one-line error naming the fix."""
    try:
        return RequestMix.parse(text)
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).split(": ", 1)[-1]) from None


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    default = Path("runs") / time.strftime("calibrate-here-%Y%m%d-%H%M%S", time.gmtime())
    with contextlib.ExitStack() as stack:  # this run is the only one writing its folder
        try:
            specs = model_specs(args, with_draft=True)
            job_kw = prompt_ids(args, Path(specs["target"].path))
            if args.mix is not None:  # refused now, not after the runs: a class the prompts do not hold
                args.mix.weights([t or "" for t in job_kw["tags"]], "the selected prompts")
            if not args.no_probe:  # the probe's grid, checked now, not after the runs (its context comes later)
                from .probe_cli import grid_from_args

                grid_from_args(args, 1, args.temperatures[0])
            claimed = stack.enter_context(claim_outputs({"out": args.out or default},
                                                        unique=[] if args.out else ["out"]))
            out = _out_dir(claimed["out"])
        except ConfigError as e:
            fail(PROG, e)
        return _calibrate_into(out, specs, job_kw, args, argv)


def _calibrate_into(out: Path, specs: dict, job_kw: dict, args, argv: list[str]) -> int:
    """The grid, the probe, the profile and the plan, written into the claimed folder `out`."""
    runs = grid(args.temperatures)
    n = len(job_kw["prompts"])
    print(f"{PROG}: {len(runs)} runs on {n} prompts ({job_kw['source']}; latency-only runs on {min(n, FEW)}) x "
          f"{args.max_new_tokens} tokens -> {out}/")
    paths = _measure(runs, specs, job_kw, args, out)
    probe = None if args.no_probe else _probe(specs, job_kw, args, out)
    profile_path, plan_path = out / "profile.json", out / "plan.json"
    try:
        every = [str(p) for p, r in zip(paths, runs, strict=True) if r.all_prompts]
        profile, report = calibrate([str(p) for p in paths], args.name, every,
                                    probe=load_probe(probe) if probe else None, mix=args.mix)
    except ConfigError as e:
        fail(PROG, e)
    profile = replace(profile, name=args.name or _default_name(profile.host))
    save_json_atomic(profile_path, json.dumps({**profile.to_dict(), "calibration": report.to_dict()}, indent=2))
    _write_manifest(out, runs, paths, argv, profile.host, probe is not None)
    print(f"profile written to {profile_path} (measured on {profile.host.label()})\n")
    _plan(profile_path, args.temperatures[0], plan_path)
    print(f"\nnext: ssd-plan --profile {profile_path} [-b B -t T] [--horizon session: a run within the hour]   |   "
          f"ssd-run --plan {plan_path} --prompt-offset N   (check it on prompts the calibration did not see)")
    return 0


def _plan(profile_path: Path, temperature: float, plan_path: Path) -> None:
    """What `ssd-plan --profile PROFILE -t T -o PLAN` prints and writes, through the library (b = 1, latency)."""
    profile = load_profile_file(profile_path)
    result = make_plan(profile, PlanRequest(temperature=temperature))
    report = build_report(profile, result, source={"profile": {"name": profile.name, "preset": None,
                                                               "path": str(profile_path)}})
    if report["host"]["warning"]:
        print(f"ssd-plan: warning: {report['host']['warning']}", file=sys.stderr)
    save_json_atomic(plan_path, plan_file(result, report).to_json())
    print_report(profile, result, report)
    print(f"plan written to {plan_path}")


def _temperatures(text: str) -> tuple[float, ...]:
    from ssd_sim.cli.args import nonneg_float
    from ssd_sim.io.limits import MAX_TEMPERATURE

    values = tuple(nonneg_float(v) for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError(f"{text!r} holds no temperature; give one or more, e.g. 0 or 0,1")
    if len(set(values)) < len(values) or max(values) > MAX_TEMPERATURE:
        raise argparse.ArgumentTypeError(f"{text!r}: give each temperature once, each in 0..{MAX_TEMPERATURE:g}")
    return values


def _out_dir(out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("out", f"{out} exists and is not an empty folder; choose another --out (nothing is overwritten)")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _measure(runs: list[Run], specs: dict, job_kw: dict, args, out: Path) -> list[Path]:
    """Run the grid in one session (after one untraced warm-up job per mode); the trace path of each run."""
    from .run import Job, Session

    paths = []
    with Session(specs["target"], specs["draft"], pin=not args.no_pin) as session, \
            _Progress(len(runs), args.no_progress) as progress:
        for mode in ("ar", "ssd"):  # warm-up: first forwards, allocator, kernels; not traced
            session.run(Job(Plan(mode=mode, num_speculative_tokens=2, fan_out=(1, 1, 1)),
                            job_kw["prompts"][:1], 4, draft_timeout_s=600.0))
        for i, run in enumerate(runs, start=1):
            path = out / f"{run.name}.jsonl"
            n = len(job_kw["prompts"]) if run.all_prompts else FEW
            prompts = job_kw["prompts"][:n]
            header = {"prompt_source": f"calibrate-here:{job_kw['base']}{slice_label(job_kw['index'][:n])}",
                      **tags_header(job_kw["tags"][:n])}
            progress.start(i, run.name, len(prompts) * args.max_new_tokens)
            t0 = time.monotonic()
            res = session.run(Job(run.plan, prompts, args.max_new_tokens, draft_timeout_s=600.0,
                                  trace_path=str(path), header=header, log_topn=DEFAULT_LOG_TOPN), progress.advance)
            if res.faults:
                raise SystemExit(f"{PROG}: error: the draft failed during {run.name} ({res.faults[0]}); its trace "
                                 f"{path} fell back to AR, so nothing was calibrated; rerun")
            progress.done(f"{run.name}: {res.summary.tok_s:.2f} tok/s, mean acceptance length "
                          f"{res.summary.mean_accept_len:.2f} ({time.monotonic() - t0:.0f} s)")
            paths.append(path)
    return paths


def _probe(specs: dict, job_kw: dict, args, out: Path) -> Path:
    """Time every shape the planner asks about at the workload's context (median prompt + half the output), at
    the first temperature; writes out/probe.json."""
    from statistics import median

    from .probe import run_probe
    from .probe_cli import grid_from_args, print_summary

    context = int(median(len(p) for p in job_kw["prompts"])) + args.max_new_tokens // 2
    grid = grid_from_args(args, context, args.temperatures[0])
    res = run_probe(specs["target"], specs["draft"], grid, pin=not args.no_pin, say=lambda m: print(f"  {m}"))
    path = out / "probe.json"
    save_json_atomic(path, json.dumps(res.to_dict(), indent=1))
    print_summary(res)
    return path


def _default_name(host: Host) -> str:
    """calibrated-here-<cpu words>-<widest ISA>, e.g. calibrated-here-amd-epyc-avx-512."""
    cpu = "-".join(host.cpu.lower().replace("(r)", "").replace("(tm)", "").split()[:3]) or "host"
    return f"calibrated-here-{cpu}" + (f"-{isa_summary(host.isa).lower()}" if host.isa else "")


def _write_manifest(out: Path, runs: list[Run], paths: list[Path], argv: list[str], host: Host, probed: bool) -> None:
    """manifest.json in the traces/ schema (ssd-traces-manifest/1), so the folder can be shipped as it is."""
    from ssd_sim.io.trace import read_trace

    head = read_trace(paths[-1]).header
    made_by = shlex.join(["ssd-run", "calibrate-here", *argv])
    files = {p.name: {"kind": "trace", "mode": r.plan.mode, "made_by": made_by,
                      "role": "calibrates profile.json: latencies" + (", acceptance and hit curves" if r.all_prompts else "")}
             for r, p in zip(runs, paths, strict=True)}
    if probed:
        files["probe.json"] = {"kind": "probe", "made_by": made_by,
                               "role": "calibrates profile.json: latency tables, slowdowns, transfer"}
    files["profile.json"] = {"kind": "profile", "made_by": made_by, "role": "fitted to every trace here"
                             + (" and the probe" if probed else "")}
    files["plan.json"] = {"kind": "plan", "made_by": made_by, "role": "ssd-plan --profile profile.json"}
    manifest = {"schema": "ssd-traces-manifest/1",
                "setup": {"machine": head.machine, "target": head.models["target"],
                          "draft": head.models["draft"], "quantize": head.quantize,
                          "versions": head.versions, "host": host.label()},
                "files": files}
    save_json_atomic(out / "manifest.json", json.dumps(manifest, indent=2))


class _Progress:
    """Run i of n and the tokens committed in it: a rich bar on a terminal, one line per run otherwise."""

    def __init__(self, runs: int, disabled: bool):
        self.runs = runs
        self.bar = None if disabled or not sys.stderr.isatty() else self._bar()

    @staticmethod
    def _bar():
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tokens"),
                        TimeElapsedColumn())

    def __enter__(self):
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()

    def start(self, i: int, name: str, tokens: int) -> None:
        if self.bar is not None:
            self.task = self.bar.add_task(f"run {i}/{self.runs} {name}", total=tokens)

    def advance(self, n: int) -> None:
        if self.bar is not None:
            self.bar.advance(self.task, n)

    def done(self, line: str) -> None:
        if self.bar is not None:
            self.bar.console.print(f"  {line}")
        else:
            print(f"  {line}", flush=True)
