"""The discrete-event simulator (ssd_sim.sim.des) as the pages use it, optional: without it the pages show
a note and the analytic numbers only."""

from __future__ import annotations

import streamlit as st

from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan

TOKENS = 4000  # output tokens per sequence for "simulate" (a few hundred to a thousand rounds)


def _import():
    try:
        from ssd_sim.sim.des import simulate
        from ssd_sim.sim.workload import fixed_batch
    except ImportError as e:  # the simulator is optional for the dashboard
        return None, str(e)
    return (simulate, fixed_batch), ""


def available() -> bool:
    """Whether ssd_sim.sim.des can be imported."""
    return _import()[0] is not None


def missing_reason() -> str:
    return _import()[1] or "ok"


def sd_plan(plan: Plan, K: int) -> Plan:
    """The plan with another K and default fan-outs (SD ignores fan-out): for simulating best-K SD."""
    return plan.replace(num_speculative_tokens=K, fan_out=(1,) * (K + 1), fan_out_miss=(1,) * (K + 1))


def run(profile: Profile, plan: Plan, mode: str, tokens: int = TOKENS, seed: int = 0, timeline: bool = False,
        lengths: tuple | None = None):
    """simulate() on a fixed batch of plan.batch_size sequences without prefill (steady-state decoding); with
    lengths (source, prompt, output tokens: the sidebar's workload lengths) batches of requests of those lengths, at
    least `tokens` per sequence slot, each round at its batch's context (as ssd-plan --simulate with lengths)."""
    (simulate, fixed_batch), _ = _import()
    if lengths is None:
        wl = fixed_batch(plan.batch_size, tokens, prompt_tokens=0)
        return simulate(profile, plan, mode=mode, seed=seed, workload=wl, timeline=timeline)
    from ssd_sim.cli.growth import ProfileAt
    from ssd_sim.sim.workload import refilled_batches

    source, prompt, output = lengths
    wl = refilled_batches(plan.batch_size, output, prompt, tokens)
    return simulate(profile, plan, mode=mode, seed=seed, workload=wl, timeline=timeline, profile_at=ProfileAt(source))


@st.cache_data(max_entries=32, show_spinner=False)
def _rates(key: str, _profile: Profile, _plan: Plan, sd_K: int, tokens: int, _lengths: tuple | None) -> dict[str, float]:
    out = {}
    for mode, plan in (("ar", _plan), ("sd", sd_plan(_plan, sd_K)), ("ssd", _plan)):
        out[mode] = run(_profile, plan, mode, tokens, lengths=_lengths).metrics.per_seq_tok_s
    return out


def rates(profile: Profile, plan: Plan, sd_K: int, tokens: int = TOKENS, lengths: tuple | None = None) -> dict[str, float]:
    """Simulated tok/s per sequence of AR, SD (at sd_K) and SSD (this plan), seed 0 (lengths: see run)."""
    from app.compute import key_of

    key = key_of(profile, plan, sd_K=sd_K, tokens=tokens, lengths=lengths[1:] if lengths else None)
    return _rates(key, profile, plan, sd_K, tokens, lengths)


@st.cache_data(max_entries=16, show_spinner=False)
def _trace_run(key: str, _profile: Profile, _plan: Plan, tokens: int) -> dict:
    return run(_profile, _plan, _plan.mode, tokens).metrics.to_dict()


def trace_run(profile: Profile, plan: Plan, tokens: int) -> dict:
    """SimMetrics (as a dict) of simulating a trace's plan (its mode and batch) for `tokens` per sequence."""
    from app.compute import key_of

    return _trace_run(key_of(profile, plan, tokens=tokens), profile, plan, tokens)
