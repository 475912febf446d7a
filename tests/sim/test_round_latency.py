"""ssd_sim.sim.round_latency: a round's phases per batch size, and at the batch's mean KV context."""

from __future__ import annotations

import numpy as np
import pytest

from ssd_sim.cli.growth import profile_at
from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.plan import Plan
from ssd_sim.sim.round_latency import BUILT_KEPT, ContextLatency, RoundLatency, round_latency

PLAN = Plan(num_speculative_tokens=5, fan_out=(2, 1, 1, 1, 1, 1), fan_out_miss=(6, 0, 0, 0, 0, 1), batch_size=32,
            backup="jit", temperature=0.0)
SOURCES = {"Llama 70B + 1B on 4x H200 (preset)": {"preset": "llama70b-1b-h200"},
           "Qwen3-32B + 0.6B on 4x H100 (preset)": {"preset": "qwen32b-0.6b-h100"},
           "Llama-3.1-8B + 3.2-1B on an L40S (specs)": {"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B",
                                                                 "gpu": "l40s", "tp": 1}}}


def _contexts(source: dict, lo: int = 100, hi: int = 32_000, max_batch: int = 64) -> ContextLatency:
    def at(c):
        return profile_at(source, c)
    return ContextLatency(RoundLatency(at(1000).latency, PLAN, max_batch), at, PLAN, max_batch, lo, hi)


@pytest.mark.parametrize("name", list(SOURCES))
def test_every_phase_at_any_context_is_within_0_1pct_of_the_profile_built_there(name):
    # Kinks included: at b = 64 the branch decode (448 rows) turns from compute- to memory-bound near 150 tokens,
    # where 17 evenly spaced tables had interpolated 16% too slow.
    source, ctx = SOURCES[name], _contexts(SOURCES[name])
    worst = 0.0
    for c in (100, 137, 150, 163, 312, 999, 4321, 17_777, 31_999, 32_000):
        truth = RoundLatency(profile_at(source, c).latency, PLAN, 64)
        for b in (1, 8, 32, 64):
            got, want = np.array(ctx.at(b, c)), np.array(truth.at(b))
            worst = max(worst, float(np.max(np.abs(got - want) / want)))
            assert ctx.jit_ms(b, c) == pytest.approx(truth.jit_ms(b), rel=1e-3)
            assert ctx.branch_ms(b * 7, c) == pytest.approx(truth.branch_ms(b * 7), rel=1e-3)
    assert worst < 1e-3


def test_the_kv_reads_make_a_round_slower_as_the_context_grows():
    ctx = _contexts(SOURCES["Llama 70B + 1B on 4x H200 (preset)"])
    for field in ("step", "verify", "sd_draft", "primary"):
        values = [getattr(ctx.at(32, c), field) for c in (100, 1_000, 10_000, 32_000)]
        assert values == sorted(values) and values[-1] > 1.1 * values[0], field


def test_contexts_outside_the_tables_take_the_nearest_end():
    ctx = _contexts(SOURCES["Qwen3-32B + 0.6B on 4x H100 (preset)"], lo=500, hi=2_000)
    assert ctx.at(8, 1) == ctx.at(8, 500) and ctx.at(8, 10**6) == ctx.at(8, 2_000)
    assert ctx.jit_ms_each(np.array([3, 3]), np.array([1.0, 10.0**6])).tolist() == [ctx.jit_ms(3, 500),
                                                                                    ctx.jit_ms(3, 2_000)]


def test_the_vectorised_jit_backup_equals_the_one_round_lookup():
    ctx = _contexts(SOURCES["Llama 70B + 1B on 4x H200 (preset)"])
    rows, cs = np.array([0, 1, 5, 64, 17]), np.array([100.0, 250.5, 4_000.0, 31_000.0, 32_000.0])
    np.testing.assert_allclose(ctx.jit_ms_each(rows, cs), [ctx.jit_ms(int(r), float(c)) for r, c in zip(rows, cs, strict=True)],
                               rtol=1e-12)


def test_one_context_gives_one_table_and_the_base_round_latency_ignores_the_context():
    profile = get_preset("llama70b-1b-h100")
    base = RoundLatency(profile.latency, PLAN, 4)
    assert base.at(3, 10.0) == base.at(3, 10_000.0) and not base.varies
    one = ContextLatency(base, lambda c: profile, PLAN, 4, 700, 700)
    assert one.nodes == [700] and one.at(3, 5.0) == base.at(3)


