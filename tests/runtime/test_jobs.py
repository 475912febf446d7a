"""ssd_runtime.jobs: the checks a job gets against the loaded models (here: its arrival times)."""

from __future__ import annotations

import pytest

from ssd_runtime.jobs import Job, check_job
from ssd_sim.io.errors import ConfigError
from ssd_sim.plan.plan import Plan

TARGET = {"vocab_size": 100, "max_positions": 512}


@pytest.mark.parametrize("t", [1e308, 2.0**42 + 2**20])
def test_an_arrival_past_what_a_float_clock_resolves_is_refused(t):
    job = Job(Plan(mode="ar"), [[1, 2], [3]], 2, arrivals_ms=[0.0, t])
    with pytest.raises(ConfigError, match=r"arrival_ms: arrivals_ms\[1\] = .* ms is past 2\*\*42 ms"):
        check_job(job, TARGET, None)


def test_arrivals_within_the_bound_pass():
    check_job(Job(Plan(mode="ar"), [[1, 2], [3]], 2, arrivals_ms=[0.0, 2.0**42]), TARGET, None)
