"""Speed of the discrete-event simulator (ssd_sim.sim.des): two tables, not a timed test.

Table 1: simulated rounds per wall second of AR, SD and SSD at b = 1 and b = 16 (fixed batch, median of --repeats
runs; a round is one target verification of the whole batch). Table 2: simulated requests and rounds per wall second
of 1,000 (and with --big N, N) requests x 512 tokens arriving as a Poisson stream at 2 req/s with continuous batching
up to 16 (SSD, the planner's plan for b = 16: adaptive backup), with the median wall time.
Goals (issue 3): >= 50k rounds/s at b = 1; Poisson 1000 x 512 in < 5 s; (issue 28) 1,000,000 x 512 in < 60 s.
Each case runs every loop of --loops, interleaved: simpy (before: the SimPy processes), direct (the same model as
one loop, bit for bit; ssd_sim.sim.direct) and fast (after: vectorised over rounds, equal in distribution;
ssd_sim.sim.fast). A different seed per repeat; the loops see the same seeds.

    .venv/bin/python bench/des_speed.py [--preset NAME] [--repeats N] [--rounds N] [--big 1000000] [--loops simpy,fast]
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

LOOPS = ("simpy", "direct", "fast")  # before: the SimPy processes; after: ssd_sim.sim.direct and ssd_sim.sim.fast


def timed(profile, plan, mode: str, workload, loops, repeats: int) -> dict[str, tuple[float, int]]:
    """Per loop: (median wall seconds, rounds of the last run) of `repeats` interleaved runs (seed = repeat)."""
    walls: dict[str, list[float]] = {loop: [] for loop in loops}
    rounds: dict[str, int] = {}
    for seed in range(repeats):
        for loop in loops:
            t0 = time.perf_counter()
            m = simulate(profile, plan, mode=mode, seed=seed, workload=workload, loop=loop).metrics
            walls[loop].append(time.perf_counter() - t0)
            rounds[loop] = m.rounds
    return {loop: (statistics.median(walls[loop]), rounds[loop]) for loop in loops}


def rounds_table(profile, loops, rounds: int, repeats: int) -> Table:
    """Rounds per second of each loop on fixed batches of b = 1 and 16 (about `rounds` rounds a run)."""
    table = Table(title=f"fixed batch: simulated rounds per second (median of {repeats})", title_justify="left")
    for col in ("case", "rounds per run", *(f"{loop} rounds/s" for loop in loops), f"{loops[-1]} / {loops[0]}", "goal"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for b in (1, 16):
        plan = make_plan(profile, PlanRequest(batch_size=b)).plan
        for mode in ("ar", "sd", "ssd"):
            tokens = rounds if mode == "ar" else int(rounds * 4.5)  # ~4 tokens per round per sequence in SD / SSD
            res = timed(profile, plan, mode, fixed_batch(b, tokens, prompt_tokens=0), loops, repeats)
            rate = {loop: n / wall for loop, (wall, n) in res.items()}
            goal = ">= 50,000" if (b == 1 and mode == "ssd") else ""
            table.add_row(f"{mode}, b = {b}", f"{res[loops[-1]][1]:,}", *(f"{rate[lp]:,.0f}" for lp in loops),
                          f"{rate[loops[-1]] / rate[loops[0]]:.2f}x", goal)
    return table


def poisson_table(profile, loops, cases: list[tuple[int, int, str]]) -> Table:
    """Requests and rounds per second of each loop on Poisson arrivals at 2 req/s, 512 tokens, max batch 16."""
    table = Table(title="SSD, Poisson arrivals at 2 req/s x 512 tokens, continuous batching up to 16: "
                        "simulated requests/s, rounds/s (median wall time)", title_justify="left")
    for col in ("requests", "rounds", *(f"{loop}" for loop in loops), f"{loops[-1]} / {loops[0]}", "goal"):
        table.add_column(col, justify="right")
    plan = make_plan(profile, PlanRequest(batch_size=16)).plan
    for requests, repeats, goal in cases:
        wl = poisson(rate=2.0, num_requests=requests, max_batch=16, output_tokens=512, prompt_tokens=128)
        res = timed(profile, plan, "ssd", wl, loops, repeats)
        cells = [f"{requests / wall:,.0f} req/s, {n / wall:,.0f} rounds/s ({wall:.2f} s)" for wall, n in res.values()]
        table.add_row(f"{requests:,}", f"{res[loops[-1]][1]:,}", *cells,
                      f"{res[loops[0]][0] / res[loops[-1]][0]:.2f}x", goal)
    return table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama70b-1b-h100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=50_000, help="rounds per timed fixed-batch run (approximate)")
    ap.add_argument("--big", type=int, default=0, metavar="N",
                    help="also time N Poisson requests x 512 tokens once per loop (issue 28: N = 1,000,000 < 60 s)")
    ap.add_argument("--loops", default=",".join(LOOPS), help=f"comma-separated, first = before (default {LOOPS})")
    args = ap.parse_args()
    loops = tuple(args.loops.split(","))
    if not loops or any(lp not in LOOPS for lp in loops):
        ap.error(f"--loops: a comma-separated list of {', '.join(LOOPS)}")
    profile = get_preset(args.preset)
    console = Console(width=200)
    console.print(f"ssd_sim.sim.des speed on {args.preset}; loops: {', '.join(loops)} (first = before)")
    console.print(rounds_table(profile, loops, args.rounds, args.repeats))
    cases = [(1000, args.repeats, "< 5 s")]
    if args.big:
        cases.append((args.big, 1, "< 60 s" if args.big >= 10**6 else ""))
    console.print(poisson_table(profile, loops, cases))


if __name__ == "__main__":
    main()
