"""Workloads: Poisson arrivals with continuous batching, output-length distributions, TTFT / TPOT."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ssd
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import Workload, fixed_batch, poisson, prefill_ms, read_arrivals

PRESET = "llama70b-1b-h100"


@pytest.fixture(scope="module")
def setup():
    profile = get_preset(PRESET)
    return profile, make_plan(profile, PlanRequest(batch_size=4)).plan


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


# ---- one-token outputs meeting a queue (the "Negative delay" crash) ------------------------------------------


def test_one_token_requests_queued_behind_a_full_batch_run_back_to_back_prefills():
    # max_batch 1, two 1-token requests at t = 0: each ends with its own prefill (the prefill samples the only
    # token), so the second is admitted at once when the first leaves. The event model used to wait for the
    # "next arrival" at 0 ms from 18.3 ms: a negative delay.
    profile = get_preset(PRESET)
    plan = make_plan(profile).plan
    wl = Workload("fixed", num_requests=2, max_batch=1, output_tokens=1, prompt_tokens=128)
    m = simulate(profile, plan, workload=wl).metrics
    pre = prefill_ms(profile.latency, 128)
    # the 1-token step (18.28 ms less the 0.3 ms round overhead) + 127 more tokens' all-reduce bytes (12.48 us each)
    assert pre == pytest.approx(18.2815 + 127 * 0.012483, abs=1e-3)
    assert m.sequences == 2 and m.output_tokens == 2 and m.rounds == 0
    assert m.sim_ms == pytest.approx(2 * pre, rel=1e-12)
    assert (m.ttft_ms_p50, m.ttft_ms_p99) == (pytest.approx(1.5 * pre), pytest.approx(1.99 * pre))


def test_poisson_geometric_outputs_with_one_token_requests_run_to_the_end():
    # The case: 1,000 requests at 20 req/s on 16 slots, geometric lengths of mean 16 (about 1 in 16
    # is a one-token request: 73 here).
    profile = get_preset("qwen32b-0.6b-h100")
    plan = make_plan(profile, PlanRequest(batch_size=16)).plan
    wl = poisson(rate=20.0, num_requests=1000, max_batch=16, output_tokens=16, output_dist="geometric")
    lengths = wl.requests(np.random.default_rng(0)).output_tokens
    assert int((lengths == 1).sum()) == 73
    m = simulate(profile, plan, seed=0, workload=wl).metrics
    assert m.sequences == 1000 and m.output_tokens == int(lengths.sum()) == 16039


# ---- bounds ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, field, text", [
    ({"output_tokens": 2**21 + 1}, "output_tokens", "1..2097152 (tokens per sequence), got 2097153"),
    ({"num_requests": 10**6 + 1}, "num_requests", "1..1000000 (requests), got 1000001"),
    ({"max_batch": 4097}, "max_batch", "1..4096 (sequences), got 4097"),
    ({"prompt_tokens": 2**21 + 1}, "prompt_tokens", "0..2097152 (tokens per request)"),
    ({"kind": "poisson", "rate": 1e-9}, "rate", "1e-06..1e+06 (requests/s), got 1e-09"),
    ({"kind": "arrivals", "num_requests": 2, "arrival_ms": (0.0, float("inf"))}, "arrival_ms", "sorted finite"),
])
def test_workload_sizes_beyond_the_limits_name_the_limit(kwargs, field, text):
    with pytest.raises(ConfigError) as e:
        Workload(**kwargs)
    assert e.value.field == field and text in str(e.value)


# ---- arrivals file -----------------------------------------------------------------------------------------------


def test_arrivals_file_gives_every_request_its_time_and_length(tmp_path, setup):
    path = tmp_path / "arrivals.json"
    path.write_text('{"arrival_ms": [0, 250.5, 250.5, 4000], "output_tokens": [8, 1, 30, 64]}')
    wl = read_arrivals(str(path), max_batch=2, prompt_tokens=16)
    assert wl.kind == "arrivals" and wl.num_requests == 4 and wl.max_batch == 2
    assert wl.arrival_ms == (0.0, 250.5, 250.5, 4000.0) and wl.output_lengths == (8, 1, 30, 64)
    profile, plan = setup
    m = simulate(profile, plan.replace(batch_size=2), workload=wl).metrics
    assert m.sequences == 4 and m.output_tokens == 103


@pytest.mark.parametrize("text, message", [
    ('{"arrival_ms": [0, 5, 3]}', "arrival_ms[2] = 3.0: times must be finite, >= 0 (ms) and sorted"),
    ('{"arrival_ms": [0, -1]}', "arrival_ms[1] = -1.0"),
    ('{"arrival_ms": [0, 1e999]}', "arrival_ms[1] = inf: times must be finite"),
    ('{"arrival_ms": [0, "Infinity"]}', "arrival_ms[1] = inf: times must be finite"),  # as the literal
    ('{"arrival_ms": [0, 1e308]}', "arrival_ms[1] = 1e+308 ms is past 2**42 ms (~139 years)"),
    ('{"arrival_ms": [0, 4.4e12]}', "arrival_ms[1] = 4.4e+12 ms is past 2**42 ms"),
    ('{"arrival_ms": [0, "5"]}', "arrival_ms[1] = '5' is not a number"),
    ('{"arrival_ms": []}', "arrival_ms must be a list of 1..1000000 numbers"),
    ('{"times": [0]}', "arrival_ms must be a list"),
    ('{"arrival_ms": [0, 1], "output_tokens": [5]}', "1 output_tokens for 2 arrival_ms"),
    ('{"arrival_ms": [0], "output_tokens": [0]}', "output_tokens[0] = 0 must be an integer in 1..2097152"),
    ('{"arrival_ms": [0], "output_tokens": [2.5]}', "output_tokens[0] = 2.5 must be an integer"),
])
def test_bad_arrivals_files_name_the_entry(tmp_path, text, message):
    path = tmp_path / "arrivals.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        read_arrivals(str(path), max_batch=2)
    assert e.value.field == "arrivals" and str(path) in str(e.value) and message in str(e.value)


def test_workloads_whose_arrivals_pass_the_float_clock_bound_are_refused():
    with pytest.raises(ConfigError, match=r"arrival_ms: arrival_ms\[1\] = 1e\+308 ms is past 2\*\*42 ms"):
        Workload("arrivals", 2, 1, arrival_ms=(0.0, 1e308))
    with pytest.raises(ConfigError, match="rate: --rate 1e-06 requests/s spaces 1000000 requests over ~3.17e"):
        poisson(1e-6, 10**6, 4)
    assert poisson(1e-6, 8, 4).rate == 1e-6  # 93 days: allowed (the CLIs warn)
