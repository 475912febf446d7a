"""Calibration recovers known latency and acceptance parameters from traces written in the runtime schema."""


import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.calibrate import calibrate, fit_hit_curve, wilson
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import DRAFT, OVERHEAD, TARGET, sample_rank, write_trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    plans = [
        Plan(mode="ar", batch_size=1), Plan(mode="ar", batch_size=4),
        Plan(mode="sd", num_speculative_tokens=3, batch_size=1),
        Plan(mode="sd", num_speculative_tokens=2, batch_size=2),
        Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=1, backup="jit"),
        Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 3), fan_out_miss=(8, 0, 0, 0), batch_size=3, backup="fast"),
        Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=2, backup="jit", jit_redraft="batch"),
    ]
    return [write_trace(d / f"t{i}.jsonl", p, rounds=300, seed=i) for i, p in enumerate(plans)]


def test_latency_fits_recover_the_generating_functions(traces):
    prof, rep = calibrate(traces)
    for model, truth in ((prof.latency.target, TARGET), (prof.latency.draft, DRAFT)):
        for rows, tokens in ((1, 1), (4, 1), (1, 4), (12, 1), (3, 4)):
            assert model(rows, tokens) == pytest.approx(truth(rows, tokens), rel=0.03)
    assert rep.latency["target"]["r2"] > 0.99 and rep.latency["draft"]["r2"] > 0.99


def test_overheads_are_recovered(traces):
    prof, _ = calibrate(traces)
    lat = prof.latency
    assert lat.round_overhead_ms == pytest.approx(OVERHEAD["commit"], rel=0.05)
    assert lat.lookup_ms == pytest.approx(OVERHEAD["lookup"], rel=0.05)
    assert lat.fast_backup_ms == pytest.approx(OVERHEAD["fast"], rel=0.05)
    assert lat.transfer_ms == pytest.approx(OVERHEAD["transfer"], abs=0.3)
    assert lat.sd_transfer


def test_acceptance_and_hit_curves_are_recovered(traces):
    prof, rep = calibrate(traces)
    pt = prof.acceptance.at(0.0, 1.0)
    assert pt.source == "calibrated"
    assert pt.acceptance[0] == pytest.approx(0.7, abs=0.03)
    assert pt.primary_hit.miss_at_one == pytest.approx(0.4, abs=0.05)
    assert pt.primary_hit.r == pytest.approx(0.8, abs=0.15)
    assert pt.backup_hit.miss_at_one == pytest.approx(0.3, abs=0.07)
    lo, hi = rep.acceptance[0]["per_position"][0]["ci95"]
    assert lo < 0.7 < hi


def test_hit_curve_fit_on_many_ranks():
    import numpy as np

    rng = np.random.default_rng(0)
    ranks = [sample_rank(rng, 0.35, 0.6) for _ in range(20_000)]
    curve, info = fit_hit_curve(ranks)
    assert curve.miss_at_one == pytest.approx(0.35, abs=0.01)
    assert curve.r == pytest.approx(0.6, abs=0.03)
    assert info["r_ci95"][0] < 0.6 < info["r_ci95"][1] + 0.03


def test_wilson_interval():
    lo, hi = wilson(70, 100)
    assert lo == pytest.approx(0.604, abs=0.002) and hi == pytest.approx(0.781, abs=0.002)


def test_mixed_setups_are_refused(traces, tmp_path):
    other = tmp_path / "other.jsonl"
    text = traces[0].read_text().replace("tiny-target", "other-target")
    other.write_text(text)
    with pytest.raises(ConfigError, match="models"):
        calibrate([traces[0], other])


def test_ar_traces_without_a_draft_mix_with_sd_and_ssd_traces(traces, tmp_path):
    ar = tmp_path / "ar.jsonl"
    ar.write_text(traces[0].read_text().replace('"draft":"tiny-draft"', '"draft":null')
                  .replace('"draft":"float32"', '"draft":null').replace('"draft":"cpu:1"', '"draft":null'))
    prof, rep = calibrate([ar, *traces[2:]])
    assert rep.latency["target"]["samples"] > 300


def test_ar_only_traces_cannot_fit_acceptance(traces):
    with pytest.raises(ConfigError, match="draft"):
        calibrate(traces[:2])
