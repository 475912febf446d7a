"""Session state shared by the pages: the chosen profile, the what-if knobs and the current plan.

Widget values live in st.session_state under keys starting with `wi_`; `keep_widget_state` keeps
them when another page is shown, so the "current plan" (built from them by `scenario`) is the same
on every page. Profile loading and the slower sweeps are cached (st.cache_data / st.cache_resource).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from app.launch import MAX_UPLOAD_MB
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host, current_host
from ssd_sim.io.jsonfile import parse_json
from ssd_sim.io.trace import Trace, read_trace
from ssd_sim.model.presets import get_preset, list_presets
from ssd_sim.model.profile import PROFILE_SCHEMA, Profile, profile_from_dict
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import BStar, PlanRequest, SearchLimits, make_plan
from ssd_sim.plan.report import host_report
from ssd_sim.plan.whatif import build_plan, profile_values, with_overrides

REPO = Path(__file__).resolve().parent.parent
PREFIX = "wi_"
OVERRIDABLE = ("acceptance", "r", "miss_at_one", "draft_latency_ratio")
UPLOADED = "uploaded profile"


def traces_dir() -> Path:
    """Where calibrated profiles (*.json) and runtime traces (*.jsonl) are looked for ($SSD_TRACES_DIR)."""
    return Path(os.environ.get("SSD_TRACES_DIR", REPO / "traces"))


@st.cache_resource(show_spinner=False)
def this_host() -> Host:
    """The host the dashboard runs on (read once per server)."""
    return current_host()


def profile_host_warning(profile: Profile) -> str | None:
    """ssd-plan's host warning (plan.report.host_report) for the chosen profile on this host: one line, or None."""
    return host_report(profile, this_host())["warning"]


def keep_widget_state() -> None:
    """Re-assign every what-if value so Streamlit keeps it while its widget is not on the page."""
    for key in list(st.session_state.keys()):
        if str(key).startswith(PREFIX):
            st.session_state[key] = st.session_state[key]


# --- profiles ---------------------------------------------------------------------------------------

def check_upload(data: bytes, name: str, what: str) -> None:
    """ConfigError (one line) for an upload over the cap (app.launch.MAX_UPLOAD_MB; Streamlit enforces it too)."""
    if len(data) > MAX_UPLOAD_MB * 2**20:
        raise ConfigError("upload", f"{name} is {len(data) / 2**20:.1f} MB, over the {MAX_UPLOAD_MB} MB upload cap; "
                                    f"put the {what} under traces/ (it is listed there) or cut it down")


def profile_from_bytes(data: bytes, name: str = "upload") -> Profile:
    """Parse a profile JSON upload in memory; every problem is a ConfigError with a one-line message."""
    check_upload(data, name, "profile")
    if not data.strip():
        raise ConfigError("profile", f"{name} is empty; upload a profile JSON from `ssd-plan calibrate`")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("profile", f"{name} is not a UTF-8 text file (byte {e.start})") from e
    obj = parse_json(text, name, unique_keys=True)
    if not isinstance(obj, dict):
        raise ConfigError("profile", f"{name} must hold a JSON object")
    return profile_from_dict(obj, name)


@st.cache_resource(max_entries=256, show_spinner=False)
def _file_profile(path: str, mtime: float) -> Profile | None:
    """A calibrated profile file, parsed once per file version and shared (profiles are immutable, and what
    ssd_sim resolves on them, e.g. Saguaro responses, stays with them); None if it is not a valid profile."""
    try:
        data = Path(path).read_bytes()
        if PROFILE_SCHEMA.encode() not in data:  # every profile names its schema: skip plans, manifests, tables
            return None
        return profile_from_bytes(data, Path(path).name)
    except (ConfigError, OSError):
        return None


def page_scenario(title: str) -> Scenario | None:
    """Render a page's title; the current scenario, or None (after a warning) when the profile is invalid."""
    st.title(title)
    sc = current()
    if sc is None:
        st.warning("choose a valid profile in the sidebar")
    return sc


def profile_choices() -> dict[str, str]:
    """Label -> source ('preset:NAME' or 'file:PATH') for presets and calibrated profiles under traces/."""
    out = {name: f"preset:{name}" for name in list_presets()}
    d = traces_dir()
    for p in sorted(d.rglob("*.json")) if d.is_dir() else []:
        if _file_profile(str(p), p.stat().st_mtime) is not None:
            out[f"{p.relative_to(d)} (calibrated)"] = f"file:{p}"
    return out


def load_choice(source: str) -> Profile:
    """The profile of a choice from `profile_choices` (presets are cached by ssd_sim, files here)."""
    kind, _, ref = source.partition(":")
    if kind == "preset":
        return get_preset(ref)
    p = Path(ref)
    prof = _file_profile(str(p), p.stat().st_mtime)
    if prof is None:
        raise ConfigError("profile", f"{p.name} is not a valid profile")
    return prof


def spec_models() -> list[str]:
    """The built-in model shapes, by short name (ssd_sim.model.architecture.BUILTIN)."""
    from ssd_sim.model.architecture import BUILTIN

    return [k.split("/")[-1] for k in BUILTIN]


def spec_gpus() -> list[str]:
    from ssd_sim.model.hardware import GPUS

    return list(GPUS)


@functools.lru_cache(maxsize=32)
def spec_profile(target: str, draft: str, gpu: str, tp: int, context: int, gpu_numbers: str | None = None) -> Profile:
    """profile_from_specs, built once per choice (profiles are immutable); `gpu_numbers`: an uploaded GPU's numbers
    as JSON text (gpu_upload), used instead of the named GPU."""
    from ssd_sim.model.spec_profile import profile_from_specs

    return profile_from_specs(target, draft, json.loads(gpu_numbers) if gpu_numbers else gpu, tp=tp, context=context)


