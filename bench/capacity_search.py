"""Capacity search over the shipped presets (ssd_sim.sim.capacity): one table, not a timed test.

For each preset: a Poisson load of --requests requests x --tokens output tokens whose rate would put one AR replica
at batch cap 16 at twice its analytic capacity (so the answer needs several replicas or a faster mode), a TPOT target
of 1.5x a lone AR request's TPOT (the analytic one at b = 1) at p90 and a TTFT target of 20 prefills at p90. These
targets are derived from each preset's own numbers, not chosen to make any mode win. Prints the cheapest
configuration, its margins, SD / AR on the same GPUs, how many configurations were simulated and the wall time.
Goal (issue 28): each preset's search under 60 s for 10,000 requests.

    .venv/bin/python bench/capacity_search.py [--requests N] [--tokens N] [--jobs N] [--preset NAME ...]
"""

from __future__ import annotations

import argparse
import os
import time
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.table import Table

from ssd_sim.model.presets import get_preset, list_presets
from ssd_sim.sim.capacity import Capacity, Load, Targets, example, same_gpus, search
from ssd_sim.sim.workload import poisson


def load_and_targets(profile, requests: int, tokens: int) -> tuple[Load, Targets]:
    """The load and targets of the module docstring (ssd_sim.sim.capacity.example)."""
    rate, targets = example(profile, tokens)
    return Load.of(poisson(rate=rate, num_requests=requests, max_batch=16, output_tokens=tokens), seed=0), targets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    ap.add_argument("--preset", action="append", help="only these presets (repeatable)")
    args = ap.parse_args()
    table = Table(title=f"capacity search, {args.requests} Poisson requests x {args.tokens} tokens, {args.jobs} "
                        "processes", title_justify="left")
    for col in ("preset", "TTFT / TPOT p90 targets (ms)", "cheapest", "GPUs", "margins", "same GPUs", "simulated",
                "wall s"):
        table.add_column(col)
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for name in args.preset or list_presets():
            profile = get_preset(name)
            load, targets = load_and_targets(profile, args.requests, args.tokens)
            t0 = time.perf_counter()
            cap = Capacity(profile, load, targets, mapper=pool.map if args.jobs > 1 else map)
            res = search(cap)
            b = res.best
            others = []
            if b is not None:
                for mode in ("ar", "sd", "ssd"):
                    if mode != b.config.mode:
                        o = same_gpus(cap, b.gpus, mode, b.config.max_batch)
                        others.append(f"{mode}: " + ("no replica fits" if o is None else
                                                     "meets" if o.meets else "misses"))
            wall = time.perf_counter() - t0
            c = b.config if b else None
            table.add_row(name, f"{targets.ttft_ms:.0f} / {targets.tpot_ms:.2f}",
                          f"{c.mode} {c.replicas} x b<={c.max_batch} {c.backup}" if c else "none",
                          str(b.gpus) if b else "-",
                          ", ".join(f"{k} {v:+.0%}" for k, v in b.margins.items()) if b else "-",
                          "; ".join(others), str(len(res.outcomes)), f"{wall:.1f}")
    Console(width=200).print(table)


if __name__ == "__main__":
    main()
