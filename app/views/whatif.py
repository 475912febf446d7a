"""What-if page: knobs in the sidebar; predicted tok/s (analytic at once, simulator on request), the
fan-out beside uniform, a speedup heatmap, hit rate vs budget and the backup crossover with b*."""

from __future__ import annotations

import math

import streamlit as st

from app import charts, compute, sim, state
from ssd_sim.cli.growth import growth, growth_line
from ssd_sim.model.drift import HORIZONS, SHIPPED_DRIFTS
from ssd_sim.plan.intervals import horizon_note, uncertainty_of
from ssd_sim.plan.plan import BACKUPS
from ssd_sim.plan.planner import OBJECTIVES, BStar, PlanRequest, SearchLimits, make_plan
from ssd_sim.plan.whatif import fanout_comparison

P = state.PREFIX


def _optimise() -> None:
    """Button callback: load the knobs of make_plan's plan for the current profile and workload."""
    sc = state.current()
    if sc is None:
        return
    ss = st.session_state
    # Only the best plan's K, budget, C and backup are loaded (the page computes its own b*): top_n=1 skips
    # building the runner-up plans, which never change the best one.
    request = PlanRequest(batch_size=int(ss[P + "b"]), temperature=float(ss[P + "T"]), draft_devices=int(ss[P + "dd"]),
                          objective=ss[P + "objective"], limits=SearchLimits(top_n=1), b_star=BStar.CHOSEN)
    res = make_plan(sc.profile, request)
    ss[P + "K"], ss[P + "B"], ss[P + "C"] = res.plan.K, res.plan.budget, res.plan.saguaro_c
    ss[P + "backup"], ss[P + "uniform"] = str(res.plan.backup), False  # the widget holds plain strings


def _reset_overrides() -> None:
    st.session_state[P + "overridden"] = []


def workload_widgets(side) -> None:
    side.header("Workload")
    side.slider("temperature", 0.0, 2.0, step=0.1, key=P + "T",
                help="sampling temperature of target and draft (0 = greedy); picks the acceptance point")
    side.slider("batch size b", 1, 128, key=P + "b", help="sequences decoded together (sequences)")
    side.slider("draft devices", 1, 8, key=P + "dd",
                help="accelerators running the draft; the cache budget's branch rows are split over them")


def knob_widgets(side, greedy: bool) -> None:
    side.header("Plan knobs")
    side.slider("K (num_speculative_tokens)", 1, 12, key=P + "K", help="draft tokens proposed per round (tokens)")
    side.slider("cache budget", 1, 128, key=P + "B",
                help="bonus-token guesses cached per sequence per round (sum of fan_out); the fan-out is the "
                     "exactly optimal integer allocation of this budget unless 'uniform' is on")
    side.toggle("uniform fan-out", key=P + "uniform",
                help="the reference engine's default: F = round(budget / (K+1)) guesses at every position")
    side.slider("saguaro_c", 0.05, 1.0, step=0.05, key=P + "C", disabled=greedy,
                help="Saguaro down-weight C of the cached tokens in [0, 1] (1 = plain sampling); "
                     "ignored at temperature 0")
    side.radio("backup", BACKUPS, key=P + "backup", horizontal=True,
               help="on a cache miss: jit = neural redraft, fast = random tokens (near-free), "
                    "adaptive = jit below b*, fast from b* on")
    side.selectbox("objective", OBJECTIVES, key=P + "objective",
                   help="latency: tok/s per sequence; throughput-per-device: total tok/s / accelerators used")
    side.button("optimise (make_plan)", on_click=_optimise, key="btn_optimise", type="primary",
                help="search K, budget, fan-out, C and backup for this profile and workload and load them")