def test_an_empty_context_range_is_refused():
    profile = get_preset("llama70b-1b-h100")
    with pytest.raises(ConfigError, match="^context: needs 1 <= shortest <= longest"):
        ContextLatency(RoundLatency(profile.latency, PLAN, 4), lambda c: profile, PLAN, 4, 0, 10)


SLIDING = {"gpt-oss-120b + 20b on 4x H100 (128-token windows)": {"spec": {"target": "gpt-oss-120b",
                                                                          "draft": "gpt-oss-20b", "gpu": "h100-sxm",
                                                                          "tp": 4}},
           "Gemma 2 9B + 2B on an L40S (4096-token windows)": {"spec": {"target": "gemma-2-9b", "draft": "gemma-2-2b",
                                                                         "gpu": "l40s", "tp": 1}}}


@pytest.mark.parametrize("name", list(SLIDING))
def test_the_kink_where_the_context_passes_a_sliding_window_is_followed(name):
    # Sliding layers stop reading more KV at their window, so the terms bend there; anchors are added around it.
    source = SLIDING[name]
    ctx = _contexts(source, lo=50, hi=20_000, max_batch=16)
    for c in (50, 100, 127, 128, 129, 200, 3_000, 4_095, 4_096, 4_097, 5_000, 19_999):
        truth = RoundLatency(profile_at(source, c).latency, PLAN, 16)
        for b in (1, 16):
            got, want = np.array(ctx.at(b, c)), np.array(truth.at(b))
            assert np.max(np.abs(got - want) / want) < 1e-3, (c, b)


def test_anchors_close_in_on_a_kink_anywhere_and_stay_at_powers_of_two_where_the_terms_are_linear():
    from dataclasses import replace

    from ssd_sim.sim.round_latency import _anchors

    base = get_preset("llama70b-1b-h100")

    def at(c):  # KV read per row linear up to a 3000-token window, flat beyond
        lat = base.latency
        return replace(base, latency=replace(lat, target=replace(lat.target, row_ms=1e-5 * min(c, 3000))))

    anchors, _ = _anchors(at, 100, 10_000)
    assert [c for c in anchors if c in (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)] == [
        64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    assert min(abs(c - 3000) for c in anchors) <= 1  # halved in log context down to the kink
    linear, _ = _anchors(lambda c: base, 100, 10_000)
    assert len(linear) == 2 * 9 - 1  # the powers of two and one checked middle between each two


def test_round_latency_builds_each_latency_and_plan_once_and_never_serves_another_latency():
    lat = get_preset("llama70b-1b-h200").latency
    first = round_latency(lat, PLAN, 8)
    assert round_latency(lat, PLAN, 8) is first  # the same tables, not rebuilt
    assert round_latency(lat, PLAN, 16) is not first and round_latency(lat, PLAN.replace(temperature=1.0), 8) is not first
    other = get_preset("qwen32b-0.6b-h100").latency
    got = round_latency(other, PLAN, 8)
    assert got is not first and got.verify == RoundLatency(other, PLAN, 8).verify
    for b in range(BUILT_KEPT + 1):  # the oldest entries leave; a latency asked for again is rebuilt, equal
        round_latency(lat, PLAN, b + 20)
    again = round_latency(lat, PLAN, 8)
    assert again is not first and again.costs == first.costs


def test_sd_and_ssd_rounds_carry_the_wakes_of_their_idle_waits():
    from ssd_sim.model.latency import ForwardLatency, LatencyModel

    wakes = {"target_after_idle": ((5.0, 40.0),), "draft_after_idle": ((5.0, 20.0),)}
    lat = LatencyModel(ForwardLatency(fixed_ms=300.0), ForwardLatency(fixed_ms=100.0), **wakes)
    sd = RoundLatency(lat, Plan(mode="sd", num_speculative_tokens=3, batch_size=1), 1).at(1)
    assert (sd.verify, sd.sd_draft) == (340.0, 320.0)  # the target slept through 300 ms of drafting, the draft 300
    ssd = RoundLatency(lat, Plan(mode="ssd", num_speculative_tokens=2, fan_out=(0, 0, 1), batch_size=1), 1).at(1)
    # glue 100 + branch 2 x 100 = the verify's 300 ms: each side waits only the (0 ms) transfer -> no wake
    assert (ssd.verify, ssd.primary, ssd.primary_glue) == (300.0, 300.0, 100.0)
    ar = RoundLatency(lat, Plan(mode="ar", batch_size=1), 1).at(1)
    assert ar.step == 300.0
