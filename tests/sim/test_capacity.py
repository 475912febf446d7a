"""ssd_sim.sim.capacity: SLO accounting on hand-computed cases, the search against brute force on a small load,
the pool giving the same results as one process, the overload line."""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.sim.capacity import (
    SSD_BACKUPS,
    Capacity,
    Config,
    Load,
    Targets,
    meets,
    overload_line,
    search,
    slo_values,
)
from ssd_sim.sim.des import simulate
from ssd_sim.sim.workload import arrivals, poisson

PROFILE = get_preset("llama70b-1b-h100")


def test_percentiles_are_linear_and_margins_are_headroom():
    t = Targets(ttft_ms=30.0, tpot_ms=5.0, ttft_pct=50, tpot_pct=100)
    ttft, tpot = slo_values(np.array([10.0, 20.0, 30.0, 40.0]), np.array([4.0, 6.0]), t)
    assert (ttft, tpot) == (25.0, 6.0)
    ok, margins = meets(ttft, tpot, t)
    assert not ok and margins == pytest.approx({"ttft": 1 - 25 / 30, "tpot": 1 - 6 / 5})


def test_targets_need_one_latency_and_sane_percentiles():
    with pytest.raises(ConfigError, match="^targets: give a TTFT or a TPOT target"):
        Targets()
    with pytest.raises(ConfigError, match="^tpot_pct: a percentile in"):
        Targets(tpot_ms=5.0, tpot_pct=0)


def test_a_load_offers_its_tokens_over_its_arrival_span():
    load = Load(np.array([0.0, 500.0, 2000.0]), np.array([100, 100, 200]))
    assert load.offered_tok_s == pytest.approx(400 / 2.0)
    assert len(load.head(2).arrival_ms) == 2 and load.head(10) is load
    assert Load(np.zeros(3), np.ones(3, dtype=int)).offered_tok_s == math.inf


def test_each_request_keeps_its_own_prompt_through_routing_and_the_replicas():
    wl = arrivals([0.0, 10.0, 20.0, 30.0], 2, output_lengths=[8, 8, 8, 8], prompt_lengths=[16, 3000, 16, 3000])
    load = Load.of(wl)
    assert load.prompt_tokens.tolist() == [16, 3000, 16, 3000] and load.head(3).prompt_tokens.tolist() == [16, 3000, 16]
    assert Load(np.zeros(2), np.ones(2, dtype=int), 64).prompt_tokens.tolist() == [64, 64]
    cap = Capacity(PROFILE, load, Targets(ttft_ms=1e4), seed=1)
    short = Capacity(PROFILE, Load(load.arrival_ms, load.output_tokens, 16), Targets(ttft_ms=1e4), seed=1)
    assert cap.evaluate(Config("ar", 2, 2)).ttft_ms > short.evaluate(Config("ar", 2, 2)).ttft_ms  # long prompts prefill


def test_one_replica_s_percentiles_are_the_simulator_s():
    load = Load.of(poisson(rate=4.0, num_requests=60, max_batch=4, output_tokens=32), seed=3)
    cap = Capacity(PROFILE, load, Targets(ttft_ms=1e3, tpot_ms=50.0, ttft_pct=90, tpot_pct=90), seed=7)
    out = cap.evaluate(Config("sd", 1, 4))
    plan, _ = cap.plan("sd", 4, "-")
    wl = arrivals(load.arrival_ms, 4, prompt_tokens=128, output_lengths=load.output_tokens)
    m = simulate(PROFILE, plan, mode="sd", seed=7, workload=wl).metrics
    assert out.ttft_ms == pytest.approx(m.ttft_ms_p90) and out.tpot_ms == pytest.approx(m.tpot_ms_p90)
    assert out.gpus == PROFILE.latency.target_devices


def _small():
    load = Load.of(poisson(rate=30.0, num_requests=240, max_batch=1, output_tokens=48), seed=1)
    return Capacity(PROFILE, load, Targets(ttft_ms=150.0, tpot_ms=7.0), seed=0)


def test_the_search_picks_what_brute_force_picks_on_a_small_case():
    cap, caps, modes, most = _small(), (2, 8), ("sd", "ssd"), 6
    res = search(cap, modes, caps, max_replicas=most)
    brute = [cap.evaluate(Config(m, r, c, b if m == "ssd" else "-"))
             for m in modes for c in caps for b in (SSD_BACKUPS if m == "ssd" else ("-",)) for r in range(1, most + 1)]
    good = [o for o in brute if o.meets]
    assert good and res.best is not None
    fewest = min(o.gpus for o in good)
    assert res.best.gpus == fewest and res.best.meets
    for mode in modes:
        mine = [o.gpus for o in good if o.config.mode == mode]
        assert (res.per_mode[mode].gpus if res.per_mode[mode] else None) == (min(mine) if mine else None)


