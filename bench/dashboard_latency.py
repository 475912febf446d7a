"""Server-side latency of the dashboard's analytic views: one table, ms per script run (AppTest).

    .venv/bin/python bench/dashboard_latency.py

Each row changes one widget on a page and times the rerun the browser would wait for (the whole
script: sidebar, scenario, every chart built and serialised). "cold" = a value not seen before (the
st.cache_data caches miss); "warm" = the same rerun again. The target is < 300 ms for the analytic
What-if views; the simulator (Timeline, the simulate button) and Pareto at T > 0 (one make_plan per
batch size) are listed for reference. Browser-side Plotly drawing is not included.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

DASHBOARD = Path(__file__).resolve().parent.parent / "app" / "dashboard.py"


def timed(at: AppTest, action) -> float:
    t = time.perf_counter()
    action(at)
    at.run()
    ms = (time.perf_counter() - t) * 1e3
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return ms


def slider(key: str, value):
    return lambda at: at.slider(key=key).set_value(value)


def rows():
    """(page, description, action) in the order they run; the scenario accumulates."""
    yield "views/whatif.py", "rerun, nothing changed", lambda at: None
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
    yield "views/whatif.py", "optimise (make_plan)", lambda at: at.button(key="btn_optimise").click()
    yield "views/whatif.py", "simulate (3 DES runs)", lambda at: at.button(key="btn_simulate").click()
    yield "views/plan.py", "open Plan", lambda at: None
    yield "views/timeline.py", "open Timeline (DES, 30 rounds)", lambda at: None
    yield "views/pareto.py", "open Pareto (T = 1, 7 batch sizes)", lambda at: None


def view_costs(T: float = 0.9, C: float = 0.35) -> None:
    """Cold cost of each What-if view's ssd_sim call at a (T, C) not seen before (no caches)."""
    from app import compute
    from ssd_sim.model.presets import get_preset
    from ssd_sim.plan import whatif

    prof = get_preset("llama70b-1b-h100")
    print(f"\ncold ssd_sim calls of the What-if page at T = {T}, C = {C} (ms)")
    t = time.perf_counter()
    plan = whatif.build_plan(prof, 5, 24, T, C, "adaptive", 4)
    print(f"  {'build_plan (fan-out DP, b*)':40} {(time.perf_counter() - t) * 1e3:8.1f}")
    for name, fn in (("evaluate (make_plan, knobs fixed)", lambda: whatif.evaluate(prof, plan)),
                     ("fanout_comparison", lambda: whatif.fanout_comparison(prof, plan)),
                     ("hit_rate_vs_budget (1..128)", lambda: whatif.hit_rate_vs_budget(prof, 5, T, C, 128, 4)),
                     ("backup_crossover (12 batch sizes)",
                      lambda: whatif.backup_crossover(prof, plan, compute.CROSSOVER_BATCHES)),
                     ("speedup_heatmap (10 x 6)", lambda: whatif.speedup_heatmap(
                         prof, plan, compute.HEATMAP_ACCEPTANCES, compute.HEATMAP_RATIOS))):
        t = time.perf_counter()
        fn()
        print(f"  {name:40} {(time.perf_counter() - t) * 1e3:8.1f}")


def main() -> int:
    at = AppTest.from_file(str(DASHBOARD), default_timeout=120)
    first = timed(at, lambda a: None)
    print(f"{'page':10} {'action':40} {'cold ms':>8} {'warm ms':>8}")
    print(f"{'whatif':10} {'first load (imports, presets, make_plan)':40} {first:8.0f} {'':>8}")
    page = "views/whatif.py"
    for p, desc, action in rows():
        if p != page:
            at.switch_page(p)
            page = p
        cold = timed(at, action)
        warm = statistics.median(timed(at, lambda a: None) for _ in range(3))
        print(f"{Path(p).stem:10} {desc:40} {cold:8.0f} {warm:8.0f}")
    view_costs()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
