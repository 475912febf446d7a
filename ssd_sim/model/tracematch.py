"""Which profile describes a trace's setup: the models, device kind and weight quantisation a trace header names
against those a profile names, and the profile of the trace's own setup among the ones at hand.

The one implementation of the cross-setup warning (`mismatch_line`): `ssd-sim --replay` prints it and the
dashboard's Traces page shows it; the page also picks a trace's own profile with `own_profile`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ssd_sim.io.trace import Trace
from ssd_sim.model.profile import Profile

FAMILIES = ("tinyllama", "llama", "qwen", "mistral", "mixtral", "gemma", "phi", "deepseek", "falcon", "smollm",
            "pythia")
GPU_WORDS = ("gpu", "cuda", "h100", "h200", "a100", "a10", "l4", "l40", "mi300", "rtx")
_SIZE = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)b(?![a-z0-9])")


@dataclass(frozen=True)
class Setup:
    """What a trace ran on or a profile describes; None = not stated."""

    target: str | None
    draft: str | None
    devices: str | None  # "CPU" | "GPU"
    quantize: tuple[str | None, str | None] | None  # (target, draft) weight quantisation, None = full precision


def model_key(name: str | None) -> tuple[str, str] | None:
    """(family, size) a model id or path names, e.g. ('qwen', '1.5b') for '/models/qwen-coder-1.5b/hf' and for
    'Qwen2.5-Coder-1.5B-Instruct'; None when no parameter count (e.g. '1.5B') is in the name."""
    if not name:
        return None
    low = name.lower()
    size = _SIZE.search(low)
    if size is None:
        return None
    family = next((f for f in FAMILIES if f in low), None)
    if family is None:  # the letters leading the path segment that names the size
        segment = low[:size.start()].replace("\\", "/").rsplit("/", 1)[-1]
        letters = re.match(r"[a-z]+", segment)
        family = letters.group(0) if letters else ""
    return family, size.group(1) + "b"


def short_model(name: str | None) -> str:
    """A model's short name: the path segment holding its size, or the last segment ('-' for none)."""
    if not name:
        return "-"
    parts = [p for p in re.split(r"[\\/]", name.split(" (")[0]) if p]
    sized = [p for p in parts if _SIZE.search(p.lower())]
    return (sized or parts or [name])[-1]


def _device_kind(text: str) -> str | None:
    low = text.lower()
    if any(w in re.split(r"[^a-z0-9]+", low) for w in GPU_WORDS) or "cuda" in low:
        return "GPU"
    if "cpu" in low or "x86" in low or "core" in low:
        return "CPU"
    return None


def trace_setup(trace: Trace) -> Setup:
    """The setup a trace header records: models, device kind (from devices.target) and quantisation."""
    h = trace.header
    models = h.models or {}
    devices = h.devices or {}
    quant = h.quantize
    q = (quant.get("target"), quant.get("draft")) if isinstance(quant, dict) else None
    return Setup(models.get("target"), models.get("draft"), _device_kind(str(devices.get("target") or "")), q)


def profile_setup(profile: Profile) -> Setup:
    """The setup a profile describes: its models, device kind (recorded host, else its hardware line) and
    quantisation (its host's kernels, else 'int8' in its hardware line)."""
    host = profile.host
    devices = ("GPU" if host.gpus else "CPU") if host is not None else _device_kind(profile.hardware)
    kernels = host.kernels if host is not None else {}
    if kernels:
        q = tuple("int8" if "int8" in str(kernels.get(role, "")) else None for role in ("target", "draft"))
    else:
        q = ("int8", "int8") if "int8" in profile.hardware.lower() else (None, None)
    return Setup(profile.target_model or None, profile.draft_model or None, devices, q)


def _same_model(a: str | None, b: str | None) -> bool | None:
    """Whether two model names name the same model; None when either is missing or unreadable."""
    if not a or not b:
        return None
    ka, kb = model_key(a), model_key(b)
    if ka is None or kb is None:
        return short_model(a).lower() == short_model(b).lower() or None
    return ka == kb


def models_agree(trace: Trace, profile: Profile) -> bool:
    """Whether the profile names the trace's models: every model the trace names is recognisably the same."""
    t, p = trace_setup(trace), profile_setup(profile)
    pairs = [(tm, pm) for tm, pm in ((t.target, p.target), (t.draft, p.draft)) if tm]
    return bool(pairs) and all(_same_model(tm, pm) is True for tm, pm in pairs)


