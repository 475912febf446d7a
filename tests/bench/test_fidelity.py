"""The shipped real CPU traces: calibration + simulator predict the held-out runs (issue 5's fidelity goal)."""

import importlib.util
import json
from pathlib import Path

import pytest

from ssd_sim.model.calibrate import calibrate
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.planner import make_plan

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "traces" / "cpu-fp32-grid"


def load_bench():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "bench" / "fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_held_out_runs_are_predicted_within_the_goal():
    res = load_bench().run(CPU / "manifest.json")
    assert len(res["runs"]) == 7
    assert res["median_abs_err_pct"] <= 5.0
    assert res["worst_abs_err_pct"] <= 10.0
    for r in res["runs"]:
        if r["measured_hit_rate"] is not None:
            assert r["predicted_hit_rate"] == pytest.approx(r["measured_hit_rate"], abs=0.03)


def test_shipped_profile_is_the_calibration_of_the_manifest():
    manifest = json.loads((CPU / "manifest.json").read_text())
    fitted, _ = calibrate([CPU / f for f in manifest["calibrate"]], name="qwen-coder-cpu-calibrated")
    shipped = load_profile_file(CPU / "profile.json")
    assert shipped.latency.target(1, 3) == pytest.approx(fitted.latency.target(1, 3), rel=1e-6)
    assert shipped.acceptance.at(1.0).acceptance == pytest.approx(fitted.acceptance.at(1.0).acceptance)


def test_calibrated_plan_is_the_best_measured_configuration():
    prof = load_profile_file(CPU / "profile.json")
    plan = make_plan(prof, 1, 0.0).plan
    assert (plan.K, plan.fan_out) == (3, (0, 0, 0, 1))  # = ssd-k3-f0001-b1-t0, the fastest run at T = 0
    hot = make_plan(prof, 1, 1.0).plan
    assert (hot.K, hot.fan_out, hot.saguaro_c) == (2, (0, 0, 1), 1.0)  # = ssd-k2-f001-b1-t1
