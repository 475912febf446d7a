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
    st.plotly_chart(charts.pareto(data, x), key="ch_pareto", config=charts.CONFIG)
    st.dataframe(table(data), hide_index=True, width="stretch")
    capacity_section(sc)


def capacity_section(sc) -> None:
    """Cost vs TPOT at a load (ssd_sim.sim.capacity, as `ssd-plan capacity`), the cheapest configuration starred."""
    from ssd_sim.sim.capacity import example

    st.subheader("capacity at a load")
    rate0, t0 = example(sc.profile, 512)
    c = st.columns(4)
    rate = c[0].number_input("rate (requests/s)", min_value=1e-3, value=float(f"{rate0:.3g}"), key="ca_rate",
                             help="Poisson arrivals; the default would load one AR replica at b = 16 twice over")
    requests = c[1].number_input("requests", 100, 20_000, 1_000, step=100, key="ca_requests")
    tokens = c[2].number_input("output tokens", 1, 8192, 512, key="ca_tokens")
    price = c[3].number_input("$ per GPU-hour (0 = none)", 0.0, 1000.0, 0.0, key="ca_price")
    c = st.columns(3)
    ttft = c[0].number_input("TTFT target (ms)", 1e-3, value=float(f"{t0.ttft_ms:.3g}"), key="ca_ttft")
    tpot = c[1].number_input("TPOT target (ms)", 1e-3, value=float(f"{t0.tpot_ms:.3g}"), key="ca_tpot")
    pct = c[2].number_input("percentile", 1.0, 100.0, 90.0, key="ca_pct")
    if not st.button("search", key="ca_search", help="simulate the load across replicas for each mode, batch cap "
                                                      "and backup (a few seconds)"):
        return
    res = compute.capacity(compute.key_of(sc.profile), sc.profile, rate, int(requests), int(tokens), ttft, tpot, pct,
                           price or None, sc.plan.temperature)
    best = res["best"]
    cost = "usd_per_mtok" if price else "gpus"
    st.plotly_chart(charts.capacity_pareto(res["simulated"], best, tpot, cost), key="ch_capacity", config=charts.CONFIG)
    if best is None:
        st.warning("no configuration meets the targets within 64 replicas")
    else:
        st.success(f"cheapest: {best['mode'].upper()} {best['replicas']} x b<={best['max_batch']}"
                   + (f", {best['backup']} backup" if best["mode"] == "ssd" else "") + f" on {best['gpus']} GPUs")
    cols = ("replicas", "max_batch", "backup", "gpus", "ttft_ms", "tpot_ms") + (("usd_per_mtok",) if price else ())
    st.dataframe(charts.table_rows([{"mode": m.upper(), **({k: o[k] for k in cols} if o else {c: None for c in cols})}
                                    for m, o in res["per_mode"].items()]), hide_index=True, width="stretch")


render()
