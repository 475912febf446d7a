"""Workloads: Poisson arrivals with continuous batching, output-length distributions, TTFT / TPOT."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.planner import make_plan
from ssd_sim.plan.predict import predict_ssd
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import Workload, fixed_batch, poisson, prefill_ms

PRESET = "llama70b-1b-h100"


@pytest.fixture(scope="module")
def setup():
    profile = get_preset(PRESET)
    return profile, make_plan(profile, batch_size=4).plan


def test_continuous_batching_never_exceeds_the_max_batch_and_fills_it_under_load(setup):
    profile, plan = setup
    wl = poisson(rate=50.0, num_requests=200, max_batch=4, output_tokens=64, prompt_tokens=32)
    res = simulate(profile, plan, seed=1, workload=wl, timeline=True)
    rows = [s.rows for s in res.timeline if s.name == "verify"]
    assert max(rows) == 4 and min(rows) >= 1
    assert res.metrics.mean_batch <= 4 and res.metrics.mean_batch > 3.5
    assert res.metrics.sequences == 200 and res.metrics.output_tokens == 200 * 64


def test_light_load_ttft_is_one_prefill_and_tpot_the_single_sequence_speed(setup):
    # 0.2 req/s of 128-token outputs (~0.6 s each): requests rarely overlap, so TTFT is the prefill of one
    # 128-token prompt plus at most one round of waiting for a round boundary.
    profile, plan = setup
    wl = poisson(rate=0.2, num_requests=100, max_batch=4, output_tokens=128, prompt_tokens=128)
    m = simulate(profile, plan, seed=2, workload=wl).metrics
    pre = prefill_ms(profile.latency, 128)
    assert pre <= m.ttft_ms_p50 <= pre + 2 * m.round_ms
    single = predict_ssd(profile, plan.replace(batch_size=1)).per_seq_tok_s
    assert 1e3 / m.tpot_ms_p50 == pytest.approx(single, rel=0.1)
    assert m.mean_batch < 1.3
    assert m.tpot_ms_p50 <= m.tpot_ms_p90 <= m.tpot_ms_p99


def test_overload_queues_requests_so_ttft_grows_and_batches_fill(setup):
    profile, plan = setup
    light = poisson(rate=0.2, num_requests=100, max_batch=4, output_tokens=128, prompt_tokens=128)
    heavy = poisson(rate=20.0, num_requests=100, max_batch=4, output_tokens=128, prompt_tokens=128)
    m_light = simulate(profile, plan, seed=3, workload=light).metrics
    m_heavy = simulate(profile, plan, seed=3, workload=heavy).metrics
    assert m_heavy.ttft_ms_p99 > 20 * m_light.ttft_ms_p99
    assert m_heavy.mean_batch > 3.5
    assert m_heavy.total_tok_s > 2.5 * m_light.total_tok_s


def test_every_request_produces_its_drawn_output_length(setup):
    profile, plan = setup
    wl = poisson(rate=5.0, num_requests=60, max_batch=4, output_tokens=100, output_dist="geometric")
    m = simulate(profile, plan, seed=4, workload=wl).metrics
    expected = wl.requests(np.random.default_rng(4)).output_tokens  # the run draws the requests first
    assert m.output_tokens == int(expected.sum())
    assert m.sequences == 60


def test_uneven_output_lengths_shrink_a_fixed_batch_as_sequences_finish(setup):
    profile, plan = setup
    m_even = simulate(profile, plan, seed=5, workload=fixed_batch(4, 2000)).metrics
    m_uneven = simulate(profile, plan, seed=5, workload=fixed_batch(4, 2000, output_dist="uniform")).metrics
    assert m_even.mean_batch > 3.85  # equal lengths: only the last few rounds run short (random acceptance)
    assert m_uneven.mean_batch < 3.5  # lengths uniform on [1000, 2999]


def test_adaptive_backup_follows_the_active_batch_size(setup):
    profile, plan = setup
    adaptive = plan.replace(backup="adaptive", backup_threshold=3.0)
    wl = poisson(rate=3.0, num_requests=100, max_batch=4, output_tokens=128)
    m = simulate(profile, adaptive, seed=6, workload=wl).metrics
    assert m.backup_rounds["jit"] > 0 and m.backup_rounds["fast"] > 0  # jit at b < 3, fast at b >= 3


@pytest.mark.parametrize("kwargs, field", [
    ({"kind": "poisson", "rate": 0.0}, "rate"),
    ({"kind": "burst"}, "workload"),
    ({"output_tokens": 0}, "output_tokens"),
    ({"output_dist": "zipf"}, "output_dist"),
    ({"prompt_tokens": -1}, "prompt_tokens"),
])
def test_bad_workloads_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as e:
        Workload(**kwargs)
    assert e.value.field == field
