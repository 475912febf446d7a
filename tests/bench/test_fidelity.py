"""The shipped real CPU traces: calibration + simulator predict runs held out by prompts, modes, temperature, C and
batch size (bench/fidelity.py). Only the prompt splits hold out text: the others predict runs on the calibration's
own prompts (at T = 0 the same tokens), which the overlap check refuses as hold-outs; they are still run with
allow_leaks, as configuration checks without a goal, so a regression fails."""

import functools
import json
from pathlib import Path

import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import calibrate
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.planner import PlanRequest, make_plan
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "traces" / "cpu-fp32-grid"


BENCH = load_bench("fidelity")
SPLITS = BENCH.splits()


@functools.cache
def reported(name: str) -> dict:
    """run_split of a split with allow_leaks, once per test session (the limit and coverage tests share it)."""
    return BENCH.run_split(name, SPLITS[name], allow_leaks=True)


def test_every_split_named_by_the_issue_is_there():
    assert {"config", "prompts", "ar-sd-to-ssd", "t0-to-t1", "c1-to-c", "b2-to-b4", "code-to-chat", "halves-t0",
            "halves-t1", "halves-probe"} <= set(SPLITS)



@pytest.mark.parametrize("name", sorted(SPLITS))
def test_calibration_and_prediction_files_are_disjoint(name):
    s = SPLITS[name]
    assert s["calibrate"] and s["predict"]
    assert not {p.resolve() for p in s["calibrate"]} & {p.resolve() for p in s["predict"]}


def test_each_split_holds_out_what_its_name_says():
    def traces(name, side):
        return [read_trace(p) for p in SPLITS[name][side]]

    for name, held in (("prompts", "prompts"), ("code-to-chat", "prompts"), ("t0-to-t1", "temperature"),
                       ("c1-to-c", "saguaro_c"), ("b2-to-b4", "batch_size")):
        shared = BENCH.shared(traces(name, "calibrate"), traces(name, "predict"))
        assert shared[held] == [], f"{name} shares {held}: {shared[held]}"
    assert {t.mode for t in traces("ar-sd-to-ssd", "calibrate")} == {"ar", "sd"}
    assert {t.mode for t in traces("ar-sd-to-ssd", "predict")} == {"ssd"}
    cal_prompts = set().union(*(BENCH.prompt_ids(t) for t in traces("prompts", "calibrate")))
    assert cal_prompts == {f"code:{i}" for i in range(8)}


TEXT_HOLDOUTS = {"prompts", "code-to-chat", "halves-t0", "halves-t1", "halves-probe"}  # the splits that share no text


@pytest.mark.parametrize("name", sorted(SPLITS))
def test_the_overlap_check_refuses_every_split_that_shares_text(name):
    s = SPLITS[name]
    cal, pred = [read_trace(p) for p in s["calibrate"]], {p.name: read_trace(p) for p in s["predict"]}
    if name in TEXT_HOLDOUTS:
        BENCH.check_holdout(name, cal, pred)  # no LeakingSplit
    else:
        with pytest.raises(BENCH.LeakingSplit, match="share more than 5% of their text"):
            BENCH.check_holdout(name, cal, pred)


def test_a_leaking_split_is_refused_unless_asked_and_then_has_no_goal():
    with pytest.raises(BENCH.LeakingSplit, match="split b2-to-b4: 2 of 2 predicted runs"):
        BENCH.run_split("b2-to-b4", SPLITS["b2-to-b4"])
    res = reported("b2-to-b4")
    assert res["leak"] and res["goal"] is False  # reported, but never counted toward a goal


def test_the_prompt_split_shares_no_logged_context_with_its_calibration():
    s = SPLITS["prompts"]
    text = BENCH.check_holdout("prompts", [read_trace(p) for p in s["calibrate"]],
                               {p.name: read_trace(p) for p in s["predict"]})
    assert all(v.startswith("0% shared (0% of its contexts; 0% of its prompts)") for v in text.values()), text


