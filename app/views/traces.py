"""Traces page: a runtime trace (traces/<setup>/*.jsonl or an upload): its setup, per-round acceptance, hit rate
over time, phase timings, and predicted vs measured for that run on a profile of the trace's own setup (the
calibrated profile shipped beside it, one calibrated from the trace on request, or the sidebar's profile)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app import charts, sim, state
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import Header
from ssd_sim.io.trace import PHASES, Trace, parse_trace
from ssd_sim.model import tracematch
from ssd_sim.model.mix import classes_held
from ssd_sim.model.profile import Profile
from ssd_sim.plan.compare import position_curves, predicted_vs_measured, trace_plan, trace_series

NONE = "(no traces in traces/)"
OWN, CALIBRATED, SIDEBAR = "own", "calibrated", "sidebar"
TAGS = {OWN: "the trace's setup", CALIBRATED: "calibrated from the trace", SIDEBAR: "sidebar"}


@dataclass(frozen=True)
class Chosen:
    """The trace on the page: parsed, a key naming it and its file (None for an upload)."""

    trace: Trace
    key: str
    path: Path | None


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


def default_trace(files: list[str]) -> str:
    """The trace the page opens with: the first SSD trace shipped beside a calibrated profile (the page then compares
    it with a profile of its own setup), else the first SSD trace, else the first trace."""
    d = state.traces_dir()
    beside = {Path(src.removeprefix("file:")).parent for src in state.profile_choices().values()
              if src.startswith("file:")}
    ssd = [f for f in files if _header_mode(d / f) == "ssd"]
    return next((f for f in ssd if (d / f).parent in beside), (ssd or files)[0])


def _header_mode(path: Path) -> str | None:
    """The mode named by a trace's first line (None if it cannot be read)."""
    try:
        with path.open(encoding="utf-8") as f:
            return json.loads(f.readline()).get("mode")
    except (OSError, ValueError, AttributeError):
        return None


def choose_trace() -> Chosen | None:
    files = trace_files()
    linked = st.query_params.get("trace")  # deep link: ?trace=NAME.jsonl
    if files and "tr_file" not in st.session_state:
        st.session_state["tr_file"] = linked if linked in files else default_trace(files)
    c1, c2 = st.columns(2)
    picked = c1.selectbox("trace in traces/", files or [NONE], key="tr_file", disabled=not files,
                          help=f"JSONL traces found under {state.traces_dir()}; an upload on the right replaces it")
    upload = c2.file_uploader("or upload a trace (.jsonl)", type=["jsonl", "json", "txt"], key="tr_upload")
    try:
        if upload is not None:
            data = upload.getvalue()
            return Chosen(parse_upload(upload.name, data), f"upload:{upload.name}:{hash(data)}", None)
        if picked in files:
            path = state.traces_dir() / picked
            return Chosen(state.trace_file(path), f"file:{picked}", path)
    except ConfigError as e:
        st.error(str(e))
        return None
    st.info("no traces in traces/ yet: record one with `ssd-run ... --trace traces/SETUP/NAME.jsonl`, or upload one")
    return None


def _plan_text(trace: Trace) -> str:
    p = trace.plan
    if trace.mode == "ar":
        return f"T={p.get('temperature', 0):g}"
    text = f"K={p.get('num_speculative_tokens')}, T={p.get('temperature', 0):g}"
    if trace.mode == "ssd":
        text += f", fan_out={p.get('fan_out')}, saguaro_c={p.get('saguaro_c', 1):g}, backup={p.get('backup')}"
    return text


def _role_text(h: Header, role: str) -> str:
    """'`model` (dtype, quantisation) on device' for one role of a trace header."""
    model = (h.models or {}).get(role)
    dtype = (h.dtype or {}).get(role)
    quant = (h.quantize or {}).get(role)
    device = (h.devices or {}).get(role)
    extras = ", ".join(str(x) for x in (dtype, quant) if x)
    return f"`{tracematch.short_model(model)}`" + (f" ({extras})" if extras else "") + (f" on {device}" if device else "")


def header_box(trace: Trace) -> None:
    """The trace's setup in two lines (models, dtype, devices; mode, batch, plan) and the whole header."""
    h = trace.header
    roles = "target " + _role_text(h, "target")
    if (h.models or {}).get("draft"):
        roles += " · draft " + _role_text(h, "draft")
    st.markdown(f"**{Path(str(trace.path)).name}** · {roles}  \n"
                f"mode **{trace.mode.upper()}** · batch {h.batch_size} · plan {_plan_text(trace)} · "
                f"{len(trace.rounds)} rounds" + (f" · {h.machine}" if h.machine else ""))
    with st.expander("header"):
        st.json(h.to_json(), expanded=1)