def override_widgets(side) -> None:
    side.header("Model overrides")
    moved = st.session_state.get(P + "overridden", [])
    side.caption("sliders show the profile's values until you move them; moved: "
                 + (", ".join(moved) if moved else "none"))
    specs = [
        ("acceptance", "acceptance_rate α", 0.3, 0.99, 0.01,
         "per-token draft acceptance at this temperature with plain sampling (C = 1)"),
        ("r", "hit-curve exponent r", 0.05, 3.0, 0.05, "power law miss(F) = c F^-r of the bonus-token guesses"),
        ("miss_at_one", "miss rate with one guess c", 0.0, 1.0, 0.01,
         "1 - P(bonus token = the draft's top guess), F = 1"),
        ("draft_latency_ratio", "draft / target latency ratio", 0.005, 1.0, 0.005,
         "one draft decode step / one target decode step, both at 1 sequence (draft(1,1) / target(1,1))"),
    ]
    for name, label, lo, hi, step, help_ in specs:
        value = st.session_state.get(P + name)
        if isinstance(value, (int, float)) and math.isfinite(value):  # a calibrated profile may lie outside the
            lo, hi = min(lo, float(value)), max(hi, float(value))       # usual range (r = 7.4 from logged ranks)
        side.slider(label, lo, hi, step=step, key=P + name, on_change=state.mark_overridden, args=(name,),
                    help=help_)
    side.button("reset to profile", on_click=_reset_overrides, key="btn_reset", disabled=not moved)


def metrics_row(res, sim_rates: dict | None) -> None:
    ar, sd, ssd = res.ar, res.sd, res.ssd
    cols = st.columns(5)
    cols[0].metric("autoregressive", f"{ar.per_seq_tok_s:.1f} tok/s", help="tok/s per sequence")
    cols[1].metric(f"SD (best K = {sd.num_speculative_tokens})", f"{sd.per_seq_tok_s:.1f} tok/s",
                   f"{sd.per_seq_tok_s / ar.per_seq_tok_s:.2f}x AR", help="synchronous SD, K searched 1..10")
    cols[2].metric("SSD (this plan)", f"{ssd.per_seq_tok_s:.1f} tok/s",
                   f"{ssd.per_seq_tok_s / sd.per_seq_tok_s:.2f}x SD", help="tok/s per sequence")
    cols[3].metric("p_hit", f"{ssd.p_hit:.3f}", help=f"per-sequence cache-hit probability; whole batch "
                   f"{ssd.p_all_hit:.3f}")
    cols[4].metric("b*", "never" if math.isinf(res.b_star) else f"{res.b_star:g}",
                   help="batch size from which the fast backup beats jit (planner.critical_batch); "
                        f"closed form {res.b_star_closed_form:.2f}")
    rows = []
    for p in (ar, sd, ssd):
        row = {"mode": p.mode.upper(), "K": p.num_speculative_tokens, "tok/s per seq": round(p.per_seq_tok_s, 2),
               "total tok/s": round(p.total_tok_s, 2), "devices": p.devices,
               "tok/s per device": round(p.tok_s_per_device, 2), "tokens/round": round(p.tokens_per_round, 3),
               "round ms": round(p.round_ms, 3)}
        if sim_rates:
            row["simulated tok/s per seq"] = round(sim_rates[p.mode], 2) if p.mode in sim_rates else None
        rows.append(row)
    st.dataframe(rows, hide_index=True, width="stretch")
    st.caption(f"cache budget {res.plan.budget} guesses per sequence; {fit_text(res.budget_fit)} inside one verify "
               f"at b = {res.plan.batch_size}. SSD: E_hit {ssd.e_hit:.2f}, E_miss {ssd.e_miss:.2f} tokens; "
               f"T_v {ssd.verify_ms:.2f} ms, T_p {ssd.draft_ms:.2f} ms, backup ({ssd.backup}) {ssd.backup_ms:.2f} ms")


def fit_text(fit: int) -> str:
    """The budget the draft finishes inside one verify, in words (the caption's and the budget chart's number)."""
    return f"the draft finishes up to {fit}" if fit else "the draft finishes not even a budget of 1"


