"""Pareto page: per-sequence speed vs throughput per device across batch sizes for AR / SD / SSD."""

from __future__ import annotations

import streamlit as st

from app import charts, compute, state

X_AXES = {"tok_s_per_device": "tok/s per device", "total_tok_s": "total tok/s"}


def table(data: dict) -> list[dict]:
    """Rows of the Pareto data for st.dataframe."""
    rows = []
    for mode, row in data.items():
        for i, b in enumerate(row["batch_sizes"]):
            rows.append({"mode": mode.upper(), "batch": b, "K": row["K"][i],
                         "tok/s per seq": round(row["per_seq_tok_s"][i], 2),
                         "total tok/s": round(row["total_tok_s"][i], 2),
                         "tok/s per device": round(row["tok_s_per_device"][i], 2)})
    return rows


def render() -> None:
    sc = state.page_scenario("Pareto")
    if sc is None:
        return
    p = sc.plan
    st.caption(f"Best AR / SD / SSD per batch size (make_plan, latency objective) for **{sc.base.name}** at "
               f"temperature {p.temperature:g} with {p.draft_devices} draft device(s)"
               + (f"; overrides: {sc.overrides}" if sc.overrides else "") + ". SSD counts its draft devices.")
    c1, c2 = st.columns(2)
    batches = c1.multiselect("batch sizes", compute.PARETO_BATCHES, default=list(compute.PARETO_BATCHES),
                             key="pa_batches", help="sequences decoded together")
    x = c2.radio("x axis", list(X_AXES), format_func=X_AXES.get, horizontal=True, key="pa_x")
    if not batches:
        st.info("choose at least one batch size")
        return
    data = compute.pareto(compute.key_of(sc.profile), sc.profile, tuple(sorted(batches)), p.temperature,
                          p.draft_devices)
    st.plotly_chart(charts.pareto(data, x), key="ch_pareto")
    st.dataframe(table(data), hide_index=True, width="stretch")


render()
