"""Run-to-run drift of the hosts the shipped traces come from: one table, the number model.drift.SHIPPED_DRIFT cites.

    .venv/bin/python bench/drift.py [FOLDER ...]      # default: every folder under traces/ but superseded/

Repeat runs are traces of one setup (model.drift.setup_key: mode, plan, prompts, tokens, seed, models, dtypes, batch,
host); per group the median verify ms of each run, the minutes between the first and the last, and the group's SD
of ln ms; then the pooled SD over every group with its 90% interval (chi-square on runs - groups degrees of freedom).
"""

from __future__ import annotations

import argparse
import datetime
import glob
import math
import statistics

from rich.console import Console
from rich.table import Table
from scipy.stats import chi2
from scipy.stats import f as f_dist

from ssd_sim.io.trace import read_trace
from ssd_sim.model.drift import median_verify_ms, pooled_log_sd, repeat_groups


def _minutes(group) -> float:
    stamps = [datetime.datetime.fromisoformat(str(t.header.started_at).replace("Z", "+00:00")) for t in group]
    return (max(stamps) - min(stamps)).total_seconds() / 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", help="trace folders (default: traces/* but superseded)")
    folders = ap.parse_args().folders or [f for f in sorted(glob.glob("traces/*/")) if "superseded" not in f]
    traces = [read_trace(p) for f in folders for p in sorted(glob.glob(f"{f.rstrip('/')}/*.jsonl"))]
    groups = repeat_groups(traces)
    table = Table(title=f"repeat runs in {len(folders)} folders ({len(traces)} traces)")
    for col in ("mode", "runs", "minutes apart", "verify ms (median per run)", "SD of ln"):
        table.add_column(col, justify="right")
    ms = []
    for g in groups:
        ms.append([median_verify_ms(t) for t in g])
        logs = [math.log(x) for x in ms[-1]]
        table.add_row(g[0].mode, str(len(g)), f"{_minutes(g):.1f}", ", ".join(f"{x:.0f}" for x in ms[-1]),
                      f"{statistics.pstdev(logs):.3f}")
    Console(width=120).print(table)
    if not ms:
        print("no setup was run twice")
        return
    dof = sum(map(len, ms)) - len(ms)
    sd = pooled_log_sd(ms)
    lo, hi = sd * math.sqrt(dof / chi2.ppf(0.95, dof)), sd * math.sqrt(dof / chi2.ppf(0.05, dof))
    print(f"pooled drift SD {sd:.1%} over {len(ms)} setups, {dof} degrees of freedom; 90% interval {lo:.1%}-{hi:.1%}")
    print_by_process_count(groups, ms)


def print_by_process_count(groups, ms) -> None:
    """AR (one process) against SD / SSD (two) apart, and the F-test of their variances: whether one drift per kind
    of run would be measured rather than noise."""
    parts = {"AR": [m for g, m in zip(groups, ms, strict=True) if g[0].mode == "ar"],
             "SD / SSD": [m for g, m in zip(groups, ms, strict=True) if g[0].mode != "ar"]}
    sds = {}
    for name, part in parts.items():
        dof = sum(map(len, part)) - len(part)
        if dof < 1:
            print(f"{name}: no repeats")
            return
        sds[name] = (pooled_log_sd(part), dof)
        print(f"{name}: drift SD {sds[name][0]:.1%} over {len(part)} setups, {dof} degrees of freedom")
    (a, da), (b, db) = sds["SD / SSD"], sds["AR"]
    p = 2 * min(f_dist.sf((a / b) ** 2, da, db), f_dist.cdf((a / b) ** 2, da, db))
    print(f"F-test, SD / SSD against AR: ratio of variances {(a / b) ** 2:.2f}, two-sided p = {p:.2f}"
          + (" (not distinguishable: one pooled drift)" if p > 0.05 else ""))


if __name__ == "__main__":
    main()