def charts_of(trace: Trace) -> None:
    """Per-round acceptance, hit rate over time and phase timings of the trace."""
    window = st.slider("rolling window (rounds)", 1, 200, 20, key="tr_window",
                       help="rounds averaged for the rolling hit rate")
    s = trace_series(trace, window)
    left, right = st.columns(2)
    left.plotly_chart(charts.series(s["round"], {"mean acceptance length": s["accept_len"]},
                                    "per-round acceptance", "round", "tokens per sequence (bonus included)"),
                      key="ch_tr_acc", config=charts.CONFIG)
    if trace.mode == "ssd":
        right.plotly_chart(charts.series(s["round"], {"this round": s["hit_rate"],
                                                      f"rolling ({window} rounds)": s["rolling_hit_rate"]},
                                         "cache hit rate over time", "round", "hit rate", (0, 1)), key="ch_tr_hit", config=charts.CONFIG)
    else:
        right.info(f"no cache hits in {trace.mode.upper()} mode")
    phases = {ph: s["phase_ms"][ph] for ph in PHASES if ph != "round"}
    st.plotly_chart(charts.stacked_phases(s["round"], phases), key="ch_tr_phase", config=charts.CONFIG)


# --- the profile it is compared with ------------------------------------------------------------------------

def _calibrated() -> dict[str, Profile | str]:
    """Profiles calibrated from traces in this session (trace key -> profile, or the one-line error)."""
    return st.session_state.setdefault("tr_calibrated", {})


def calibrate_from(chosen: Chosen, mix_text: str = "") -> Profile:
    """ssd_sim's calibration (ssd-plan calibrate [--mix]) on this one trace, as parsed (an upload stays in memory);
    mix_text: "code=0.7,chat=0.3" weighs the trace's request classes to those shares (model.mix), "" = as recorded.
    Its one-line notes (traces counted once, requests the mix leaves out) are kept for the page beside the profile."""
    from ssd_sim.model.calibrate import calibrate_traces
    from ssd_sim.model.mix import RequestMix

    mix = RequestMix.parse(mix_text) if mix_text.strip() else None
    source = str(chosen.path) if chosen.path is not None else str(chosen.trace.path)
    profile, report = calibrate_traces([chosen.trace], [source], name=f"calibrated-from-{Path(source).stem}", mix=mix)
    notes = [*report.duplicates, *([report.left_out] if report.left_out else [])]
    st.session_state.setdefault("tr_calibration_notes", {})[chosen.key] = notes
    return profile


def _on_calibrate(chosen: Chosen) -> None:
    """Button callback: calibrate from the trace (for the mix typed beside it) and compare with the result (or keep
    the error)."""
    try:
        _calibrated()[chosen.key] = calibrate_from(chosen, st.session_state.get("tr_mix", ""))
        st.session_state["tr_profile"] = CALIBRATED
    except ConfigError as e:
        _calibrated()[chosen.key] = f"cannot calibrate from this trace: {e}"
        st.session_state.setdefault("tr_calibration_notes", {}).pop(chosen.key, None)  # notes of the withdrawn profile


def mix_input(chosen: Chosen) -> None:
    """The workload mix the next calibration weighs the trace's request classes to (only for traces with classes)."""
    held = {tag: n for tag, n in classes_held([chosen.trace]).items() if tag}  # "" = untagged
    if not held:
        return
    listed = ", ".join(f"{tag} {n}" for tag, n in held.items())
    st.text_input("workload mix for the calibration", key="tr_mix", placeholder=",".join(f"{t}=0.5" for t in held),
                  help=f"this trace's requests by class: {listed}. Give the shares of the traffic you plan for "
                       "(CLASS=SHARE,...; counts work too): each class' requests then weigh its share in the "
                       "acceptance, hit rates and spread (ssd-plan calibrate --mix). Empty: the trace's own mix")


def profile_options(chosen: Chosen, sc) -> dict[str, tuple[Profile, str, str]]:
    """Option -> (profile, its name as shown, why it is offered): the trace's own setup (if one is found), the
    profile calibrated from it (once asked for) and the sidebar's profile."""
    out: dict[str, tuple[Profile, str, str]] = {}
    own = tracematch.own_profile(chosen.trace, chosen.path, state.all_profiles())
    if own is not None:
        where = state.choice_label(own.source)
        out[OWN] = (own.profile, own.profile.name, f"{own.why}: {where}")
    cal = _calibrated().get(chosen.key)
    if isinstance(cal, Profile):
        out[CALIBRATED] = (cal, cal.name, "calibrated from this trace")
    if sc is not None:
        out[SIDEBAR] = (sc.profile, sc.base.name, "the sidebar's profile" + (" with what-if overrides" if sc.overrides else ""))
    return out