# Measured with bench/fidelity.py on the shipped traces (the note of issue 10 has the tables). A split that misses
# the goal (median <= 5%, worst <= 10%) is pinned at its measured error, so a regression still fails.
# Misses and why (traces/cpu-fp32-splits/README.md): prompts 8-15 accept fewer tokens than the 8 calibration prompts
# (a workload difference no calibration on 0-7 can see); AR + SD traces cannot time the draft's glue / branch decode
# or the interference of the two processes (assumed at the middle of its range); b = 4 verifies 16 tokens, twice
# the most the calibration timed (the latency curve is extrapolated); chat is another workload (no goal).
LIMITS = {"config": (5.0, 10.0), "t0-to-t1": (5.0, 10.0), "c1-to-c": (5.0, 10.0),
          "prompts": (9.0, 14.0), "ar-sd-to-ssd": (5.0, 18.5), "ar-sd-to-ssd-latency": (8.5, 27.0),
          "b2-to-b4": (11.0, 12.5), "code-to-chat": (45.0, 50.0),
          # text hold-outs on the AVX2 host: the host drifted 12% during the session and the odd prompts accept less
          # (traces/cpu-fp32-halves/README.md); pinned at the measured error so a regression still fails
          "halves-t0": (36.0, 41.5), "halves-t1": (20.5, 20.5),
          # latencies from a probe beside the predicted runs (median goal met; SD 12.4% high: its verifies ran 1.09x
          # the probe table, the host's spread); 3 prompts x 16 tokens per run
          "halves-probe": (4.0, 12.5)}


def test_every_split_has_a_limit():
    assert set(LIMITS) == set(SPLITS)


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_held_out_runs_are_predicted_within_the_split_limits(name):
    res = reported(name)
    median, worst = LIMITS[name]
    assert res["median_abs_err_pct"] <= median and res["worst_abs_err_pct"] <= worst, res
    for r in res["runs"]:  # hit rates: derived from logged distributions, or fitted to ranks (config)
        if r["measured_hit_rate"] is not None and name in ("config", "c1-to-c", "b2-to-b4"):
            assert r["predicted_hit_rate"] == pytest.approx(r["measured_hit_rate"], abs=0.08), r


def test_shipped_profile_is_the_calibration_of_the_manifest():
    manifest = json.loads((CPU / "manifest.json").read_text())
    fitted, _ = calibrate([CPU / f for f in manifest["calibrate"]], name="qwen-coder-cpu-calibrated")
    shipped = load_profile_file(CPU / "profile.json")
    assert shipped.latency.target(1, 3) == pytest.approx(fitted.latency.target(1, 3), rel=1e-6)
    assert shipped.acceptance.at(1.0).acceptance == pytest.approx(fitted.acceptance.at(1.0).acceptance)


def test_calibrated_plan_is_the_best_measured_configuration():
    prof = load_profile_file(CPU / "profile.json")
    plan = make_plan(prof).plan
    assert (plan.K, plan.fan_out) == (3, (0, 0, 0, 1))  # = ssd-k3-f0001-b1-t0, the fastest run at T = 0
    hot = make_plan(prof, PlanRequest(temperature=1.0)).plan
    assert (hot.K, hot.fan_out, hot.saguaro_c) == (2, (0, 0, 1), 1.0)  # = ssd-k2-f001-b1-t1


def test_interval_coverage_counts_text_hold_outs_only():
    # Across the configuration splits (which share text) the 90% intervals held 80-95% of the runs; on text the
    # calibration never saw there are 7 goal runs (prompts 8-15 and the odd halves), too few to judge coverage well
    results = [reported(name) for name in sorted(SPLITS)]
    goal_runs = [r for res in results if res["goal"] for r in res["runs"]]
    assert {res["name"] for res in results if res["goal"]} == {"prompts", "halves-t0", "halves-t1", "halves-probe"}
    assert len(goal_runs) == 10 and all(r["shared_text"].startswith("0% shared") for r in goal_runs)
    # measured: 7 of those 10 inside their 90% intervals (the goal is 85-95%: not met, issue 26); the probed split
    # holds all 3 of its runs, the halves with latencies fitted 2.5 h before the runs none of their 4
    assert sum(r["inside"] for r in goal_runs) == 7
    assert sum(r["inside"] for r in reported("halves-probe")["runs"]) == 3


def test_a_choice_is_judged_by_the_measured_tok_s_it_gives_up():
    w = (("code:1",), 0.0, 1)
    runs = [{"trace": "a", "workload": w, "predicted_tok_s": 2.0, "measured_tok_s": 1.0},
            {"trace": "b", "workload": w, "predicted_tok_s": 1.5, "measured_tok_s": 1.25},
            {"trace": "c", "workload": (("code:3",), 0.0, 1), "predicted_tok_s": 9.0, "measured_tok_s": 1.0}]
    (c,) = BENCH.choices(runs)  # "c" is alone in its workload: no choice there
    assert (c["pick"], c["best"], c["ok"]) == ("a", "b", False) and c["regret_pct"] == pytest.approx(20.0)


def test_the_probed_split_takes_its_latencies_from_the_probe():
    res = reported("halves-probe")
    assert res["probe"].endswith("probe.json") and res["choices"][0]["ok"]
    assert any("probe table" in w for w in res["warnings"])  # the calibration runs drifted from the probe: said