def simulate_button(sc, res, lengths: tuple | None = None) -> dict | None:
    """Simulator on request; the result is kept for this scenario only (lengths: sim.run's)."""
    key = compute.key_of(sc.profile, sc.plan, lengths=lengths[1:] if lengths else None)
    if not sim.available():
        st.info(f"simulator not available ({sim.missing_reason()}); analytic predictions only")
        return None
    if st.button("simulate (discrete-event)", key="btn_simulate",
                 help=f"run the SimPy simulator for AR, SD and SSD ({sim.TOKENS} tokens per sequence)"):
        with st.spinner("simulating..."):
            st.session_state["sim_result"] = (key, sim.rates(sc.profile, sc.plan, res.sd.num_speculative_tokens,
                                                             lengths=lengths))
    stored = st.session_state.get("sim_result")
    return stored[1] if stored and stored[0] == key else None


HORIZON_LABEL = {"session": "within the hour", "later": "hours later"}


def horizon_choice(profile, where) -> str:
    """Which run the intervals are for (model.drift's horizons): a choice only where the profile measured a session
    spread (calibrated profiles); "later" otherwise."""
    if uncertainty_of(profile).latency_session_sd is None:
        return "later"
    return where.radio("intervals for a run", HORIZONS, index=HORIZONS.index("later"), horizontal=True,
                       key="horizon", format_func=HORIZON_LABEL.get,
                       help="the run-to-run drift grows with the time since the profile's latencies were timed: "
                            f"{SHIPPED_DRIFTS['session'].sd:.1%} within the hour, {SHIPPED_DRIFTS['later'].sd:.1%} "
                            "hours later (measured by repeat runs, bench/drift.py; a run's drift is predicted by "
                            "Student's t on their few degrees of freedom: "
                            f"{SHIPPED_DRIFTS['session'].predictive_sd():.1%} and "
                            f"{SHIPPED_DRIFTS['later'].predictive_sd():.1%})")


def charts_grid(sc, res, sim_rates) -> None:
    """The charts, cheapest first: Streamlit streams them in order, so the heatmap (a Saguaro response per
    acceptance row the first time a C < 1 is seen at a temperature > 0: ~30 ms) comes last."""
    key = compute.key_of(sc.profile, sc.plan)
    left, right = st.columns(2)
    horizon = horizon_choice(sc.profile, left)
    u = compute.uncertainty(key, sc.profile, sc.plan, res.sd.num_speculative_tokens, horizon)
    left.plotly_chart(charts.tok_s_bars({"ar": res.ar.per_seq_tok_s, "sd": res.sd.per_seq_tok_s,
                                         "ssd": res.ssd.per_seq_tok_s}, sim_rates,
                                        {m: (u[m]["low"], u[m]["high"]) for m in ("ar", "sd", "ssd")}), key="ch_tok",
                      config=charts.CONFIG)
    left.caption(f"error bars: {u['ar']['level']:.0%} intervals over the profile's uncertainty. SSD beats SD with "
                 f"probability {u['p_ssd_beats_sd']:.2f}; recommended: {u['recommended_mode'].upper()} "
                 f"(the highest mean over the draws{'; a close call' if u['close_call'] else ''}). Largest uncertainty: "
                 f"{u['dominant_uncertainty']} ({u['settle']}).")
    if u["session_spread_measured"]:
        left.caption(horizon_note(u))
    fo = fanout_comparison(sc.profile, sc.plan)
    right.plotly_chart(charts.fanout_bars(fo["k"], fo["fan_out"], fo["uniform"], fo["p_hit"], fo["p_hit_uniform"]),
                       key="ch_fanout", config=charts.CONFIG)
    left, right = st.columns(2)
    fit = res.budget_fit  # one number for the caption above and the chart's "fits in one verify" line
    hv = compute.hit_vs_budget(key, sc.profile, sc.plan, budget_axis(sc.plan.budget, fit))
    left.plotly_chart(charts.hit_vs_budget(hv["budgets"], hv["optimal"], hv["uniform_budgets"], hv["uniform"],
                                           sc.plan.budget, fit), key="ch_budget", config=charts.CONFIG)
    cx = compute.crossover(key, sc.profile, sc.plan)
    right.plotly_chart(charts.backup_crossover(cx["batch_sizes"], cx["jit"], cx["fast"], cx["b_star"],
                                               sc.plan.batch_size), key="ch_backup", config=charts.CONFIG)
    left, right = st.columns(2)
    right.markdown(
        f"**Plan**: K={sc.plan.K}, fan_out={list(sc.plan.fan_out)}, fan_out_miss={list(sc.plan.fan_out_miss)}, "
        f"saguaro_c={sc.plan.saguaro_c:g}, backup={sc.plan.backup}"
        + (f" (b*={sc.plan.backup_threshold:g})" if sc.plan.backup == "adaptive" else "")
        + f"\n\n**b\\*** = {_fmt_b(cx['b_star'])} (closed form, latencies at b=1: {cx['b_star_closed_form']:.2f}). "
        "The heatmap keeps this plan's K, fan-out, C and backup and varies the acceptance rate α (one rate per "
        "token, plain sampling; Saguaro C moves it as in the profile) and the draft/target latency ratio. "
        "Open **Plan** for the plan file and engine flags.")
    base = right.radio("heatmap baseline", ["ar", "sd"], horizontal=True, key=P + "hm_base",
                       format_func=lambda b: "autoregressive" if b == "ar" else "SD at the plan's K")
    hm = compute.heatmap(key, sc.profile, sc.plan, base)
    left.plotly_chart(charts.speedup_heatmap(hm["rows"], hm["cols"], hm["z"], base.upper(), hm["marker"]),
                      key="ch_heat", config=charts.CONFIG)
    right.caption(heatmap_caption(hm, res, base))