def test_a_process_pool_gives_the_same_outcomes_as_one_process():
    one = _small().evaluate(Config("ssd", 3, 8, "fast"))
    with ProcessPoolExecutor(max_workers=2) as pool:
        cap = _small()
        cap.mapper = pool.map
        both = cap.evaluate(Config("ssd", 3, 8, "fast"))
    assert (both.ttft_ms, both.tpot_ms, both.tok_s) == (one.ttft_ms, one.tpot_ms, one.tok_s)


def test_overload_is_one_line_at_or_above_capacity_and_silent_below():
    assert overload_line(2_000.0, 2_500.0, "x") is None
    line = overload_line(10_240.0, 2_981.0, "this replica (b <= 16)")
    assert line.startswith("overloaded: the load offers 10,240 output tok/s where this replica (b <= 16) can "
                           "deliver at most 2,981;") and "\n" not in line


def test_more_replicas_than_needed_are_never_chosen():
    cap = _small()
    found, tried = cap.fewest_replicas("ssd", 8, "fast", "round-robin", 6)
    assert found is not None and all(not o.meets for o in tried if o.config.replicas < found.config.replicas)


def test_caps_beyond_the_profile_s_kv_memory_are_not_searched():
    from dataclasses import replace

    cap = _small()
    cap.profile = replace(PROFILE, max_batch_size=4)
    res = search(cap, ("sd",), (2, 4, 8, 16), max_replicas=3)
    assert {o.config.max_batch for o in res.outcomes} <= {2, 4}
    with pytest.raises(ConfigError, match="^batch_caps: every batch cap is above what the KV caches fit"):
        search(cap, ("sd",), (8, 16))


def test_each_mode_searches_only_the_caps_its_kv_caches_fit():
    """8B + 1B on one H100 at 4096 tokens: AR's caches fit 104 sequences, SD's (with the draft's weights and cache
    on the same device) 79, so a cap of 96 is searched for AR and never for SD."""
    from ssd_sim.model.spec_profile import profile_from_specs

    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", "H100-SXM", context=4096)
    cap = Capacity(prof, _small().load, Targets(ttft_ms=150.0, tpot_ms=7.0))
    assert (cap.fits("ar", 96, "-"), cap.fits("sd", 96, "-"), cap.fits("sd", 79, "-"), cap.fits("sd", 80, "-")) == \
        (True, False, True, False)
    res = search(cap, ("ar", "sd"), (16, 96), max_replicas=2)
    assert {(o.config.mode, o.config.max_batch) for o in res.outcomes} <= {("ar", 16), ("ar", 96), ("sd", 16)}
    with pytest.raises(ConfigError, match=r"^batch_caps: every batch cap is above what the KV caches fit \(SD 79 "
                                          r"sequences at most\); give smaller --batch-caps$"):
        search(cap, ("sd",), (96,))


def test_a_ttft_target_below_the_prompts_prefills_is_refused_before_any_search():
    """Every TTFT holds its prompt's prefill (one target forward over it), so a p90 target below the p90 of those
    prefills cannot be met by any configuration; the search would simulate minutes to find none."""
    from ssd_sim.sim.workload import prefill_ms

    cap = _small()
    floor = prefill_ms(PROFILE.latency, 128)  # every prompt of the load holds 128 tokens
    cap.targets = Targets(ttft_ms=0.9 * floor)
    with pytest.raises(ConfigError, match=rf"^ttft_ms: .* the p90 of the requests' prefills alone .* is {floor:.1f} ms"):
        search(cap, ("ar",), (2,))
    cap.targets = Targets(ttft_ms=1.1 * floor)
    assert search(cap, ("ar",), (2,), max_replicas=1) is not None


def test_several_profiles_are_one_search_and_each_outcome_names_its_tp():
    from ssd_sim.model.spec_profile import profile_from_specs

    load = _small().load
    caps = [Capacity(profile_from_specs("Llama-3.1-70B", "Llama-3.2-1B", "H100-SXM", tp=tp), load,
                     Targets(ttft_ms=150.0, tpot_ms=7.0)) for tp in (4, 8)]
    res = search(caps, ("ssd",), (8,), max_replicas=4)
    assert {o.config.tp for o in res.outcomes} <= {4, 8} and res.best is not None
    assert res.best.gpus == res.best.config.replicas * (res.best.config.tp + 1)
    alone = [search(c, ("ssd",), (8,), max_replicas=4).best for c in caps]
    assert res.best.gpus == min(o.gpus for o in alone if o is not None)
