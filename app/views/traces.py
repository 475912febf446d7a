"""Traces page: a runtime trace (traces/<setup>/*.jsonl or an upload): per-round acceptance, hit rate over time,
phase timings, and predicted vs measured for that run on the sidebar's profile."""

from __future__ import annotations

import streamlit as st

from app import charts, sim, state
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import PHASES, Trace, parse_trace, read_trace
from ssd_sim.model.profile import Profile
from ssd_sim.plan.compare import position_curves, predicted_vs_measured, trace_plan, trace_series

NONE = "(choose a trace)"


def trace_files() -> list[str]:
    """Trace files under the traces directory (relative paths), newest layout first by name."""
    d = state.traces_dir()
    return sorted(str(p.relative_to(d)) for p in d.rglob("*.jsonl")) if d.is_dir() else []


def parse_upload(name: str, data: bytes) -> Trace:
    """Parse an uploaded trace in memory; oversized, empty, non-UTF-8 or invalid files raise ConfigError (one line)."""
    state.check_upload(data, name, "trace")
    if not data.strip():
        raise ConfigError("trace", f"{name} is empty; upload a JSONL trace written by ssd-run")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("trace", f"{name} is not UTF-8 text ({e.reason})") from e
    return parse_trace(text.splitlines(), source=name)


def choose_trace() -> Trace | None:
    files = trace_files()
    linked = st.query_params.get("trace")  # deep link: ?trace=NAME.jsonl
    if linked in files and "tr_file" not in st.session_state:
        st.session_state["tr_file"] = linked
    c1, c2 = st.columns(2)
    picked = c1.selectbox("trace in traces/", [NONE, *files], key="tr_file",
                          help=f"JSONL traces found under {state.traces_dir()}")
    upload = c2.file_uploader("or upload a trace (.jsonl)", type=["jsonl", "json", "txt"], key="tr_upload")
    try:
        if upload is not None:
            return parse_upload(upload.name, upload.getvalue())
        if picked != NONE:
            return read_trace(state.traces_dir() / picked)
    except ConfigError as e:
        st.error(str(e))
        return None
    if not files:
        st.info("no traces in traces/ yet: record one with `ssd-run ... --trace traces/SETUP/NAME.jsonl`, or upload one")
    return None


def header_box(trace: Trace) -> None:
    h = trace.header
    models = h.get("models", {})
    st.markdown(f"**{trace.path}** · mode **{trace.mode}** · batch {h.get('batch_size')} · "
                f"target `{models.get('target')}` · draft `{models.get('draft')}` · "
                f"devices {h.get('devices', {})} · {len(trace.rounds)} rounds")
    with st.expander("header"):
        st.json(h, expanded=1)


def charts_of(trace: Trace) -> None:
    """Per-round acceptance, hit rate over time and phase timings of the trace."""
    window = st.slider("rolling window (rounds)", 1, 200, 20, key="tr_window",
                       help="rounds averaged for the rolling hit rate")
    s = trace_series(trace, window)
    left, right = st.columns(2)
    left.plotly_chart(charts.series(s["round"], {"mean acceptance length": s["accept_len"]},
                                    "per-round acceptance", "round", "tokens per sequence (bonus included)"),
                      key="ch_tr_acc")
    if trace.mode == "ssd":
        right.plotly_chart(charts.series(s["round"], {"this round": s["hit_rate"],
                                                      f"rolling ({window} rounds)": s["rolling_hit_rate"]},
                                         "cache hit rate over time", "round", "hit rate", (0, 1)), key="ch_tr_hit")
    else:
        right.info(f"no cache hits in {trace.mode.upper()} mode")
    phases = {ph: s["phase_ms"][ph] for ph in PHASES if ph != "round"}
    st.plotly_chart(charts.stacked_phases(s["round"], phases), key="ch_tr_phase")


def compare(trace: Trace, profile: Profile) -> None:
    """Predicted (analytic, and simulated on request) vs measured for the trace's plan on the profile."""
    try:
        plan = trace_plan(trace)
    except ConfigError as e:
        st.error(f"cannot predict this run: {e}")
        return
    simulated = simulate_trace(trace, profile, plan)
    pvm = predicted_vs_measured(profile, trace, simulated)
    st.subheader(f"predicted ({profile.name}) vs measured")
    left, right = st.columns(2)
    left.plotly_chart(charts.predicted_vs_measured(pvm["rows"]), key="ch_tr_pvm")
    right.dataframe([{"metric": n, "predicted": p, "measured": m, "simulated": s,
                      "measured / predicted": (m / p) if (p and m is not None) else None}
                     for n, p, m, s in pvm["rows"]], hide_index=True, width="stretch")


def positions_of(trace: Trace, profile: Profile) -> None:
    """Per-position acceptance and hit rate: counted in the trace, derived from its logged distributions,
    and the profile's for the trace's plan."""
    if trace.mode == "ar":
        return
    c = position_curves(trace, profile)
    st.subheader("per stopping position")
    if c["derived_acceptance"] is None:
        st.caption("this trace has no logged distributions (record with ssd-run --log-topn): measured and profile only")
    left, right = st.columns(2)
    left.plotly_chart(charts.position_lines(c["position"], {
        "measured": c["measured_acceptance"], "derived from the trace's distributions": c["derived_acceptance"],
        f"profile {profile.name}": c["profile_acceptance"]}, "acceptance per position", "P(accept | reached)"),
        key="ch_tr_pos_acc")
    right.plotly_chart(charts.position_lines(c["position"], {
        "measured (SSD)": c["measured_hit"] if trace.mode == "ssd" else None,
        "derived from the trace's distributions": c["derived_hit"], f"profile {profile.name}": c["profile_hit"]},
        "next-round hit rate per position (the plan's fan-out)", "P(hit | stopped at k)"), key="ch_tr_pos_hit")


def simulate_trace(trace: Trace, profile: Profile, plan) -> dict | None:
    """The simulator's metrics for the trace's plan, when asked for (checkbox) and available."""
    if not sim.available():
        st.caption(f"simulator not available ({sim.missing_reason()})")
        return None
    if not st.checkbox("also simulate this run (discrete-event, seed 0)", key="tr_sim",
                       help="simulate the trace's plan, mode and batch on the profile, same tokens per sequence"):
        return None
    tokens = max(sum(s["committed"] for r in trace.rounds for s in r["seqs"]) // max(plan.batch_size, 1), 16)
    with st.spinner("simulating..."):
        return sim.trace_run(profile, plan, tokens)


def render() -> None:
    st.title("Traces")
    sc = state.current()
    trace = choose_trace()
    if trace is None:
        return
    header_box(trace)
    if not trace.rounds:
        st.warning("the trace has a header but no rounds: nothing to plot (was the run cut short?)")
        return
    if sc is None:
        st.warning("choose a valid profile in the sidebar for the predictions")
        return
    charts_of(trace)
    compare(trace, sc.profile)
    positions_of(trace, sc.profile)


render()