def choose_profile(chosen: Chosen, sc) -> Profile | None:
    """The profile the trace is compared with (default: its own setup's); says which and warns in one line when
    its models or devices are not the trace's."""
    options = profile_options(chosen, sc)
    if st.session_state.get("tr_for") != chosen.key or st.session_state.get("tr_profile") not in options:
        st.session_state["tr_for"] = chosen.key
        st.session_state["tr_profile"] = next(iter(options), SIDEBAR)
    left, right = st.columns([3, 1])
    if options:
        left.radio("compare with", list(options), key="tr_profile", horizontal=True,
                   format_func=lambda o: f"{options[o][1]} ({TAGS[o]})",
                   help="the trace's own setup: a calibrated profile shipped beside it (or fitted to its folder's "
                        "traces), else a profile for the same models and device kind")
    right.button("calibrate from this trace", key="btn_tr_calibrate", on_click=_on_calibrate, args=(chosen,),
                 disabled=chosen.trace.mode == "ar",
                 help="fit a profile to this trace alone (ssd-plan calibrate); needs an SD or SSD trace, whose "
                      "draft timings fix the draft's latency")
    mix_input(chosen)
    err = _calibrated().get(chosen.key)
    if isinstance(err, str):
        st.error(err)
    elif isinstance(err, Profile) and "acceptance.mix" in err.provenance:
        st.caption(f"workload mix: {err.provenance['acceptance.mix']}")
    for note in st.session_state.get("tr_calibration_notes", {}).get(chosen.key, []):
        st.warning(note, icon=":material/warning:")
    if not options:
        st.warning("choose a valid profile in the sidebar for the predictions")
        return None
    profile, name, why = options[st.session_state["tr_profile"]]
    st.caption(f"compared with profile **{name}** ({why})")
    warning = tracematch.mismatch_line(chosen.trace, profile)
    if warning:
        st.warning(warning, icon=":material/warning:")
    return profile


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
    left, right = st.columns([2, 3])  # the table's five columns need the wider half
    left.plotly_chart(charts.predicted_vs_measured(pvm["rows"]), key="ch_tr_pvm", config=charts.CONFIG)
    right.dataframe(compare_rows(pvm["rows"]), hide_index=True, width="stretch", column_config={
        "metric": st.column_config.TextColumn(width="medium"),
        **{c: st.column_config.NumberColumn(format="%.4g") for c in ("predicted", "measured", "simulated")},
        "measured / predicted": st.column_config.NumberColumn("ratio", help="measured / predicted", format="%.3f")})


def compare_rows(rows) -> list[dict]:
    """The predicted-vs-measured table: metric, predicted, measured, simulated (only once simulated) and their
    ratio; a missing value shows as "-" (charts.table_rows)."""
    sim = any(s is not None for *_, s in rows)
    return charts.table_rows([{"metric": n, "predicted": p, "measured": m, **({"simulated": s} if sim else {}),
                               "measured / predicted": (m / p) if (p and m is not None) else None}
                              for n, p, m, s in rows])


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
        key="ch_tr_pos_acc", config=charts.CONFIG)
    right.plotly_chart(charts.position_lines(c["position"], {
        "measured (SSD)": c["measured_hit"] if trace.mode == "ssd" else None,
        "derived from the trace's distributions": c["derived_hit"], f"profile {profile.name}": c["profile_hit"]},
        "next-round hit rate per position", "P(hit | stopped at k), the plan's fan-out"), key="ch_tr_pos_hit", config=charts.CONFIG)


def simulate_trace(trace: Trace, profile: Profile, plan) -> dict | None:
    """The simulator's metrics for the trace's plan, when asked for (checkbox) and available."""
    if not sim.available():
        st.caption(f"simulator not available ({sim.missing_reason()})")
        return None
    if not st.checkbox("also simulate this run (discrete-event, seed 0)", key="tr_sim",
                       help="simulate the trace's plan, mode and batch on the profile, same tokens per sequence"):
        return None
    tokens = max(sum(s.committed for r in trace.rounds for s in r.seqs) // max(plan.batch_size, 1), 16)
    with st.spinner("simulating..."):
        return sim.trace_run(profile, plan, tokens)


def render() -> None:
    st.title("Traces")
    chosen = choose_trace()
    if chosen is None:
        return
    header_box(chosen.trace)
    if not chosen.trace.rounds:
        st.warning("the trace has a header but no rounds: nothing to plot (was the run cut short?)")
        return
    profile = choose_profile(chosen, state.current())
    charts_of(chosen.trace)
    if profile is None:
        return
    compare(chosen.trace, profile)
    positions_of(chosen.trace, profile)


render()
