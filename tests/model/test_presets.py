"""Presets derive profiles that reproduce their typed-in measurements."""

import pytest

from ssd_sim.model.latency import workload_ms
from ssd_sim.model.presets import get_preset, list_presets, preset_source
from ssd_sim.model.profile import Profile
from ssd_sim.theory.analytic import expected_tokens
from ssd_sim.theory.fanout import integer_fanout, miss_rate


def test_every_preset_derives_and_round_trips():
    names = list_presets()
    assert {"llama70b-1b-h100", "qwen32b-0.6b-h100", "llama70b-1b-h200"} <= set(names)
    for name in names:
        p = get_preset(name)
        assert p.sources and p.provenance
        assert Profile.from_dict(p.to_dict()) == p


def test_llama_preset_reproduces_ar_and_sd_throughput():
    p = get_preset("llama70b-1b-h100")
    lat = p.latency
    assert 1e3 / lat.ar_step_ms(1) == pytest.approx(54.7, rel=1e-6)
    a = p.acceptance.at(0.0).acceptance[0]
    sd = expected_tokens(a, 6) / (lat.verify_ms(1, 6) + lat.sd_draft_ms(1, 6)) * 1e3
    assert sd == pytest.approx(161.8, rel=1e-6)


def test_llama_draft_fit_matches_measured_ssd_steps_within_5_percent():
    p = get_preset("llama70b-1b-h100")
    st = preset_source("llama70b-1b-h100")["draft"]["ssd_step"]
    for b, ms in zip(st["batch"], st["ms"], strict=True):
        pred = workload_ms(p.latency.draft, [(b, 7, 1), (b * 21, 1, 6)])
        assert pred == pytest.approx(ms, rel=0.05)


def test_llama_hit_model_reproduces_measured_hit_rates():
    p = get_preset("llama70b-1b-h100")
    for T, want in ((0.0, 0.86), (1.0, 0.63)):
        pt = p.acceptance.at(T)
        a, h = pt.acceptance[0], pt.primary_hit
        fan = integer_fanout(24, a, 7, h.r, h.miss_at_one)
        assert 1 - miss_rate(fan, a, h.r, h.miss_at_one) == pytest.approx(want, abs=1e-4)


def test_h200_preset_is_pure_roofline_from_specs():
    p = get_preset("llama70b-1b-h200")
    # 70.6B bf16 over 2 H200 at 4.8 TB/s
    assert p.latency.target.memory_ms == pytest.approx(70.6e9 * 2 / 2 / 4.8e12 * 1e3)
    assert p.acceptance == get_preset("llama70b-1b-h100").acceptance


def test_assumed_draft_terms_copied_from_the_llama_fit_are_current():
    fit = get_preset("llama70b-1b-h100").latency.draft
    for name in ("qwen32b-0.6b-h100", "llama70b-1b-h200"):
        d = get_preset(name).latency.draft
        assert d.token_ms == pytest.approx(fit.token_ms, rel=0.01)
        assert d.token_exponent == pytest.approx(fit.token_exponent, rel=0.01)


@pytest.mark.parametrize("name", ["qwen-coder-1.5b-0.5b-cpu", "qwen-coder-1.5b-0.5b-cpu-dense"])
def test_cpu_presets_fit_measured_forwards_within_10_percent(name):
    p = get_preset(name)
    src = preset_source(name)
    for role, model in (("target", p.latency.target), ("draft", p.latency.draft)):
        for rows, tokens, ms in src[role]["forwards"]:
            assert model(rows, tokens) == pytest.approx(ms, rel=0.10)


def test_measured_cpu_preset_plans_what_the_real_grid_found_best():
    from ssd_sim.plan.planner import make_plan

    r = make_plan(get_preset("qwen-coder-1.5b-0.5b-cpu"), 1, 0.0)
    assert (r.plan.K, r.plan.fan_out) == (3, (0, 0, 0, 1))  # traces/cpu-fp32-grid: 5.19 tok/s, the fastest run
    assert r.ar.per_seq_tok_s == pytest.approx(1e3 / (367.3 + 0.21), rel=0.03)  # measured AR step
