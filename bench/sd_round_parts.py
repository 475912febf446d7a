"""SD's round, phase by phase, against what its calibration prices it at: where a per-round error of SD comes from.

    .venv/bin/python bench/sd_round_parts.py [FOLDER ...]   # default: the three fresh96 grids (traces/cpu-fp32-*fresh96)

Each folder is calibrated on all of its own traces (as `ssd-plan calibrate` would: an in-sample check, no hold-out).
Per SD run at b = 1, the measured mean ms of the draft's K steps (phase draft_sd)
  after an all-accepted round   the first step feeds 2 tokens: the K-th draft token and the bonus;
  after a rejection             it feeds 1, the bonus;
  in a request's first round    after its prefill, 1 token,
and of the verify, each beside the latency the calibration prices it at (model.latency.LatencyModel: sd_draft_ms at
P(all accepted) = 1 and 0 without SD's round trip, which the runtime times outside draft_sd; sd_verify_ms). The last
column is what the simulator saves by pricing a request's first round at its 1-token first step
(sim.round_latency.RoundLatency.sd_phases) instead of the expectation over a last round it never had, which it charged
before: first-round share x P(all accepted) x (priced 2-token first step - 1-token), in % of the measured mean round.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ssd_sim.io.records import Phase
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.calibrate import calibrate_traces
from ssd_sim.model.latency import LatencyModel

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("cpu-fp32-epyc-fresh96", "cpu-fp32-xeon-fresh96", "cpu-fp32-zen4-fresh96")


def measured_parts(trace: Trace) -> dict[str, float]:
    """An SD run's (b = 1) mean draft_sd ms after an all-accepted round, after a rejection and in a request's first
    round, its mean verify and round ms, P(all accepted) over the rounds that follow another and the first rounds'
    share. ValueError for another mode or batch size."""
    if trace.mode != "sd" or trace.header.batch_size != 1:
        raise ValueError(f"an SD run at b = 1 is needed, got {trace.mode} at b = {trace.header.batch_size}")
    draft: dict[str, list[float]] = {"after_all": [], "after_rejection": [], "first": []}
    last: dict[int, bool] = {}  # seq -> its last round accepted all K
    for r in trace.rounds:
        s = r.seqs[0]
        kind = "first" if s.first or s.seq not in last else "after_all" if last[s.seq] else "after_rejection"
        draft[kind].append(r.timings_ms[Phase.DRAFT_SD])
        last[s.seq] = s.accepted == r.K
    following = len(draft["after_all"]) + len(draft["after_rejection"])
    return {**{k: statistics.fmean(v) if v else float("nan") for k, v in draft.items()},
            "verify": statistics.fmean(r.timings_ms[Phase.VERIFY] for r in trace.rounds),
            "round": statistics.fmean(r.timings_ms[Phase.ROUND] for r in trace.rounds),
            "p_all": len(draft["after_all"]) / following if following else 0.0,
            "first_share": len(draft["first"]) / len(trace.rounds)}


def priced_parts(lat: LatencyModel, K: int, p_all: float) -> dict[str, float]:
    """The draft_sd ms the latency model prices after an all-accepted round and after a rejection (the request's
    first round as the latter), and the verify at P(all accepted) = p_all (ms; b = 1)."""
    trip = lat.sd_round_trip_ms if lat.sd_transfer else 0.0
    return {"after_all": float(lat.sd_draft_ms(1, K, 1.0)) - trip,
            "after_rejection": float(lat.sd_draft_ms(1, K, 0.0)) - trip,
            "verify": float(lat.sd_verify_ms(1, K, p_all))}


def first_round_saving_pct(measured: dict[str, float], priced: dict[str, float]) -> float:
    """What pricing every first round at its 1-token first step, not the expectation over the last round's outcomes,
    takes off the mean round (% of the measured mean round)."""
    second = priced["after_all"] - priced["after_rejection"]
    return 100.0 * measured["first_share"] * measured["p_all"] * second / measured["round"]


def pct(priced: float, measured: float) -> str:
    return f"{100.0 * (priced / measured - 1.0):+.1f}%"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", help="trace folders (default: the three fresh96 grids)")
    folders = [Path(f) for f in ap.parse_args(argv).folders] or [ROOT / "traces" / f for f in FOLDERS]
    table = Table(title="SD's draft steps and verify: measured mean ms, and the calibration's price against it")
    for col in ("run", "P(all acc.)", "first rounds", "after all acc.", "after a rejection", "first round", "verify",
                "first rounds' saving"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for folder in folders:
        paths = sorted(folder.glob("*.jsonl"))
        traces = [read_trace(p) for p in paths]
        profile, _ = calibrate_traces(traces, paths, name=f"parts-{folder.name}")
        for path, t in zip(paths, traces, strict=True):
            if t.mode != "sd" or t.header.batch_size != 1:
                continue
            m = measured_parts(t)
            p = priced_parts(profile.latency, t.rounds[0].K, m["p_all"])
            table.add_row(f"{folder.name}/{path.name}", f"{m['p_all']:.2f}", f"{m['first_share']:.0%}",
                          f"{m['after_all']:.0f} ({pct(p['after_all'], m['after_all'])})",
                          f"{m['after_rejection']:.0f} ({pct(p['after_rejection'], m['after_rejection'])})",
                          f"{m['first']:.0f} ({pct(p['after_rejection'], m['first'])})",
                          f"{m['verify']:.0f} ({pct(p['verify'], m['verify'])})",
                          f"-{first_round_saving_pct(m, p):.1f}%")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
