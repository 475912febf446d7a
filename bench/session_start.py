"""How long a Session takes to start its two workers, by start method (fork server vs spawn).

    python bench/session_start.py [--repeats 3] [--family llama]

Each method runs in its own fresh controller process (a fork server lives as long as its controller), which
starts `repeats` Sessions one after another on the tiny pair of a family, runs one short SSD job in each and
closes it. The first Session of a controller pays the fork server's own imports (torch, transformers); the later
ones are what a test suite, a benchmark or calibrate-here pays per Session. Methods alternate run by run. Prints
one table: the median of each Session index over the rounds, in seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
from ssd_runtime.run import Job, Session
from ssd_runtime.specs import tiny_pair
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import spec

def main():
    target, draft = tiny_pair(sys.argv[1])
    times = []
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        with Session(spec(target), spec(draft)) as s:
            t1 = time.perf_counter()
            s.run(Job(Plan(num_speculative_tokens=2, fan_out=(1, 1, 1)), [[1, 2, 3]], 8))
        times.append((t1 - t0, time.perf_counter() - t0))
    print(json.dumps(times))

if __name__ == "__main__":
    main()
"""


def one_controller(method: str, family: str, repeats: int) -> list[tuple[float, float]]:
    """[(start s, start + job + close s)] of `repeats` Sessions in one fresh controller using `method`."""
    env = {**os.environ, "SSD_START_METHOD": method, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", CHILD, family, str(repeats)], env=env, capture_output=True,
                         text=True, check=True, timeout=1800).stdout
    return [tuple(x) for x in json.loads(out.splitlines()[-1])]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="Sessions per controller (default 3)")
    ap.add_argument("--rounds", type=int, default=2, help="controllers per method, alternating (default 2)")
    ap.add_argument("--family", default="llama", help="tiny pair of this family (default llama)")
    args = ap.parse_args(argv)
    methods = ("spawn", "forkserver")
    runs: dict[str, list[list[tuple[float, float]]]] = {m: [] for m in methods}
    for r in range(args.rounds):
        for m in (methods if r % 2 == 0 else methods[::-1]):
            runs[m].append(one_controller(m, args.family, args.repeats))
    print(f"Session start (s), tiny {args.family} pair, median over {args.rounds} controllers per method")
    print(f"{'session':>8} | " + " | ".join(f"{m:>10} start" for m in methods) + " | forkserver / spawn")
    for i in range(args.repeats):
        med = {m: statistics.median(run[i][0] for run in runs[m]) for m in methods}
        print(f"{i + 1:>8} | " + " | ".join(f"{med[m]:>16.2f}" for m in methods)
              + f" | {med['forkserver'] / med['spawn']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
