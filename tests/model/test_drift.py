"""model.drift: repeat runs of one setup are grouped, their verify times' pooled log-SD is the drift."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.drift import (
    SHIPPED_DRIFT,
    measured_drift,
    median_verify_ms,
    pooled_log_sd,
    repeat_groups,
    session_drift,
)
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import write_trace


def test_pooled_log_sd_is_the_within_group_sd_of_logs():
    e = math.e
    # group 1: ln = 0, 2 (mean 1, ss 2); group 2: ln = 1, 1, 4 (mean 2, ss 6); dof = 5 - 2
    assert pooled_log_sd([[1.0, e ** 2], [e, e, e ** 4]]) == pytest.approx(math.sqrt(8 / 3))
    with pytest.raises(ValueError, match="two runs"):
        pooled_log_sd([[5.0]])


def test_repeats_of_one_setup_are_grouped_and_others_are_not(tmp_path):
    sd = Plan(mode="sd", num_speculative_tokens=3)
    paths = [write_trace(tmp_path / f"a{i}.jsonl", sd, rounds=40, seed=i, noise=0.2) for i in range(3)]
    paths.append(write_trace(tmp_path / "other.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=40))
    traces = [read_trace(p) for p in paths]
    groups = repeat_groups(traces)
    assert [[t.path for t in g] for g in groups] == [[str(p) for p in paths[:3]]]
    drift = measured_drift(traces)
    assert (drift.groups, drift.runs, drift.dof) == (1, 3, 2) and 0 < drift.sd < 0.2
    assert measured_drift(traces[2:]) is None and session_drift(traces[2:]) == SHIPPED_DRIFT


def test_a_calibrations_own_repeats_are_pooled_with_the_projects_by_degrees_of_freedom(tmp_path):
    sd = Plan(mode="sd", num_speculative_tokens=3)
    traces = [read_trace(write_trace(tmp_path / f"a{i}.jsonl", sd, rounds=40, seed=i, noise=0.2)) for i in range(3)]
    own, pooled = measured_drift(traces), session_drift(traces)
    want = math.sqrt((2 * own.sd ** 2 + SHIPPED_DRIFT.dof * SHIPPED_DRIFT.sd ** 2) / (2 + SHIPPED_DRIFT.dof))
    assert pooled.sd == pytest.approx(want) and "pooled with the project's 13.2%" in pooled.source


def test_the_shipped_drift_is_what_the_shipped_repeats_measure():
    """SHIPPED_DRIFT cites bench/drift.py over traces/ (every folder but superseded/): the same groups, runs and SD."""
    root = Path(__file__).resolve().parents[2] / "traces"
    traces = [read_trace(p) for f in sorted(root.iterdir()) if f.is_dir() and f.name != "superseded"
              for p in sorted(f.glob("*.jsonl"))]
    groups = repeat_groups(traces)
    ms = [[median_verify_ms(t) for t in g] for g in groups]
    assert (len(groups), sum(map(len, ms))) == (SHIPPED_DRIFT.groups, SHIPPED_DRIFT.runs)
    assert pooled_log_sd(ms) == pytest.approx(SHIPPED_DRIFT.sd, abs=5e-4)
