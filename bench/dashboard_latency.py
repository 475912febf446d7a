"""Server-side latency of every dashboard view: one table, ms per script run (AppTest). Target: < 300 ms cold.

    .venv/bin/python bench/dashboard_latency.py              # 3 passes, each scenario in a fresh process
    .venv/bin/python bench/dashboard_latency.py --passes 1   # quicker, noisier

Each row changes one widget on a page (or clicks a button) and times the rerun the browser waits for: the whole
script, sidebar, scenario, every chart built and serialised (browser-side Plotly drawing is not included).
"cold" = a value not seen before in that server process (nothing cached for it: st.cache_data, the DP tables and
Saguaro fits ssd_sim keeps); "warm" = the same rerun again (median of 3). Every pass runs each scenario in a fresh
Python process, so every cache starts empty; the table shows the median and the worst cold time over the passes.
Every row is governed by the 300 ms target: a row whose median cold time is over it is marked OVER (and the exit
status is 1).
Starting the server (Python's imports of streamlit, plotly, scipy, ssd_sim and app, and Streamlit's own first
script run, a one-line script: once per server process) is timed apart and printed above the table; it is not a
view. The first view is the dashboard's first run after it (presets, profiles under traces/, make_plan, charts).

Scenarios: "tour" walks the What-if knobs, optimise, simulate, the Plan, Timeline and Pareto pages and the Traces
page (real traces under traces/); "pareto first" opens the Pareto page at T = 1 in a fresh server (no DP tables
from an earlier optimise).

How the views that used to miss the target got fast (every number the dashboard shows is unchanged, bit for bit:
no search grid, draw count or tolerance was reduced):
- a new Saguaro C at T > 0 (heatmap: ten synthetic Saguaro fits): the fitted noise scale of a measured point is
  kept apart from the C it is moved to (one solve per point, not per (point, C)), the synthetic draft and its
  Saguaro-rescaled rows are computed once per (T, C), C = 1 uses one row for every fan-out, and only sums touch the
  whole vocabulary (~20 -> ~3 ms per fit);
- optimise (make_plan) and Pareto: the planner builds fan-out lists only for the plans it returns (it used to
  backtrack every budget of every (K, C, backup)), keeps the DP tables by content (a jit backup's miss case is its
  hit case; sweeps over batch sizes and reruns reuse them), the optimise button and the Pareto page ask for the best
  plan only (top_n = 1: the runner-ups never change it), Pareto skips b* (it shows none) and caches one plan per
  batch size, and AcceptanceModel keeps the points it resolves (the per-position C search asks for the same ones);
- every What-if view: a calibrated profile's JSON cache key is built once per profile object (20 ms each for a
  100 KB profile), calibrated profiles and traces are parsed once per file version (files without the profile
  schema are skipped unread by the JSON parser), the uncertainty report's SD and SSD predictions of one drawn
  profile share its acceptance point, and its per-source spreads no longer compute an AR rate they never read;
- "calibrate from this trace" (new): the latency fit evaluates each distinct forward shape once per step instead
  of every timed phase (~700 -> ~25 ms; the fitted numbers are the same).
- the uncertainty report's drawn profiles are copied without re-running their checks (model.derived) and a forward
  of plain numbers skips numpy: the report 150 -> 118 ms, cold What-if rows 17% faster in the median (interleaved
  runs before and after on the Zen 4 guest, late on 2026-12-06, when it ran slower: 25-28 -> 22-26 rows over).
The largest remaining cost of a cold What-if view is the uncertainty report: 200 drawn profiles of AR, SD and SSD
and 6 x 50 of SD and SSD naming the dominant source (~120 ms since; ~250 ms of the view on the Zen 4 guest earlier
on 2026-12-06, where 13-14 of 39 rows missed the target cold; ~65 ms when it drew 500 profiles of one mode).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "app" / "dashboard.py"
TARGET_MS = 300.0
IMPORTS = ("numpy", "pandas", "scipy.optimize", "plotly.graph_objects", "plotly.subplots", "streamlit",
           "ssd_sim.plan.planner", "ssd_sim.plan.whatif", "ssd_sim.plan.intervals", "ssd_sim.plan.compare",
           "ssd_sim.model.presets", "ssd_sim.model.calibrate", "ssd_sim.sim.des", "app.state", "app.compute",
           "app.charts", "app.sim", "ssd_sim.model.tracematch", "app.planfile")
SSD_TRACE = "cpu-fp32-grid/ssd-k2-f112-b1-t1.jsonl"  # a calibrated profile ships beside it
AR_TRACE = "cpu-fp32-bench/ar-b1.jsonl"


def slider(key: str, value):
    return lambda at: at.slider(key=key).set_value(value)


def click(key: str):
    return lambda at: at.button(key=key).click()


def nothing(at) -> None:
    return None


def tour():
    """(page, description, action) in the order they run; the scenario accumulates."""
    yield "views/whatif.py", "rerun, nothing changed", nothing
    for v in (2, 4, 8, 16):
        yield "views/whatif.py", f"batch size -> {v}", slider("wi_b", v)
    for v in (3, 6, 8):
        yield "views/whatif.py", f"K -> {v}", slider("wi_K", v)
    for v in (12, 30, 60):
        yield "views/whatif.py", f"cache budget -> {v}", slider("wi_B", v)
    for v in (0.5, 1.0):
        yield "views/whatif.py", f"temperature -> {v}", slider("wi_T", v)
    for v in (0.7, 0.4):
        yield "views/whatif.py", f"saguaro_c -> {v} (T = 1)", slider("wi_C", v)
    for v in (0.65, 0.8):
        yield "views/whatif.py", f"acceptance override -> {v} (T = 1)", slider("wi_acceptance", v)
    for v in (0.05, 0.3):
        yield "views/whatif.py", f"latency ratio override -> {v}", slider("wi_draft_latency_ratio", v)
    yield "views/whatif.py", "backup -> fast", lambda at: at.radio(key="wi_backup").set_value("fast")
    yield "views/whatif.py", "uniform fan-out on", lambda at: at.toggle(key="wi_uniform").set_value(True)
    yield "views/whatif.py", "optimise (make_plan, T = 1, b = 16)", click("btn_optimise")
    yield "views/whatif.py", "simulate (3 DES runs)", click("btn_simulate")
    yield "views/plan.py", "open Plan", nothing
    yield "views/timeline.py", "open Timeline (DES, 30 rounds)", nothing
    yield "views/pareto.py", "open Pareto (T = 1, 7 batch sizes)", nothing
    yield "views/pareto.py", "Pareto: x axis -> total tok/s", lambda at: at.radio(key="pa_x").set_value("total_tok_s")
    yield "views/traces.py", "open Traces", nothing
    yield "views/traces.py", "SSD trace (own profile beside it)", lambda at: at.selectbox(key="tr_file").set_value(SSD_TRACE)
    yield "views/traces.py", "compare with the sidebar's profile", lambda at: at.radio(key="tr_profile").set_value("sidebar")
    yield "views/traces.py", "calibrate from this trace", click("btn_tr_calibrate")
    yield "views/traces.py", "rolling window -> 5", slider("tr_window", 5)
    yield "views/traces.py", "AR trace (own profile)", lambda at: at.selectbox(key="tr_file").set_value(AR_TRACE)


def pareto_first():
    yield "views/whatif.py", "temperature -> 1.0", slider("wi_T", 1.0)
    yield "views/pareto.py", "open Pareto first (T = 1, 7 batch sizes)", nothing
    yield "views/pareto.py", "Pareto: batch sizes -> 1, 4, 16", lambda at: at.multiselect(key="pa_batches").set_value([1, 4, 16])
    yield "views/pareto.py", "Pareto: back to 7 batch sizes", lambda at: at.multiselect(key="pa_batches").set_value(
        [1, 2, 4, 8, 16, 32, 64])


SCENARIOS = {"tour": tour, "pareto first": pareto_first}


def timed(at, action) -> float:
    t = time.perf_counter()
    action(at)
    at.run()
    ms = (time.perf_counter() - t) * 1e3
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return ms


def run_scenario(name: str) -> dict:
    """One pass of a scenario in this (fresh) process: {"start_ms", "rows": [[page, action, cold, warm]]}."""
    import importlib
    import os

    os.environ.setdefault("SSD_TRACES_DIR", str(ROOT / "traces"))
    sys.path.insert(0, str(ROOT))
    t = time.perf_counter()
    for mod in IMPORTS:
        importlib.import_module(mod)
    from streamlit.testing.v1 import AppTest

    # Streamlit's own first script run in a process (its once-per-process checks, e.g. whether it runs in a REPL:
    # ~0.1 s of inspect.stack), on a one-line script: part of starting the server, not of any view.
    AppTest.from_string("import streamlit as st\nst.sidebar.header('start')").run()
    start_ms = (time.perf_counter() - t) * 1e3
    at = AppTest.from_file(str(DASHBOARD), default_timeout=120)
    rows = [["views/whatif.py", "first view (What-if: presets, make_plan)", timed(at, nothing), None]]
    page = "views/whatif.py"
    for p, desc, action in SCENARIOS[name]():
        if p != page:
            at.switch_page(p)
            page = p
        cold = timed(at, action)
        warm = statistics.median(timed(at, nothing) for _ in range(3))
        rows.append([p, desc, cold, warm])
    return {"start_ms": start_ms, "rows": rows}


def run_passes(passes: int) -> dict[str, list[dict]]:
    """Every scenario `passes` times, each in a fresh process (every cache empty)."""
    out: dict[str, list[dict]] = {name: [] for name in SCENARIOS}
    for _ in range(passes):
        for name in SCENARIOS:
            proc = subprocess.run([sys.executable, __file__, "--scenario", name], capture_output=True, text=True,
                                  cwd=ROOT, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"scenario {name!r} failed:\n{proc.stderr[-2000:]}")
            out[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return out


def table(results: dict[str, list[dict]]) -> int:
    """Print the table; the number of rows over the target."""
    start = [p["start_ms"] for runs in results.values() for p in runs]
    print(f"server start: {statistics.median(start):.0f} ms (Python imports and Streamlit's first script run; median "
          f"of {len(start)} fresh processes; once per server process, not a view)\n")
    print(f"{'page':9} {'action':44} {'cold ms':>8} {'worst':>6} {'warm ms':>8}  target {TARGET_MS:.0f} ms")
    over = 0
    for name, runs in results.items():
        print(f"-- {name} ({len(runs)} passes)")
        for i, (page, desc, _, _) in enumerate(runs[0]["rows"]):
            colds = [r["rows"][i][2] for r in runs]
            warms = [r["rows"][i][3] for r in runs if r["rows"][i][3] is not None]
            cold = statistics.median(colds)
            flag = "OVER" if cold > TARGET_MS else "ok"
            over += flag == "OVER"
            warm = f"{statistics.median(warms):8.0f}" if warms else f"{'':8}"
            print(f"{Path(page).stem:9} {desc:44} {cold:8.0f} {max(colds):6.0f} {warm}  {flag}")
    print(f"\n{over} row(s) over {TARGET_MS:.0f} ms (median cold)")
    return over


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passes", type=int, default=3, help="fresh-process passes per scenario (median shown)")
    ap.add_argument("--scenario", choices=list(SCENARIOS), help=argparse.SUPPRESS)  # one pass, JSON (internal)
    args = ap.parse_args(argv)
    if args.scenario:
        print(json.dumps(run_scenario(args.scenario)))
        return 0
    return 1 if table(run_passes(max(args.passes, 1))) else 0


if __name__ == "__main__":
    raise SystemExit(main())
