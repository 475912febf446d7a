"""ssd_sim.sim.router: round-robin and least-loaded assignment on hand-computed cases."""

from __future__ import annotations

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.sim.router import assign, least_loaded, round_robin


def test_round_robin_deals_requests_in_turn():
    assert round_robin(7, 3).tolist() == [0, 1, 2, 0, 1, 2, 0]


def test_least_loaded_sends_each_request_to_the_replica_with_fewest_outstanding():
    # one slot each: r0 takes 0 (tie -> lowest index), r1 takes 1, 2 queues on r0 (finish 105), at t = 10 r0 holds
    # two requests and r1 one, so 3 goes to r1
    assert least_loaded([0, 0, 0, 10], [100, 100, 5, 5], replicas=2, slots=1).tolist() == [0, 1, 0, 1]


def test_a_finished_request_no_longer_counts():
    # request 0 is done at t = 1 when request 1 arrives: both replicas are empty, the lowest index wins
    assert least_loaded([0, 1, 2], [1, 10, 10], replicas=2, slots=1).tolist() == [0, 0, 1]


def test_slots_let_a_replica_run_requests_side_by_side():
    # two slots: r0's two requests run together and finish at 10; at t = 10 both replicas are empty again
    got = least_loaded([0, 0, 0, 10], [10, 10, 10, 10], replicas=2, slots=2)
    assert got.tolist() == [0, 1, 0, 0]


def test_an_unknown_router_is_one_line():
    with pytest.raises(ConfigError, match="^router: must be one of round-robin, least-loaded, got 'random'$"):
        assign("random", [0.0], [1.0], 1, 1)
