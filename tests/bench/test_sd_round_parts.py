"""bench/sd_round_parts.py: SD's draft steps split by what the last round left, against the calibration's price."""

import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import calibrate_traces
from ssd_sim.plan.plan import Plan
from tests.helpers.bench import load_bench
from tests.helpers.synthetic_traces import DRAFT, write_trace

BENCH = load_bench("sd_round_parts")


@pytest.fixture(scope="module")
def sd_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("sd") / "sd.jsonl"
    return read_trace(write_trace(path, Plan(mode="sd", num_speculative_tokens=2), rounds=400, noise=0.0))


def test_a_first_step_after_an_all_accepted_round_is_the_two_token_forward(sd_run):
    m = BENCH.measured_parts(sd_run)
    assert m["after_all"] == pytest.approx(DRAFT(1, 1) + DRAFT(1, 2))
    assert m["after_rejection"] == pytest.approx(m["first"]) == pytest.approx(2 * DRAFT(1, 1))
    following = sd_run.rounds[:-1]  # the rounds a next round follows, each counted once
    assert m["p_all"] == pytest.approx(sum(r.seqs[0].accepted == 2 for r in following) / len(following))
    assert m["first_share"] == 1 / 400


def test_the_calibration_prices_both_first_steps_it_timed(sd_run, tmp_path):
    # an SSD trace beside it times the draft's multi-token forwards (its glue), as in every folder the bench reads
    ssd = read_trace(write_trace(tmp_path / "ssd.jsonl", Plan(mode="ssd", num_speculative_tokens=2), rounds=400,
                                 noise=0.0))
    profile, _ = calibrate_traces([sd_run, ssd], ["sd.jsonl", "ssd.jsonl"], name="parts")
    m = BENCH.measured_parts(sd_run)
    p = BENCH.priced_parts(profile.latency, 2, m["p_all"])
    assert p["after_all"] == pytest.approx(m["after_all"], rel=0.01)
    assert p["after_rejection"] == pytest.approx(m["after_rejection"], rel=0.01)
    assert p["verify"] == pytest.approx(m["verify"], rel=0.01)


def test_the_first_rounds_saving_is_their_share_times_p_all_times_the_second_token():
    m = {"first_share": 0.2, "p_all": 0.5, "round": 800.0}
    assert BENCH.first_round_saving_pct(m, {"after_all": 340.0, "after_rejection": 300.0}) == pytest.approx(0.5)


def test_only_sd_runs_at_one_row_are_split(tmp_path):
    ar = read_trace(write_trace(tmp_path / "ar.jsonl", Plan(mode="ar"), rounds=20))
    with pytest.raises(ValueError, match="an SD run at b = 1 is needed, got ar at b = 1"):
        BENCH.measured_parts(ar)
