"""Benchmark: vectorised closed-form evaluations per second, and the wall time of `ssd-plan` per preset.

    .venv/bin/python bench/analytic_speed.py [--repeats 5]

Goals (issue 2): >= 1e6 model evaluations per second over a 1e6-configuration grid; ssd-plan < 2 s.
Prints one table; medians over repeats.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ssd_sim.model.presets import list_presets
from ssd_sim.theory.analytic import expected_tokens, sd_speedup, ssd_speedup


def grid(n: int = 1_000_000, seed: int = 0) -> dict[str, np.ndarray]:
    """n random configurations: acceptance, K, draft cost, hit rate, backup cost, batch size."""
    rng = np.random.default_rng(seed)
    return {
        "a": rng.uniform(0.3, 0.99, n), "K": rng.integers(1, 12, n).astype(float),
        "t_d": rng.uniform(0.01, 0.2, n), "p": rng.uniform(0.3, 0.99, n),
        "t_b": rng.uniform(0.0, 1.0, n), "b": rng.integers(1, 33, n).astype(float),
    }


def evaluate(g: dict[str, np.ndarray]) -> np.ndarray:
    """SD and SSD speedups of every configuration (the SSD primary cost is K+1 draft forwards)."""
    e = expected_tokens(g["a"], g["K"])
    sd = sd_speedup(g["a"], g["K"], g["K"] * g["t_d"])
    ssd = ssd_speedup(g["p"], e, e, (g["K"] + 1) * g["t_d"], g["K"] * g["t_d"] + g["t_b"], g["b"])
    return np.maximum(sd, ssd)


def time_it(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    g = grid()
    n = len(g["a"])
    evaluate(g)  # warm up
    sec = time_it(lambda: evaluate(g), args.repeats)
    rows = [("closed forms, 1e6-config grid", f"{sec * 1e3:.1f} ms", f"{n / sec / 1e6:.1f} M evals/s", ">= 1 M/s")]
    plan = Path(sys.executable).with_name("ssd-plan")
    for preset in list_presets():
        for extra in ([], ["-t", "1", "-b", "8"]):
            cmd = [str(plan), "--preset", preset, "--json", *extra]
            wall = time_it(lambda c=cmd: subprocess.run(c, check=True, capture_output=True), args.repeats)
            rows.append((f"ssd-plan {preset} {' '.join(extra)}".strip(), f"{wall * 1e3:.0f} ms", "", "< 2000 ms"))
    w = max(len(r[0]) for r in rows)
    print(f"{'benchmark':<{w}}  {'median':>10}  {'rate':>16}  goal")
    for name, med, rate, goal in rows:
        print(f"{name:<{w}}  {med:>10}  {rate:>16}  {goal}")


if __name__ == "__main__":
    main()