def gpu_upload(data: bytes, name: str) -> dict:
    """An uploaded GPU file's numbers (ssd_sim.model.hardware.gpu_from_dict checks them; its name defaults to the
    file's stem), parsed in memory; every problem is a one-line ConfigError."""
    from ssd_sim.model.hardware import GPU_FILE_HINT, gpu_from_dict

    check_upload(data, name, "GPU file")
    try:
        obj = parse_json(data.decode("utf-8"), name, unique_keys=True) if data.strip() else None
    except UnicodeDecodeError as e:
        raise ConfigError("gpu", f"{name} is not a UTF-8 text file (byte {e.start})") from e
    if not isinstance(obj, dict):
        raise ConfigError("gpu", f"{name} must hold a JSON object: {GPU_FILE_HINT}")
    gpu = gpu_from_dict(obj, name, Path(name).stem)
    return {**obj, "name": gpu.name}


def choice_label(source: str) -> str:
    """How a profile source reads: 'preset NAME' or the file's path under the traces directory."""
    kind, _, ref = source.partition(":")
    if kind == "preset":
        return f"preset {ref}"
    try:
        return str(Path(ref).relative_to(traces_dir()))
    except ValueError:
        return Path(ref).name


def all_profiles() -> list[tuple[str, Profile]]:
    """(source, profile) of every preset and every valid calibrated profile under the traces directory."""
    out = []
    for source in profile_choices().values():
        try:
            out.append((source, load_choice(source)))
        except (ConfigError, OSError):
            continue
    return out


@st.cache_resource(max_entries=16, show_spinner=False)
def _trace_file(path: str, mtime: float, size: int) -> Trace:
    return read_trace(path)


def trace_file(path: Path) -> Trace:
    """A trace file, parsed once per file version (shared: the pages only read it)."""
    stat = path.stat()
    return _trace_file(str(path), stat.st_mtime, stat.st_size)


# --- the what-if scenario -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Scenario:
    """The current what-if: the base profile, the profile with overrides applied and the current plan."""

    base: Profile
    profile: Profile
    plan: Plan
    overrides: dict
    objective: str


def defaults_for(profile: Profile, temperature: float, batch_size: int, draft_devices: int) -> dict:
    """Knob values of the optimised plan (make_plan) for this workload: K, budget, C, backup."""
    request = PlanRequest(batch_size=batch_size, temperature=temperature, draft_devices=draft_devices,
                          limits=SearchLimits(top_n=1), b_star=BStar.CHOSEN)
    res = make_plan(profile, request)
    return {"K": res.plan.K, "B": res.plan.budget, "C": res.plan.saguaro_c, "backup": str(res.plan.backup),
            "uniform": False}


def ensure_defaults(profile: Profile, profile_key: str) -> None:
    """Initialise the what-if values for a newly chosen profile (knobs from its optimised plan)."""
    ss = st.session_state
    for key, val in (("T", 0.0), ("b", 1), ("dd", 1), ("objective", "latency")):
        ss.setdefault(PREFIX + key, val)
    if ss.get(PREFIX + "profile") == profile_key:
        return
    ss[PREFIX + "profile"] = profile_key
    ss[PREFIX + "overridden"] = []
    for key, val in defaults_for(profile, ss[PREFIX + "T"], ss[PREFIX + "b"], ss[PREFIX + "dd"]).items():
        ss[PREFIX + key] = val
    sync_profile_values(profile)


def sync_profile_values(profile: Profile) -> None:
    """Show the profile's own values on the override sliders that the user has not moved."""
    ss = st.session_state
    vals = profile_values(profile, ss[PREFIX + "T"], ss[PREFIX + "K"])
    for name in OVERRIDABLE:
        if name not in ss.get(PREFIX + "overridden", []):
            ss[PREFIX + name] = round(float(vals[name]), 4)


def mark_overridden(name: str) -> None:
    """Widget callback: the user moved this override slider."""
    lst = list(st.session_state.get(PREFIX + "overridden", []))
    if name not in lst:
        st.session_state[PREFIX + "overridden"] = [*lst, name]


def scenario(base: Profile) -> Scenario:
    """The current profile (overrides applied) and plan from the what-if values in session state."""
    ss = st.session_state
    T = float(ss[PREFIX + "T"])
    overrides = {n: float(ss[PREFIX + n]) for n in ss.get(PREFIX + "overridden", [])}
    profile = with_overrides(base, T, **overrides) if overrides else base
    plan = build_plan(profile, int(ss[PREFIX + "K"]), int(ss[PREFIX + "B"]), T, float(ss[PREFIX + "C"]),
                      ss[PREFIX + "backup"], int(ss[PREFIX + "b"]), int(ss[PREFIX + "dd"]),
                      bool(ss[PREFIX + "uniform"]))
    return Scenario(base, profile, plan, overrides, ss[PREFIX + "objective"])


def current() -> Scenario | None:
    """The scenario of this run (set by dashboard.py before the page runs), or None without a profile."""
    return st.session_state.get("_scenario")


def describe(sc: Scenario) -> str:
    """One line: profile, workload and plan knobs (for captions)."""
    p = sc.plan
    ov = ", ".join(f"{k}={v:g}" for k, v in sc.overrides.items())
    return (f"**{sc.base.name}** · T={p.temperature:g}, b={p.batch_size}, draft devices={p.draft_devices} · "
            f"K={p.K}, fan_out={list(p.fan_out)}, saguaro_c={p.saguaro_c:g}, backup={p.backup}"
            + (f" · overrides: {ov}" if ov else ""))