def budget_axis(budget: int, fit: int, least: int = 128) -> int:
    """The largest budget the hit-rate chart shows: 128, or more so that the plan's budget and what fits inside one
    verify are both on it."""
    return max(least, budget, fit)


def heatmap_caption(hm: dict, res, base: str) -> str:
    """What the circled cell is, quoting its printed value (the same z cell the chart prints)."""
    i, j = hm["marker"]
    cell = charts.speedup_text(hm["z"][i][j])
    if base == "ar":
        quote = f"SSD {res.ssd.per_seq_tok_s:.1f} / AR {res.ar.per_seq_tok_s:.1f} tok/s above"
    else:
        quote = f"SSD {res.ssd.per_seq_tok_s:.1f} tok/s over SD at K = {res.plan.K} (the metric above compares with the best K)"
    return (f"Boxed: this profile (its own per-position acceptance, mean α {hm['acceptance']:.3f}; latency ratio "
            f"{hm['ratio']:.3g}): **{cell}x** {base.upper()} = {quote}. The other rows pin one acceptance rate per "
            "token, as the α override does.")


def _fmt_b(b: float) -> str:
    return "never (jit wins)" if math.isinf(b) else f"{b:g}"


def render() -> None:
    sc = state.page_scenario("What-if")
    if sc is None:
        return
    side = st.sidebar
    workload_widgets(side)
    knob_widgets(side, greedy=float(st.session_state[P + "T"]) == 0.0)
    override_widgets(side)
    st.caption(state.describe(sc))
    lengths = st.session_state.get("_lengths") if not sc.overrides else None
    if lengths:  # the plan's round over the growing context (as ssd-plan with lengths)
        source, prompt, output = lengths
        g = growth(source, prompt, output, 1, sc.plan, modes=("ssd",))["ssd"]
        st.caption(growth_line("ssd", g, prompt, output, sc.plan.batch_size, "the analytic numbers below are at the "
                                                                              "mean context; simulate decodes requests "
                                                                              "of these lengths, each round at its "
                                                                              "batch's context"))
    res = compute.evaluate(compute.key_of(sc.profile, sc.plan), sc.profile, sc.plan, sc.objective)
    sim_rates = simulate_button(sc, res, lengths)
    metrics_row(res, sim_rates)
    charts_grid(sc, res, sim_rates)


render()
