"""A workload profile from engine counts: counted acceptance with intervals, derived hits, and the profiles that
take it (specs, a preset's latencies) predict with it."""

import pytest

from ssd_sim.io.engine_metrics import EngineCounts
from ssd_sim.model.presets import get_preset
from ssd_sim.model.spec_profile import profile_from_specs
from ssd_sim.model.workload_profile import WorkloadProfile, acceptance_source, load_workload, with_acceptance
from ssd_sim.plan.predict import predict_sd

COUNTS = EngineCounts("vllm", (1000.0, 800.0, 600.0), (800.0, 600.0, 420.0), 1000, assumed=("hit curves",),
                      note="test counters")


def workload(tmp_path, T: float = 0.0):
    import json

    w = WorkloadProfile.from_counts(COUNTS, T, "mine")
    (tmp_path / "w.json").write_text(json.dumps(w.to_dict()))
    return tmp_path / "w.json"


def test_counts_become_acceptance_with_wilson_intervals_and_round_trip(tmp_path):
    w = load_workload(workload(tmp_path))
    assert w.acceptance == pytest.approx((0.8, 0.75, 0.7))
    assert all(lo < a < hi for a, (lo, hi) in zip(w.acceptance, w.ci95, strict=True))
    assert w.ci95[0][1] - w.ci95[0][0] < w.ci95[2][1] - w.ci95[2][0]  # fewer rounds reach position 3
    pt = w.acceptance_model().at(0.0, 1.0)
    assert pt.acceptance == pytest.approx((0.8, 0.75, 0.7)) and pt.source == "measured" and pt.hit_source == "assumed"
    # at T = 0 after all K accepted, one guess hits as often as the draft's top-1 is the target's: the mean acceptance
    assert pt.primary_hit.hit([1])[0] == pytest.approx(0.75, abs=0.01)


def test_a_preset_with_a_workload_keeps_its_latencies_and_predicts_the_workload(tmp_path):
    base = get_preset("llama70b-1b-h100")
    mine = with_acceptance(base, acceptance_source(str(workload(tmp_path))))
    assert mine.latency == base.latency and mine.name == "llama70b-1b-h100 + mine"
    assert mine.provenance["acceptance"].startswith("measured: per-position acceptance at T = 0 from vllm metrics")
    # SD at K = 3 accepts 0.8 + 0.8 * 0.75 + 0.8 * 0.75 * 0.7 = 1.82 drafted tokens per round
    assert predict_sd(mine, 1, 3, 0.0).tokens_per_round == pytest.approx(2.82, abs=1e-6)
    assert predict_sd(base, 1, 3, 0.0).tokens_per_round > 3.5


def test_a_spec_pair_names_the_workload_as_its_measured_acceptance(tmp_path):
    prof = profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", gpu="h100-sxm", acceptance_from=str(workload(tmp_path)))
    assert "from vllm metrics" in prof.provenance["acceptance"] and prof.uncertainty.hit_assumed
    assert prof.acceptance.at(0.0, 1.0).acceptance == pytest.approx((0.8, 0.75, 0.7))


def test_a_calibrated_profile_of_the_same_pair_lends_its_measured_acceptance():
    from dataclasses import replace
    from pathlib import Path

    from ssd_sim.model.presets import load_profile_file

    shipped = Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-grid" / "profile.json"
    source = acceptance_source(str(shipped))
    here = replace(load_profile_file(shipped), name="probed-here")  # the same pair, timed elsewhere
    lent = with_acceptance(here, source)
    assert lent.provenance["acceptance"].startswith(
        "from qwen-coder-cpu-calibrated (the same target and draft, other runs): measured: 2 (temperature, C) groups")
    assert lent.acceptance == source.acceptance
    # with the lines of its hit curves and Saguaro response, as the source profile states them
    own = load_profile_file(shipped).provenance
    assert lent.provenance["acceptance.hit"] == own["acceptance.hit"] and "acceptance.saguaro" in lent.provenance
    # another pair's acceptance stays an assumption, and its details do not come along
    other = with_acceptance(get_preset("llama70b-1b-h100"), source).provenance
    assert other["acceptance"].startswith("assumed: ") and not any(k.startswith("acceptance.") for k in other)