def _weights(q: tuple[str | None, str | None], has_draft: bool) -> str:
    """'int8 weights', 'full-precision weights' or per role, e.g. 'full-precision target and int8 draft weights'."""
    t, d = (x or "unquantised" for x in q)
    if not has_draft:
        return f"{t} target weights"
    return f"{t} weights" if t == d else f"{t} target and {d} draft weights"


def differences(trace: Trace, profile: Profile) -> list[tuple[str, str, str]]:
    """How the profile's setup differs from the trace's: (aspect, the profile's, the trace's) for the aspects
    'models', 'devices' and 'weights' (quantisation); empty when they agree or the profile does not say."""
    t, p = trace_setup(trace), profile_setup(profile)
    out = []
    roles = [(t.target, p.target), (t.draft, p.draft)]
    if any(_same_model(tm, pm) is False for tm, pm in roles):
        pair = lambda a, b: " + ".join(short_model(x) for x in (a, b) if x)  # noqa: E731
        out.append(("models", pair(p.target, p.draft), pair(t.target, t.draft)))
    if t.devices and p.devices and t.devices != p.devices:
        out.append(("devices", f"on {p.devices}", f"on {t.devices}"))
    if not out and t.quantize is not None and p.quantize is not None:  # only worth a word on the same models and devices
        used = (0, 1) if t.draft else (0,)
        if any((t.quantize[i] or None) != (p.quantize[i] or None) for i in used):
            out.append(("weights", f"with {_weights(p.quantize, bool(t.draft))}",
                        f"with {_weights(t.quantize, bool(t.draft))}"))
    return out


def mismatch_line(trace: Trace, profile: Profile) -> str | None:
    """One line saying how the profile's setup differs from the trace's, or None when it does not."""
    diffs = differences(trace, profile)
    if not diffs:
        return None
    theirs = " ".join(pt for _, pt, _ in diffs)
    if diffs[0][0] != "models":
        p = profile_setup(profile)
        theirs = f"{' + '.join(short_model(x) for x in (p.target, p.draft) if x) or 'its models'} {theirs}"
    ours = " ".join(tt for _, _, tt in diffs)
    return f"profile {profile.name} is for {theirs}, but this trace ran {ours}: its predictions are for another setup"


def names_trace(profile: Profile, profile_path: Path | None, trace_path: Path) -> tuple[bool, bool]:
    """(the profile lists this trace among its sources, it lists a trace of the same folder). Sources are paths
    relative to the repository or bare names relative to the profile's own folder."""
    this = same_folder = False
    for src in profile.sources:
        s = Path(src)
        folder = s.parent.name if str(s.parent) not in ("", ".") else (profile_path.parent.name if profile_path else "")
        if folder == trace_path.parent.name:
            same_folder = True
            this = this or s.name == trace_path.name
    return this, same_folder


@dataclass(frozen=True)
class Candidate:
    """A profile the page can compare a trace with: where it comes from and why it fits."""

    source: str  # 'preset:NAME' or 'file:PATH' (as state.profile_choices)
    profile: Profile
    why: str  # e.g. "shipped beside the trace"


def own_profile(trace: Trace, trace_path: Path | None, candidates: list[tuple[str, Profile]]) -> Candidate | None:
    """The profile of the trace's own setup among (source, profile) candidates, best first:

    1. a calibrated profile in the trace's folder (one that lists this trace first), shipped beside it;
    2. a calibrated profile elsewhere that was fitted to traces of the trace's folder;
    3. a profile (preset or calibrated) that names the trace's models, on the same device kind, with the fewest
       quantisation differences.
    Profiles whose models or device kind differ from the trace's never qualify. None if nothing fits.
    """
    fits = [(s, p) for s, p in candidates if all(aspect == "weights" for aspect, _, _ in differences(trace, p))]
    if trace_path is not None:
        ranked = []
        for s, p in fits:
            ppath = Path(s.partition(":")[2]) if s.startswith("file:") else None
            this, folder = names_trace(p, ppath, trace_path)
            beside = ppath is not None and ppath.parent.resolve() == trace_path.parent.resolve()
            if beside or folder:
                ranked.append((not beside, not this, len(differences(trace, p)), s, p))
        if ranked:
            beside, _, _, s, p = min(ranked, key=lambda r: r[:3])
            why = ("shipped beside the trace" if not beside else
                   f"calibrated from the traces of {trace_path.parent.name}/")
            return Candidate(s, p, why)
    same = sorted((sp for sp in fits if models_agree(trace, sp[1])), key=lambda sp: len(differences(trace, sp[1])))
    if same:
        s, p = same[0]
        kind = "preset" if s.startswith("preset:") else "calibrated profile"
        return Candidate(s, p, f"a {kind} for the same models on the same kind of device")
    return None
