"""Plan page: the current plan as the `ssd-plan` JSON report and as engine flags, with downloads."""

from __future__ import annotations

import streamlit as st

from app import compute, state
from app.planfile import ENGINES, flags_text, plan_file_text, report
from ssd_sim.plan.planner import PlanResult


def profile_flags(source: str) -> str:
    """The ssd-plan flags naming the sidebar's profile ('preset:NAME', 'file:PATH', 'spec:...', 'upload:NAME:...';
    a preset's or spec's key ends in ':ctxN' when workload lengths set its context to N)."""
    head, sep, tail = source.rpartition(":ctx")
    ctx = tail if sep and tail.isdigit() else None
    source = head if ctx else source
    kind, _, ref = source.partition(":")
    if kind == "preset":
        return f"--preset {ref}" + (f" --context {ctx}" if ctx else "")
    if kind == "spec":
        target, draft, gpu, tp, context = ref.split(":")
        return f"--target {target} --draft {draft} --gpu {gpu} --tp {tp} --context {ctx or context}"
    if kind == "file":
        return f"--profile {ref}"
    return f"--profile {ref.split(':')[0] or 'PROFILE.json'}"


def result_of(sc) -> tuple[PlanResult, bool]:
    """The PlanResult the page reports and whether it is make_plan's search: the search's own result when the What-if
    knobs are its plan (nothing moved since the defaults or **optimise**; b* may differ as the page's b* is the fixed
    plan's), else the knobs' plan scored with every knob fixed (whatif.evaluate, as `ssd-plan --plan`)."""
    p = sc.plan
    best = compute.optimised(compute.key_of(sc.profile), sc.profile, p.batch_size, p.temperature, p.draft_devices,
                             sc.objective)
    if best.plan.replace(backup_threshold=p.backup_threshold) == p:
        return best, True
    return compute.evaluate(compute.key_of(sc.profile, p), sc.profile, p, sc.objective), False


def render() -> None:
    sc = state.page_scenario("Plan")
    if sc is None:
        return
    st.caption(state.describe(sc) + " (change it on the What-if page)")
    res, searched = result_of(sc)
    rep = report(sc.profile, res, str(st.session_state.get(state.PREFIX + "profile", "")), sc.base.name,
                 sc.overrides, st.session_state.get("_spec"))
    p = sc.plan
    if searched:
        source = profile_flags(str(st.session_state.get(state.PREFIX + "profile", "")))
        st.caption(f"The What-if knobs are make_plan's plan for this workload: this is what `ssd-plan {source} "
                   f"-b {p.batch_size} -t {p.temperature:g} --draft-devices {p.draft_devices} --objective {sc.objective}"
                   " --json` reports (K, fan-out, C and backup searched; `binding` names the constraint that stopped "
                   "the search)" + (", on the profile with the what-if overrides" if sc.overrides else "") + ".")
    else:
        st.caption("The What-if knobs differ from make_plan's plan for this workload, so this plan is scored as "
                   "given, as `ssd-plan --plan plan.json` scores a plan file: `binding` describes the fixed fan-out "
                   "and there is no re-optimised b* crossover (`b_star_curve` is null; `b_star` is this plan's). "
                   "**optimise** on the What-if page loads make_plan's knobs.")
    if rep["memory"]["warning"]:
        st.warning(rep["memory"]["warning"], icon=":material/memory:")
    if sc.overrides:
        st.warning("the profile has what-if overrides; `ssd-plan --preset` alone will not reproduce these "
                   "predictions (they are listed under whatif_overrides)")
    c1, c2 = st.columns(2)
    same = "-o plan.json" if searched else "--plan plan.json -o plan.json"
    c1.download_button("download plan.json", plan_file_text(rep), file_name="plan.json", mime="application/json",
                       key="dl_plan", help=f"the same content as `ssd-plan --preset NAME {same}`")
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
