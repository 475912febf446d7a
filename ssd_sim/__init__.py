"""ssd_sim: plan and simulate Speculative Speculative Decoding (SSD / Saguaro).

Layers, each importing only the ones below it (checked by `lint-imports`, see pyproject.toml):

    cli      ssd-plan, ssd-plan calibrate, ssd-sim and their shared argument parsing
    sim      the SimPy event model, outcomes, batching, workloads, metrics, timeline, re-ranking
    plan     Plan, predictions, the planner, engine emitters, what-if sweeps, trace comparison
    model    latency and acceptance models, Profile, presets (+ TOML), calibration
    theory | io   the paper's closed forms, fan-out and Saguaro math | trace schema, JSON files, ConfigError

Pure Python + numpy/scipy/simpy: never imports torch, streamlit or ssd_runtime. The names below are the
public API (`from ssd_sim import make_plan`); they load lazily, so `import ssd_sim` itself costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "ssd_sim.theory.analytic": ("expected_tokens", "sd_speedup", "ssd_speedup", "critical_batch_size"),
    "ssd_sim.theory.fanout": ("geometric_fanout", "integer_fanout", "miss_rate", "uniform_fanout"),
    "ssd_sim.theory.saguaro": ("saguaro_probs", "outcome_stats"),
    "ssd_sim.io.errors": ("ConfigError",),
    "ssd_sim.io.trace": ("Trace", "TraceWriter", "read_trace", "summarize"),
    "ssd_sim.model.latency": ("ForwardLatency", "LatencyModel"),
    "ssd_sim.model.acceptance": ("AcceptanceModel", "AcceptancePoint", "HitCurve", "HitTable"),
    "ssd_sim.model.profile": ("Profile", "load_profile_file"),
    "ssd_sim.model.presets": ("get_preset", "list_presets", "load_profile"),
    "ssd_sim.model.calibrate": ("calibrate",),
    "ssd_sim.plan.plan": ("Plan", "PlanFile", "load_plan"),
    "ssd_sim.plan.predict": ("Prediction", "predict", "predict_ar", "predict_sd", "predict_ssd"),
    "ssd_sim.plan.knobs": ("Knobs", "resolve"),
    "ssd_sim.plan.planner": ("BStar", "PlanRequest", "PlanResult", "SearchLimits", "make_plan"),
    "ssd_sim.sim.des": ("SimResult", "simulate"),
    "ssd_sim.sim.workload": ("Workload", "fixed_batch", "poisson"),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    """Import a public name from its layer on first use (PEP 562)."""
    if name not in _WHERE:
        raise AttributeError(f"module 'ssd_sim' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
