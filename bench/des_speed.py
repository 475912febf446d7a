"""Speed of the discrete-event simulator (ssd_sim.sim.des): one table, not a timed test.

Rows: simulated rounds per second of AR, SD and SSD at b = 1 and b = 16 (median of --repeats runs;
a round is one target verification of the whole batch), and the wall time of 1,000 sequences x 512
tokens arriving as a Poisson stream with continuous batching up to 16 (SSD, adaptive backup).
Goals (issue 3): >= 50k rounds/s at b = 1; Poisson 1000 x 512 in < 5 s.

    .venv/bin/python bench/des_speed.py [--preset NAME] [--repeats N] [--rounds N]
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


def rounds_per_s(profile, plan, mode: str, b: int, rounds: int, repeats: int) -> tuple[float, int]:
    """Median simulated rounds per wall second over `repeats` runs of about `rounds` rounds."""
    tokens = int(rounds * 4.5)  # ~4 tokens per round per sequence in SSD/SD; AR does 1 (more rounds)
    if mode == "ar":
        tokens = rounds
    rates, n = [], 0
    for seed in range(repeats):
        t0 = time.perf_counter()
        m = simulate(profile, plan, mode=mode, seed=seed, workload=fixed_batch(b, tokens, prompt_tokens=0)).metrics
        rates.append(m.rounds / (time.perf_counter() - t0))
        n = m.rounds
    return statistics.median(rates), n


def poisson_wall_s(profile, plan, repeats: int) -> tuple[float, int]:
    """Median wall seconds of 1,000 x 512-token requests, Poisson arrivals, continuous batching up to 16."""
    times, rounds = [], 0
    wl = poisson(rate=2.0, num_requests=1000, max_batch=16, output_tokens=512, prompt_tokens=128)
    for seed in range(repeats):
        t0 = time.perf_counter()
        m = simulate(profile, plan, mode="ssd", seed=seed, workload=wl).metrics
        times.append(time.perf_counter() - t0)
        rounds = m.rounds
    return statistics.median(times), rounds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama70b-1b-h100")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=50_000, help="rounds per timed run (approximate)")
    args = ap.parse_args()
    profile = get_preset(args.preset)
    table = Table(title=f"ssd_sim.sim.des speed on {args.preset} (median of {args.repeats} runs)", title_justify="left")
    for col in ("case", "rounds per run", "rounds/s", "goal"):
        table.add_column(col, justify="left" if col == "case" else "right")
    for b in (1, 16):
        plan = make_plan(profile, PlanRequest(batch_size=b)).plan
        for mode in ("ar", "sd", "ssd"):
            rate, n = rounds_per_s(profile, plan, mode, b, args.rounds, args.repeats)
            goal = ">= 50,000" if (b == 1 and mode == "ssd") else ""
            table.add_row(f"{mode}, fixed batch b = {b}", f"{n:,}", f"{rate:,.0f}", goal)
    plan16 = make_plan(profile, PlanRequest(batch_size=16)).plan
    wall, n = poisson_wall_s(profile, plan16, args.repeats)
    table.add_row("ssd, Poisson 1,000 x 512 tokens, max batch 16", f"{n:,}", f"{n / wall:,.0f} ({wall:.2f} s)",
                  "< 5 s")
    Console().print(table)


if __name__ == "__main__":
    main()
