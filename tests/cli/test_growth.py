"""The mean decode context against a context growing over the decode (ssd_sim/cli/growth.py)."""

import pytest

from ssd_sim.cli.growth import growth
from ssd_sim.cli.source import at_context, profile_of
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ar

QWEN = {"preset": "qwen32b-0.6b-h100"}
SPEC = {"spec": {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": "l40s"}}


def _plans(source, prompt, output, b):
    res = make_plan(profile_of(at_context(source, prompt + output // 2)), PlanRequest(batch_size=b))
    return res.sd.num_speculative_tokens, res.plan


@pytest.mark.parametrize("source", [QWEN, SPEC])
@pytest.mark.parametrize(("prompt", "output", "b"), [(128, 512, 1), (256, 4096, 8), (2000, 256, 32)])
def test_linear_rounds_are_exact_at_the_mean_and_ssd_is_never_faster_over_the_growth(source, prompt, output, b):
    g = growth(source, prompt, output, *_plans(source, prompt, output, b))
    assert g["ar"]["mean_context_err_pct"] == pytest.approx(0.0, abs=0.01)  # KV reads linear in the context
    assert g["sd"]["mean_context_err_pct"] == pytest.approx(0.0, abs=0.5)
    # SSD's round is max(T_v, T_p) + ..., each side linear in c: the mean of a max is at least the max at the mean
    assert g["ssd"]["mean_context_err_pct"] >= -1e-6
    ar = predict_ar(profile_of(at_context(source, prompt + output // 2)), b)
    assert g["ar"]["tok_s"] == pytest.approx(ar.per_seq_tok_s, rel=1e-4)


def test_ssd_at_large_batch_and_long_outputs_is_slower_than_at_the_mean_context():
    # Qwen3-32B + 0.6B, b = 32, 256 + 4096 tokens: the draft's tree decode (b x budget rows, each reading its KV)
    # overtakes the verify late in the decode, so the mean round is longer than the round at the mean context
    sd_k, plan = _plans(QWEN, 256, 4096, 32)
    g = growth(QWEN, 256, 4096, sd_k, plan)
    assert g["ssd"]["mean_context_err_pct"] > 3.0


H200 = {"spec": {"target": "Llama-3.1-70B", "draft": "Llama-3.2-1B", "gpu": "h200", "tp": 4}}


def test_one_row_is_always_in_step_and_staggered_rows_lose_less():
    g1 = growth(QWEN, 256, 4096, *_plans(QWEN, 256, 4096, 1))["ssd"]
    assert (g1["staggered_tok_s"], g1["staggered_err_pct"]) == (g1["tok_s"], g1["mean_context_err_pct"])
    # b = 32: 32 independent positions average out, so the batch's mean context hardly leaves the mean
    g = growth(H200, 256, 4096, *_plans(H200, 256, 4096, 32))["ssd"]
    assert g["mean_context_err_pct"] > 9.0 and -0.05 < g["staggered_err_pct"] < 2.0


def test_a_refilled_batch_simulates_between_the_staggered_and_the_in_step_average():
    from ssd_sim.cli.growth import ProfileAt
    from ssd_sim.sim.des import simulate
    from ssd_sim.sim.workload import Workload

    sd_k, plan = _plans(H200, 128, 512, 32)
    g = growth(H200, 128, 512, sd_k, plan, modes=("ssd",))["ssd"]
    wl = Workload("fixed", 32 * 16, 32, 0.0, 512, "fixed", 128)  # 16 requests per slot, refilled as rows finish
    prof = profile_of(at_context(H200, 128 + 256))
    grown, flat = (simulate(prof, plan, workload=wl, profile_at=at).metrics.per_seq_tok_s for at in (ProfileAt(H200), None))
    slower = 100 * (flat / grown - 1)
    assert g["staggered_err_pct"] - 0.3 < slower < g["mean_context_err_pct"] + 0.3
    assert g["mean_context_err_pct"] - g["staggered_err_pct"] > 5.0  # the two bounds are far apart here
