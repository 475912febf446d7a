"""Timeline page: the simulated pipeline of the current plan as a Gantt chart, one row per device."""

from __future__ import annotations

import json

import streamlit as st

from app import charts, compute, sim, state
from ssd_sim.sim.timeline import timeline_rounds

MODES = {"ssd": "SSD (this plan)", "sd": "SD (this K)", "ar": "autoregressive"}


@st.cache_data(max_entries=16, show_spinner=False)
def simulate_timeline(key: str, _profile, _plan, mode: str, rounds: int, seed: int) -> dict:
    """Simulate enough tokens for `rounds` rounds and keep the spans of the first `rounds` rounds."""
    tokens = (_plan.K + 1) * rounds + 1 if mode != "ar" else rounds + 1
    plan = sim.sd_plan(_plan, _plan.K) if mode == "sd" else _plan
    res = sim.run(_profile, plan, mode, tokens=tokens, seed=seed, timeline=True)
    spans = [s for s in res.timeline if 0 <= s.round < rounds]
    return {"spans": [s._asdict() for s in spans], "devices": list(res.devices), "labels": dict(res.labels),
            "rounds": timeline_rounds(spans) if mode == "ssd" else [], "metrics": res.metrics.to_dict(),
            "chrome_trace": res.chrome_trace()}


def render() -> None:
    sc = state.page_scenario("Timeline")
    if sc is None:
        return
    st.caption(state.describe(sc) + " (change it on the What-if page)")
    if not sim.available():
        st.info(f"the simulator (ssd_sim.sim.des) is not available: {sim.missing_reason()}")
        return
    c1, c2, c3 = st.columns(3)
    mode = c1.radio("mode", list(MODES), format_func=MODES.get, horizontal=True, key="tl_mode")
    rounds = c2.slider("rounds shown", 5, 100, 30, key="tl_rounds", help="decode rounds (target verifications)")
    seed = c3.number_input("seed", 0, 10_000, 0, key="tl_seed", help="simulator random seed")
    with st.spinner("simulating..."):
        tl = simulate_timeline(compute.key_of(sc.profile, sc.plan, mode=mode), sc.profile, sc.plan, mode,
                               int(rounds), int(seed))
    spans = [{**s, "device": tl["labels"].get(s["device"], s["device"])} for s in tl["spans"]]
    devices = [tl["labels"].get(d, d) for d in tl["devices"]]
    fig = charts.gantt(spans, devices, f"simulated {MODES[mode]}: first {rounds} rounds")
    if tl["rounds"]:
        charts.round_markers(fig, tl["rounds"], devices[0])
    st.plotly_chart(fig, key="ch_gantt", config=charts.CONFIG)
    m = tl["metrics"]
    cols = st.columns(4)
    cols[0].metric("simulated tok/s per seq", f"{m['per_seq_tok_s']:.1f}")
    cols[1].metric("mean round", f"{m['round_ms']:.2f} ms")
    hits = [r["hit"] for r in tl["rounds"]]
    cols[2].metric("all-hit rounds shown", f"{sum(hits)}/{len(hits)}" if hits else "-",
                   help="rounds without a backup: every sequence's lookup hit (the first round always misses)")
    wait = m.get("target_wait_share")
    cols[3].metric("target waits", "-" if wait is None else f"{wait:.1%}",
                   help="share of the time the target waits for the draft's reply")
    st.caption("Bars: target verify / wait; draft request, lookup, backup (a miss), reply, glue, branch decode. "
               "Markers on the target row: ▼ every sequence hit, × some missed.")
    st.download_button("download Chrome trace (ui.perfetto.dev)", json.dumps(tl["chrome_trace"]),
                       file_name=f"ssd-{mode}-timeline.json", mime="application/json", key="dl_chrome")


render()
