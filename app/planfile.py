"""The current plan as `ssd-plan` writes it: the JSON report, the plan file and the engine commands."""

from __future__ import annotations

from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan, PlanFile
from ssd_sim.plan.planner import PlanResult
from ssd_sim.plan.report import build_report

ENGINES = {"ssd-engine": "reference SSD engine (bench/bench.py)", "vllm": "vLLM (plain SD fallback)",
           "sglang": "SGLang (plain SD fallback)"}


def report(profile: Profile, result: PlanResult, profile_source: str, name: str, overrides: dict,
           spec: dict | None = None) -> dict:
    """ssd_sim.plan.report.build_report for an evaluated plan; profile_source is 'preset:NAME', 'file:PATH',
    'spec:...' or 'upload:...', and `spec` a spec pair's source (target, draft, gpu: a name or an uploaded GPU's
    numbers, tp, context), which the plan file records as `ssd-plan --target ..` does, so `ssd-plan --plan` reloads it.

    What-if overrides (if any) are added under `whatif_overrides`, since the preset alone no longer
    reproduces the predictions.
    """
    kind, _, ref = profile_source.partition(":")
    source = ({"profile": {"name": name, "spec": spec}} if kind == "spec" and spec else
              {"profile": {"name": name, "preset": ref if kind == "preset" else None,
                           "path": ref if kind == "file" else None}})
    out = build_report(profile, result, source=source)
    if overrides:
        out["whatif_overrides"] = dict(overrides)
    return out


def plan_file_text(rep: dict) -> str:
    """The plan file exactly as `ssd-plan -o` writes it (the plan plus the rest of the report)."""
    text = PlanFile(Plan.from_dict(rep["plan"]), {k: v for k, v in rep.items() if k != "plan"}).to_json()
    return text if text.endswith("\n") else text + "\n"


def flags_text(rep: dict) -> str:
    """The three engine commands as a shell script."""
    lines = ["#!/bin/sh", "# engine flags for the plan (ssd-dashboard)"]
    for eng, label in ENGINES.items():
        flags = rep["engine_flags"][eng]
        lines += [f"# {label}", flags["command"] if flags.get("supported", True) else f"# not supported: {flags['notes'][0]}"]
    return "\n".join(lines) + "\n"
