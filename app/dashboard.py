"""SSD what-if dashboard: `streamlit run app/dashboard.py` (or `ssd-dashboard`).

Entry point and router: the shared sidebar (profile choice) and the current scenario, then the page.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:  # `streamlit run app/dashboard.py` works without installing the package
    sys.path.insert(0, _ROOT)

import streamlit as st  # noqa: E402

from app import state  # noqa: E402
from ssd_sim.cli.growth import profile_at  # noqa: E402
from ssd_sim.cli.source import context_for, context_note, without_context  # noqa: E402
from ssd_sim.io.errors import ConfigError  # noqa: E402
from ssd_sim.io.limits import MAX_TOKENS  # noqa: E402
from ssd_sim.model.profile import Profile  # noqa: E402
from ssd_sim.sim.workload import fixed_batch  # noqa: E402

PAGES = [
    ("views/whatif.py", "What-if", ":material/tune:"),
    ("views/timeline.py", "Timeline", ":material/view_timeline:"),
    ("views/pareto.py", "Pareto", ":material/scatter_plot:"),
    ("views/traces.py", "Traces", ":material/monitoring:"),
    ("views/plan.py", "Plan", ":material/description:"),
]


def sidebar_profile() -> tuple[Profile, str] | None:
    """Profile choice in the sidebar: a preset, a calibrated profile in traces/, or an uploaded JSON."""
    side = st.sidebar
    side.header("Profile")
    st.session_state["_lengths"] = None  # set again by _at_lengths when workload lengths move this profile
    st.session_state["_spec"] = None  # the spec pair's source, as a plan file records it (set by _spec_choice)
    choices = state.profile_choices()
    label = side.selectbox("preset or calibrated profile", list(choices), key="profile_choice",
                           help="built-in presets (ssd_sim/model/presets) and calibrated profiles found as "
                                f"*.json in {state.traces_dir()} (`ssd-plan calibrate TRACES -o traces/SETUP/NAME.json`)")
    spec = _spec_choice(side)
    if spec is not None:
        return _at_lengths(side, *spec)
    upload = side.file_uploader("or upload a profile JSON", type=["json"], key="profile_upload",
                                help="a profile written by `ssd-plan calibrate` (schema ssd-profile/1)")
    if upload is not None:
        data = upload.getvalue()
        try:
            prof = state.profile_from_bytes(data, upload.name)
            side.success(f"using uploaded profile {prof.name!r}")
            return prof, f"upload:{upload.name}:{hash(data)}"
        except ConfigError as e:
            side.error(str(e))
    try:
        prof, key = state.load_choice(choices[label]), choices[label]
    except (ConfigError, OSError) as e:
        side.error(str(e))
        return None
    kind, _, name = key.partition(":")
    return _at_lengths(side, prof, key, {"preset": name}) if kind == "preset" else (prof, key)


def _at_lengths(side, prof: Profile, key: str, source: dict) -> tuple[Profile, str]:
    """With workload lengths switched on (as `ssd-plan --prompt-tokens P --tokens N`): a GPU preset's or spec pair's
    latencies at the mean decode context P + N / 2, and the lengths kept for the What-if page's growth line."""
    box = side.expander("workload lengths (GPU presets and spec pairs)")
    if not box.toggle("latencies at the workload's mean decode context", key="len_on",
                      help="each row's KV reads at the mean prompt plus half the mean output, as ssd-plan "
                           "--prompt-tokens / --tokens (replaces the preset's own context or the specs' context)"):
        return prof, key
    prompt = int(box.number_input("prompt tokens (mean)", 0, MAX_TOKENS, 128, step=128, key="len_prompt"))
    output = int(box.number_input("output tokens (mean)", 1, MAX_TOKENS, 512, step=128, key="len_output"))
    unset = without_context(source)
    context = context_for(unset, prof, fixed_batch(1, output, prompt))
    if context is None:
        box.caption("measured latencies: the lengths change nothing")
        return prof, key
    try:
        prof = profile_at(unset, context)
    except ConfigError as e:
        box.error(str(e))
        return prof, key
    box.caption(context_note(context).split(" (")[0])
    st.session_state["_lengths"] = (unset, prompt, output)
    if st.session_state.get("_spec"):
        st.session_state["_spec"] = {**st.session_state["_spec"], "context": context}
    return prof, f"{key}:ctx{context}"


