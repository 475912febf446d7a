"""Speed of the discrete-event simulator (ssd_sim.sim.des): one table, not a timed test.

Rows: simulated rounds per second of AR, SD and SSD at b = 1 and b = 16 (median of --repeats runs;
a round is one target verification of the whole batch), and the wall time of 1,000 sequences x 512
tokens arriving as a Poisson stream with continuous batching up to 16 (SSD, adaptive backup).
Goals (issue 3): >= 50k rounds/s at b = 1; Poisson 1000 x 512 in < 5 s; (issue 28) 1,000,000 x 512 in < 60 s.
Each case runs the SimPy processes (before) and the direct loop (after, ssd_sim.sim.direct), interleaved.

    .venv/bin/python bench/des_speed.py [--preset NAME] [--repeats N] [--rounds N] [--big 1000000]
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table

from ssd_sim.model.presets import get_preset
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import fixed_batch, poisson

LOOPS = ("simpy", "direct")  # before: the SimPy processes; after: the same model as one loop (ssd_sim.sim.direct)


def rounds_per_s(profile, plan, mode: str, b: int, rounds: int, repeats: int) -> tuple[dict[str, float], int]:
    """Median simulated rounds per wall second of each loop over `repeats` interleaved runs of about `rounds`
    rounds."""
    tokens = int(rounds * 4.5)  # ~4 tokens per round per sequence in SSD/SD; AR does 1 (more rounds)
    if mode == "ar":
        tokens = rounds
    rates: dict[str, list[float]] = {loop: [] for loop in LOOPS}
    n = 0
    for seed in range(repeats):
        for loop in LOOPS:
            t0 = time.perf_counter()
            m = simulate(profile, plan, mode=mode, seed=seed, workload=fixed_batch(b, tokens, prompt_tokens=0),
                         loop=loop).metrics
            rates[loop].append(m.rounds / (time.perf_counter() - t0))
            n = m.rounds
    return {loop: statistics.median(v) for loop, v in rates.items()}, n


def poisson_wall_s(profile, plan, repeats: int, requests: int = 1000) -> tuple[dict[str, float], int]:
    """Median wall seconds of each loop on `requests` x 512-token Poisson requests, continuous batching up to 16."""
    times: dict[str, list[float]] = {loop: [] for loop in LOOPS}
    rounds = 0
    wl = poisson(rate=2.0, num_requests=requests, max_batch=16, output_tokens=512, prompt_tokens=128)
    for seed in range(repeats):
        for loop in LOOPS:
            t0 = time.perf_counter()
            m = simulate(profile, plan, mode="ssd", seed=seed, workload=wl, loop=loop).metrics
            times[loop].append(time.perf_counter() - t0)
            rounds = m.rounds
    return {loop: statistics.median(v) for loop, v in times.items()}, rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama70b-1b-h100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=50_000, help="rounds per timed run (approximate)")
    ap.add_argument("--big", type=int, default=0, metavar="N",
                    help="also time N Poisson requests x 512 tokens once per loop (issue 28: N = 1,000,000 < 60 s)")
    args = ap.parse_args()
    profile = get_preset(args.preset)
    table = Table(title=f"ssd_sim.sim.des speed on {args.preset} (median of {args.repeats} interleaved runs)",
                  title_justify="left")
    for col in ("case", "rounds per run", "simpy rounds/s", "direct rounds/s", "direct / simpy", "goal"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for b in (1, 16):
        plan = make_plan(profile, PlanRequest(batch_size=b)).plan
        for mode in ("ar", "sd", "ssd"):
            rate, n = rounds_per_s(profile, plan, mode, b, args.rounds, args.repeats)
            goal = ">= 50,000" if (b == 1 and mode == "ssd") else ""
            table.add_row(f"{mode}, fixed batch b = {b}", f"{n:,}", f"{rate['simpy']:,.0f}", f"{rate['direct']:,.0f}",
                          f"{rate['direct'] / rate['simpy']:.2f}x", goal)
    plan16 = make_plan(profile, PlanRequest(batch_size=16)).plan
    cases = [(1000, args.repeats, "< 5 s")] + ([(args.big, 1, "< 60 s" if args.big >= 10**6 else "")] if args.big else [])
    for requests, repeats, goal in cases:
        wall, n = poisson_wall_s(profile, plan16, repeats, requests)
        table.add_row(f"ssd, Poisson {requests:,} x 512 tokens, max batch 16 (requests/s)", f"{n:,}",
                      f"{requests / wall['simpy']:,.0f} ({wall['simpy']:.2f} s)",
                      f"{requests / wall['direct']:,.0f} ({wall['direct']:.2f} s)",
                      f"{wall['simpy'] / wall['direct']:.2f}x", goal)
    Console(width=160).print(table)


if __name__ == "__main__":
    main()
