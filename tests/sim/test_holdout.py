"""sim.holdout: predictions scored on requests the calibration never saw (ssd-plan holdout, bench/fidelity.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.model.profile import load_profile_file
from ssd_sim.sim import holdout
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
HALVES = ROOT / "traces" / "cpu-fp32-halves"  # 12 even code prompts per run, b = 1, logged distributions
CAL = ("cal-ar-t0.jsonl", "cal-sd-k2-t0.jsonl", "cal-ssd-k2-f112-t0.jsonl")


def runs(*names: str) -> dict:
    return {n: read_trace(HALVES / n) for n in names}


def test_random_halves_are_disjoint_cover_the_pool_and_repeat_by_seed():
    a, b = holdout.halves(list(range(12)), draw=3)
    assert len(a) == len(b) == 6 and set(a) | set(b) == set(range(12)) and not set(a) & set(b)
    assert holdout.halves(list(range(12)), draw=3) == (a, b) and holdout.halves(list(range(12)), draw=4) != (a, b)
    assert holdout.halves(list(range(12)), draw=3, seed=1) != (a, b)
    assert len(holdout.halves(list(range(7)), 0)[0]) == 3


def test_the_round_time_error_is_the_latency_side_of_a_tok_s_error():
    # twice the tok/s from twice the tokens per round is the latency right; the same tokens in half the time is not
    assert holdout.round_ms_err(2.0, 2.0, 1.0, 1.0) == 0.0
    assert holdout.round_ms_err(2.0, 1.0, 1.0, 1.0) == -50.0
    assert holdout.round_ms_err(None, 1.0, 1.0, 1.0) is None
    assert holdout.err_pct(1.1, 1.0) == pytest.approx(10.0) and holdout.err_pct(1.0, 0.0) is None


def test_a_choice_is_judged_by_the_measured_tok_s_it_gives_up():
    w = (("code:1",), 0.0, 1)
    rows = [{"trace": "a", "workload": w, "predicted_tok_s": 2.0, "measured_tok_s": 1.0},
            {"trace": "b", "workload": w, "predicted_tok_s": 1.5, "measured_tok_s": 1.25},
            {"trace": "c", "workload": (("code:3",), 0.0, 1), "predicted_tok_s": 9.0, "measured_tok_s": 1.0}]
    (c,) = holdout.choices(rows)  # "c" is alone in its workload: no choice there
    assert (c["pick"], c["best"], c["ok"]) == ("a", "b", False) and c["regret_pct"] == pytest.approx(20.0)


def test_a_prediction_simulates_enough_rounds_to_be_the_models_expectation():
    trace = read_trace(HALVES / "cal-sd-k4-t0.jsonl")
    rounds = sum(len(r.seqs) for r in trace.rounds)
    reps = holdout.replicates_for(trace)
    assert reps * rounds >= holdout.MIN_SIM_ROUNDS > (reps - 1) * rounds
    small = trace.only_requests(sorted(trace.sequences())[:2], "two")
    assert holdout.replicates_for(small) > reps  # fewer requests: more replicates, the same simulated rounds
    # two seed sets of the default size agree within 0.5% (measured: 0.06% SD over 5 sets; 10 replicates: 0.5%)
    prof = load_profile_file(ROOT / "traces" / "cpu-fp32-grid" / "profile.json")
    first, other = (holdout.predict_run(prof, trace, seed=s)["tok_s"] for s in (0, 10**6))
    assert other == pytest.approx(first, rel=0.005)


def test_each_predicted_run_draws_its_own_seeds():
    # a hash of the run's label (file and draw), the same in every process, so runs' Monte Carlo errors are independent
    labels = [f"zf96-sd-k2-t0.jsonl[B{d}]" for d in range(10)] + ["sd-r0.jsonl", "sd-r1.jsonl"]
    seeds = [holdout.run_seed(label) for label in labels]
    assert len(set(seeds)) == len(labels) and all(0 <= s < 2**31 for s in seeds)
    assert holdout.run_seed("sd-r0.jsonl") == 180131008 == holdout.run_seed("sd-r0.jsonl")


def test_the_class_floor_charges_each_class_of_b_at_half_a_s_rate_of_that_class():
    trace = read_trace(HALVES / "cal-sd-k4-t0.jsonl").with_tags(["x", "y"] * 6)
    a, b = [0, 1, 2, 4], [3, 5, 6, 7, 8, 9, 10, 11]
    rate = {c: summarize(trace.only_requests([q for q in a if trace.tag(q) == c], c)).tok_s for c in "xy"}
    tokens = {c: summarize(trace.only_requests([q for q in b if trace.tag(q) == c], c)).tokens for c in "xy"}
    predicted = sum(tokens.values()) / sum(tokens[c] / rate[c] for c in "xy")
    measured = summarize(trace.only_requests(b, "B")).tok_s
    assert holdout.mixed_floor_err(trace, a, b) == pytest.approx(100 * (predicted / measured - 1))
    assert holdout.mixed_floor_err(trace, [0, 2, 4], b) is None  # B holds class y, which A never ran
    assert holdout.floor_err(trace, a, b) == pytest.approx(
        100 * (summarize(trace.only_requests(a, "A")).tok_s / measured - 1))


@pytest.fixture(scope="module")
def checked():
    return holdout.check_halves(runs(*CAL, "cal-sd-k4-t0.jsonl"), draws=2)


def test_a_check_predicts_every_runs_half_b_from_half_a_of_every_run(checked):
    traces = runs(*CAL, "cal-sd-k4-t0.jsonl")
    assert (checked["draws"], checked["requests"], checked["half"], checked["predicted"]) == (2, 12, 6, 8)
    for r in checked["runs"]:
        a, b = holdout.halves(list(range(12)), r["draw"])
        assert r["trace"] == f"{r['run']}[B{r['draw']}]" and len(r["workload"][0]) == 6
        assert r["measured_tok_s"] == pytest.approx(summarize(traces[r["run"]].only_requests(b, "B")).tok_s)
        assert r["shared_text"].startswith("0% shared")  # A and B share no prompt or context
        assert r["floor_err_pct"] == pytest.approx(holdout.floor_err(traces[r["run"]], a, b))
        low, high = r["interval_90"]
        assert r["inside"] == (low <= r["measured_tok_s"] <= high) and low < r["predicted_tok_s"] < high
    errs = [abs(r["tok_s_err_pct"]) for r in checked["runs"]]
    assert checked["worst_abs_err_pct"] == max(errs) and checked["inside"] == sum(r["inside"] for r in checked["runs"])
    assert set(checked["per_run"]) == set(traces) and all(v["draws"] == 2 for v in checked["per_run"].values())
    assert len(checked["choices"]) == 2 and all("recommended" in c for c in checked["choices"])  # one per draw


def test_a_check_predicts_what_the_fidelity_bench_predicts_on_the_same_halves(checked):
    # the same calibration (half A of every run) and the same seeds: the bench's numbers, less its held-out drift
    fidelity = load_bench("fidelity")
    split = {"what": "test", "goal": True, "acceptance_from": None, "probe": None, "halves": {"draws": 2, "seed": 0},
             "calibrate": [HALVES / n for n in (*CAL, "cal-sd-k4-t0.jsonl")],
             "predict": [HALVES / n for n in (*CAL, "cal-sd-k4-t0.jsonl")]}
    bench = {r["trace"]: r for r in fidelity.run_split("same", split)["runs"]}
    for r in checked["runs"]:
        assert r["predicted_tok_s"] == pytest.approx(bench[r["trace"]]["predicted_tok_s"], rel=1e-12)
        assert r["measured_tok_s"] == bench[r["trace"]]["measured_tok_s"]


def test_a_check_refuses_runs_over_other_prompts_batched_runs_and_tiny_pools():
    with pytest.raises(ConfigError, match="the runs share 0 prompts .*give runs over one prompt file or set"):
        holdout.check_halves(runs("cal-sd-k4-t0.jsonl", "pred-sd-k3-t0.jsonl"))  # even prompts vs odd
    batched = read_trace(ROOT / "traces" / "cpu-fp32-splits" / "sd-k3-b2-t0.jsonl")
    with pytest.raises(ConfigError, match="every run ran at batch size > 1"):
        holdout.check_halves({"b2": batched})
    three = read_trace(HALVES / "cal-sd-k4-t0.jsonl").only_requests([0, 1, 2], "three")
    with pytest.raises(ConfigError, match="at least 4"):
        holdout.check_halves({"three": three})
    with pytest.raises(ConfigError, match="draws"):
        holdout.check_halves(runs("cal-sd-k4-t0.jsonl"), draws=0)


def test_a_check_with_classes_weighs_each_draw_to_its_half_b_and_says_when_it_cannot():
    lone = holdout.halves(list(range(12)), 0)[1][0]  # the one request of class y lands in half B of draw 0
    tags = ["x"] * 12
    tags[lone] = "y"
    traces = {n: t.with_tags(tags) for n, t in runs("cal-ar-t0.jsonl", "cal-sd-k2-t0.jsonl").items()}
    res = holdout.check_halves(traces, draws=1)
    assert res["weighted"] and any("draw 0: half B holds requests of classes half A never ran (y)" in w
                                   for w in res["warnings"])
    assert not holdout.check_halves(traces, draws=1, weigh=False)["weighted"]


SPLITS = ROOT / "traces" / "cpu-fp32-splits"  # code prompts 0-7 at b = 1, 2 and 4


def test_a_check_leaves_out_batched_runs_and_says_so():
    traces = {n: read_trace(SPLITS / n) for n in ("ar-b1-t0.jsonl", "sd-k2-b1-t0.jsonl", "sd-k3-b2-t0.jsonl")}
    res = holdout.check_halves(traces, draws=1)
    assert {r["run"] for r in res["runs"]} == {"ar-b1-t0.jsonl", "sd-k2-b1-t0.jsonl"} and res["requests"] == 8
    (line,) = res["left_out"]
    assert line.startswith("sd-k3-b2-t0.jsonl (batch size 2")


def test_runs_over_slices_of_one_built_in_set_meet_on_the_prompts_they_share():
    # code prompts 0-7 and the even ones 0-22 share code:0, 2, 4, 6 (as calibrate-here's short and long runs do)
    traces = {"first8": read_trace(SPLITS / "sd-k2-b1-t0.jsonl"), "even": read_trace(HALVES / "cal-sd-k2-t0.jsonl")}
    seqs, seq_in = holdout.request_pool(traces)
    assert seqs == [0, 2, 4, 6] and seq_in["even"] == {0: 0, 2: 1, 4: 2, 6: 3}
    # one host's runs over different requests of one set meet on the requests both decoded
    ar = read_trace(SPLITS / "ar-b1-t0.jsonl")
    six = read_trace(SPLITS / "sd-k2-b1-t0.jsonl").only_requests(range(6), "six")
    res = holdout.check_halves({"ar": ar, "sd": six}, draws=2)
    assert (res["requests"], res["half"]) == (6, 3)
    for d in (0, 1):
        b = holdout.halves(list(range(6)), d)[1]
        assert all(r["workload"][0] == tuple(sorted(f"code:{q}" for q in b)) for r in res["runs"] if r["draw"] == d)
    assert any("the runs share 6 prompts" in w and "ar (2 of its 8)" in w for w in res["warnings"])