def _spec_choice(side) -> tuple[Profile, str, dict] | None:
    """A pair and GPU from specs (as `ssd-plan --target --draft --gpu --tp --context`), when switched on."""
    box = side.expander("or plan a pair on a GPU from specs")
    if not box.toggle("use specs", key="spec_on", help="a roofline from the models' shapes and the GPU's "
                      "datasheet (ssd_sim.model.spec_profile); acceptance is assumed from another pair"):
        return None
    names = state.spec_models()
    target = box.selectbox("target", names, index=names.index("Llama-3.1-70B"), key="spec_target")
    draft = box.selectbox("draft", names, index=names.index("Llama-3.2-1B"), key="spec_draft")
    gpu = box.selectbox("GPU", state.spec_gpus(), key="spec_gpu")
    upload = box.file_uploader("or your GPU's datasheet numbers (JSON)", type=["json"], key="spec_gpu_file",
                               help="as `ssd-plan --gpu my-gpu.json`: hbm_tb_s, bf16_tflops, fp8_tflops (or null), "
                                    "link_gb_s, memory_gb, and optionally name and source")
    numbers = None
    if upload is not None:
        try:
            numbers = state.gpu_upload(upload.getvalue(), upload.name)
        except ConfigError as e:
            box.error(str(e))
            return None
        gpu = f"{Path(upload.name).stem.replace(':', '_')}.json"  # what the ssd-plan command names (--gpu FILE)
    tp = int(box.number_input("TP (target devices)", 1, 64, 4, key="spec_tp"))
    context = int(box.number_input("context (tokens per sequence)", 1, 1_048_576, 1024, step=512, key="spec_ctx"))
    try:
        prof = state.spec_profile(target, draft, gpu, tp, context,
                                  json.dumps(numbers, sort_keys=True) if numbers else None)
    except ConfigError as e:
        box.error(str(e))
        return None
    fits = prof.memory.by_mode() if prof.memory else {}
    box.caption(f"{prof.name}: KV caches of up to {fits.get('ar')} (AR), {fits.get('sd')} (SD), {fits.get('ssd')} (SSD, "
                f"before its branch rows) sequences fit; acceptance: "
                f"{prof.provenance['acceptance'].split(' (')[0]}")
    spec = {"target": target, "draft": draft, "gpu": numbers or gpu, "tp": tp}
    st.session_state["_spec"] = {**spec, "context": context}
    return prof, f"spec:{target}:{draft}:{gpu}:{tp}:{context}", {"spec": spec}


def main() -> None:
    st.set_page_config(page_title="SSD what-if", page_icon=":material/bolt:", layout="wide")
    state.keep_widget_state()
    chosen = sidebar_profile()
    st.session_state["_scenario"] = None
    if chosen is not None:
        profile, key = chosen
        warning = state.profile_host_warning(profile)
        if warning:
            st.sidebar.warning(warning, icon=":material/computer:")
        try:
            state.ensure_defaults(profile, key)
            state.sync_profile_values(profile)
            st.session_state["_scenario"] = state.scenario(profile)
        except ConfigError as e:
            st.sidebar.error(str(e))
    st.navigation(navigation()).run()


def url_paths() -> list[str]:
    """Each page's URL path (/whatif, /timeline, ...: the page file's name), in the order of PAGES."""
    return [Path(path).stem for path, _, _ in PAGES]


def navigation() -> list:
    """The pages for st.navigation: each at /<url path> (What-if too: every page URL the README or a link names
    opens), plus the app's root URL, a hidden page that opens What-if at /whatif."""
    here = Path(__file__).resolve().parent
    pages = [st.Page(str(here / path), title=title, icon=icon, url_path=url)
             for (path, title, icon), url in zip(PAGES, url_paths(), strict=True)]

    def root() -> None:
        st.switch_page(pages[0])

    return [st.Page(root, title=PAGES[0][1], icon=PAGES[0][2], url_path="root", default=True,
                    visibility="hidden"), *pages]


main()
