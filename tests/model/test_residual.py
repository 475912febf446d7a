"""model.residual: each AR / SD run's median verify residual around a calibration's target fit, their SD per
calibration, pooled by degrees of freedom over calibrations (folder, host, target setup), the weight of that pool
against one calibration's own (prior degrees of freedom) and the moderated spread calibrate uses."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import calibrate_traces, fit_target
from ssd_sim.model.drift import SHIPPED_DRIFTS, Drift
from ssd_sim.model.latency import ForwardLatency
from ssd_sim.model.residual import (
    SHIPPED_RESIDUAL,
    ProjectResidual,
    calibration_groups,
    calibration_residuals,
    measured_residual,
    moderated,
    pooled_residual,
    prior_dof,
    run_residuals,
)
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import TARGET, write_trace

AR, SD2, SD3 = Plan(mode="ar"), Plan(mode="sd", num_speculative_tokens=2), Plan(mode="sd", num_speculative_tokens=3)
SSD = Plan(mode="ssd", num_speculative_tokens=2, fan_out=(1, 1, 2))


def _runs(tmp_path, plans=(AR, SD2, SD3), rounds=30, noise=0.0, folder="cal", header=None):
    d = tmp_path / folder
    d.mkdir(exist_ok=True)
    return [read_trace(write_trace(d / f"{p.mode}{p.K}-{i}.jsonl", p, rounds=rounds, seed=i, noise=noise,
                                   header=header)) for i, p in enumerate(plans)]


def test_a_run_on_the_fit_has_no_residual_and_a_slower_fit_shows_by_how_much(tmp_path):
    traces = _runs(tmp_path)
    assert run_residuals(traces, TARGET) == pytest.approx([0.0, 0.0, 0.0], abs=1e-12)
    slower = ForwardLatency(fixed_ms=375.0, token_ms=187.5, token_exponent=0.9)  # 1.25x TARGET at every shape
    assert run_residuals(traces, slower) == pytest.approx([-0.2, -0.2, -0.2])


def test_ssd_runs_and_runs_of_few_verifies_do_not_count(tmp_path):
    traces = _runs(tmp_path, plans=(AR, SD2, SSD))
    assert len(run_residuals(traces, TARGET)) == 2
    assert measured_residual(traces, TARGET) is None  # 2 runs: no SD from 1 degree of freedom
    short = _runs(tmp_path, plans=(AR, SD2, SD3), rounds=9, folder="short")
    assert run_residuals(short, TARGET) == []


def test_one_calibrations_spread_is_the_sd_of_its_runs_medians(tmp_path):
    traces = _runs(tmp_path, noise=0.02)
    meds = run_residuals(traces, TARGET)
    d = measured_residual(traces, TARGET)
    mean = sum(meds) / 3
    assert (d.groups, d.runs, d.dof) == (1, 3, 2)
    assert d.sd == pytest.approx(math.sqrt(sum((m - mean) ** 2 for m in meds) / 2))
    assert 0 < d.sd < 0.02


def test_spreads_pool_by_degrees_of_freedom():
    parts = [Drift(0.02, 1, 3, "a"), Drift(0.10, 1, 7, "b")]  # 2 and 6 degrees of freedom
    d = pooled_residual(parts, "both")
    assert (d.groups, d.runs, d.dof, d.source) == (2, 10, 8, "both")
    assert d.sd == pytest.approx(math.sqrt((2 * 0.02 ** 2 + 6 * 0.10 ** 2) / 8))
    assert pooled_residual([], "none") is None


def test_calibrations_that_share_one_spread_pool_fully_and_ones_that_differ_hardly_at_all():
    alike = [Drift(sd, 1, 7, "") for sd in (0.050, 0.052, 0.049, 0.051)]  # less spread than 6 dof of sampling gives
    assert prior_dof(alike) == 24.0
    apart = [Drift(sd, 1, 7, "") for sd in (0.004, 0.10, 0.01, 0.08, 0.013, 0.06)]
    assert 0 < prior_dof(apart) < 3
    with pytest.raises(ValueError, match="3 calibrations"):
        prior_dof(alike[:2])
    with pytest.raises(ValueError, match="3 calibrations"):
        prior_dof(alike[:2] + [Drift(0.0, 1, 4, "identical runs")])


def test_a_calibrations_own_spread_is_moderated_by_the_projects_weight():
    project = ProjectResidual(Drift(0.05, 10, 66, "project"), 2.0)
    assert moderated(None, project) is project.spread
    own = Drift(0.02, 1, 5, "own")  # 4 degrees of freedom against the project's 2
    d = moderated(own, project)
    assert d.sd == pytest.approx(math.sqrt((4 * 0.02 ** 2 + 2 * 0.05 ** 2) / 6))
    assert (d.groups, d.runs) == (11, 71) and "counted as 2.0 degrees of freedom against 4" in d.source


def test_calibrations_are_split_by_folder_and_host_not_by_the_draft(tmp_path):
    a = _runs(tmp_path, folder="a")  # AR (no draft) and SD runs: one calibration
    b = _runs(tmp_path, folder="b")
    c = _runs(tmp_path, folder="b", plans=(AR,), header={"host": {"cpu_id": "OtherCPU"}})
    traces = a + b + c
    groups = calibration_groups([Path(t.path) for t in traces], traces)
    assert [len(g) for g in groups] == [3, 3, 1]
    assert [[t.path for t in g] for g in groups][:2] == [[t.path for t in a], [t.path for t in b]]
    measured = calibration_residuals(groups, fit_target)
    assert len(measured) == 2  # the one-run calibration measures nothing
    ar_only = _runs(tmp_path, folder="ar", plans=(AR, AR, AR))  # calibrate refuses it: no draft to fit
    assert calibration_residuals([ar_only], fit_target) == []


def test_a_calibration_without_three_ar_sd_runs_takes_the_projects_spread(tmp_path):
    traces = _runs(tmp_path, plans=(AR, SD2, SSD))
    profile, _ = calibrate_traces(traces, [t.path for t in traces])
    src = profile.uncertainty.sources["latency_session_sd"]
    assert f"the project's {SHIPPED_RESIDUAL.spread.sd:.1%}" in src and "fewer than 3 AR / SD traces" in src
    given = ProjectResidual(Drift(0.03, 4, 20, "given"), 5.0)
    profile, _ = calibrate_traces(traces, [t.path for t in traces], residual=given)
    assert "the project's 3.0% (fewer than 3 AR / SD traces to measure it here; given)" in \
        profile.uncertainty.sources["latency_session_sd"]
    # with the session drift as the next run's: 4.5% x 1.07 (Student's t on its 15 degrees of freedom)
    session = SHIPPED_DRIFTS["session"].predictive_sd()
    assert profile.uncertainty.latency_session_sd == pytest.approx(math.hypot(0.03, session), abs=5e-4)
    assert session == pytest.approx(0.0480, abs=5e-4)


def test_a_calibration_moderates_its_own_spread_with_the_projects(tmp_path):
    traces = _runs(tmp_path, noise=0.02)
    own = measured_residual(traces, fit_target(traces))
    given = ProjectResidual(Drift(0.05, 10, 66, "given"), 1.5)
    profile, _ = calibrate_traces(traces, [t.path for t in traces], residual=given)
    want = math.sqrt((own.dof * own.sd ** 2 + 1.5 * 0.05 ** 2) / (own.dof + 1.5))
    src = profile.uncertainty.sources["latency_session_sd"]
    assert f"= {want:.1%}" in src and "pooled with the project's 5.0% counted as 1.5 degrees of freedom against 2" in src
