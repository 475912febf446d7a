"""Plan page: the current plan as the `ssd-plan` JSON report and as engine flags, with downloads."""

from __future__ import annotations

import streamlit as st

from app import compute, state
from app.planfile import ENGINES, flags_text, plan_file_text, report


def render() -> None:
    sc = state.page_scenario("Plan")
    if sc is None:
        return
    st.caption(state.describe(sc) + " (change it on the What-if page)")
    res = compute.evaluate(compute.key_of(sc.profile, sc.plan), sc.profile, sc.plan, sc.objective)
    rep = report(sc.profile, res, str(st.session_state.get(state.PREFIX + "profile", "")), sc.base.name,
                 sc.overrides)
    if sc.overrides:
        st.warning("the profile has what-if overrides; `ssd-plan --preset` alone will not reproduce these "
                   "predictions (they are listed under whatif_overrides)")
    c1, c2 = st.columns(2)
    c1.download_button("download plan.json", plan_file_text(rep), file_name="plan.json", mime="application/json",
                       key="dl_plan", help="the same content as `ssd-plan --preset NAME --plan plan.json -o plan.json`")
    c2.download_button("download engine flags", flags_text(rep), file_name="ssd-flags.sh",
                       mime="text/x-shellscript", key="dl_flags")
    for eng, label in ENGINES.items():
        st.subheader(label)
        if rep["engine_flags"][eng].get("supported", True):
            st.code(rep["engine_flags"][eng]["command"], language="bash", wrap_lines=True)
        for note in rep["engine_flags"][eng]["notes"]:
            st.caption(f"note: {note}")
    st.subheader("report (ssd-plan --json)")
    st.json(rep, expanded=1)


render()
