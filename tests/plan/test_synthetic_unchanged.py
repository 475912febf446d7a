"""A synthetic acceptance model's numbers did not move when hit tables were added (recorded before).

The values were computed by make_plan / predict_ssd / OutcomeTables / whatif on the presets before
AcceptanceModel learned per-position HitTables and logged grids; HitCurve models must reproduce them.
The profiles are frozen copies of those presets (fixtures/*-synthetic.json), so re-deriving a preset's
inputs does not move these numbers. b* changed meaning in issue 11 (was: where fast wins for good with this
plan's budget; now: the first batch size at which fast beats jit, each re-planned per batch), and with it the
backup of two CPU plans (fast -> adaptive, which is fast at their batch sizes). In issue 25 Saguaro's C stopped
moving the all-accepted hit rates (that bonus is a plain target sample at a position the draft never sampled): every
value at C < 1 moved, and make_plan at T > 0 picks larger C; the budget search also covers budgets past what fits
inside one verify (none of these plans uses one). In issue 26 the glue after a jit backup of every row became one
token per row, as ssd-run feeds it (the CPU copy's T = 0, b = 1 plan 5.333 -> 5.398 tok/s; the GPU copy is the
reference engine's, whose glue re-reads K + 1 tokens, and is unchanged).
"""

from pathlib import Path

import pytest

from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan import whatif
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ssd
from ssd_sim.sim.outcomes import OutcomeTables

PRESETS = ("qwen-coder-1.5b-0.5b-cpu", "llama70b-1b-h100")
PLAN = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 4), fan_out_miss=(3, 1, 1, 3), saguaro_c=0.6,
            temperature=1.0, batch_size=2, backup="fast")

# (preset, T, b) -> (K, fan_out, fan_out_miss, C, backup, tok/s per sequence, p_hit, b*)
MAKE_PLAN = {
    ("qwen-coder-1.5b-0.5b-cpu", 0.0, 1): (3, (0, 0, 0, 1), (0, 0, 0, 1), 1.0, "adaptive",
        5.39845061774628, 0.8725184378959998, 2.0),
    ("qwen-coder-1.5b-0.5b-cpu", 1.0, 4): (1, (1, 2), (3, 0), 1.0, "adaptive",
        2.7305591041395902, 0.885324288636695, 2.0),
    ("qwen-coder-1.5b-0.5b-cpu", 0.7, 16): (1, (0, 1), (1, 0), 1.0, "adaptive",
        1.3051619563022785, 0.7745268019240622, 2.0),
    ("llama70b-1b-h100", 0.0, 1): (5, (3, 3, 2, 2, 2, 6), (3, 3, 2, 2, 2, 6), 1.0, "adaptive",
        221.13691512908827, 0.8642215997080969, 2.0),
    ("llama70b-1b-h100", 1.0, 4): (3, (11, 9, 7, 15), (42, 0, 0, 0), 0.8, "adaptive",
        132.02884784085143, 0.8516040043191212, 2.0),
    ("llama70b-1b-h100", 0.7, 16): (3, (2, 2, 2, 3), (9, 0, 0, 0), 0.8, "adaptive",
        125.58274458825753, 0.7159603512990713, 2.0),
}
# preset -> (predict_ssd(PLAN) tok/s per sequence, p_hit)
PREDICT = {
    "qwen-coder-1.5b-0.5b-cpu": (1.9565395765796714, 0.9315204266093824),
    "llama70b-1b-h100": (107.43507101907163, 0.6013283835306285),
}
# preset -> OutcomeTables of PLAN at (T = 1, C = 0.6): hit_after_cache, hit_after_jit, hit_after_fast
OUTCOMES = {
    "qwen-coder-1.5b-0.5b-cpu": ([0.9648815195919722, 0.9260789383112549, 0.9260789383112549, 0.9421349332213242],
        [0.9772774621480786, 0.9260789383112549, 0.9260789383112549, 0.9288176455099326],
        0.7872821730272581),
    "llama70b-1b-h100": ([0.5992645364603609, 0.3558633607596714, 0.3558633607596714, 0.6722268474430093],
        [0.6964115988540129, 0.3558633607596714, 0.3558633607596714, 0.6104738483977616],
        0.6883790787182092),
}
# preset -> whatif.fan_outs(K=4, budget=20, T=0.8, C=0.5, jit)
FAN_OUTS = {
    "qwen-coder-1.5b-0.5b-cpu": ((3, 3, 2, 2, 10), (3, 3, 2, 2, 10)),
    "llama70b-1b-h100": ((4, 4, 3, 3, 6), (4, 4, 3, 3, 6)),
}
# preset -> hit_rate_vs_budget(K=4, T=0.8, C=0.5)["optimal"] for budgets 1..6
HIT_VS_BUDGET = {
    "qwen-coder-1.5b-0.5b-cpu": [0.43317048916196144, 0.5930872082616425, 0.7183138443409682,
        0.8231095861397543, 0.9137688854504166, 0.9479717672031229],
    "llama70b-1b-h100": [0.11931955314544362, 0.216152601092916, 0.30438904926344534,
        0.37684120678682265, 0.4420917929691246, 0.49890337617536684],
}


def _profile(name: str):
    return load_profile_file(Path(__file__).parent / "fixtures" / f"{name}-synthetic.json")


EXACT = {"rel": 1e-12, "abs": 1e-15}  # identical up to the last bits of LAPACK's least squares


@pytest.mark.parametrize("key", sorted(MAKE_PLAN))
def test_make_plan_is_unchanged(key):
    name, T, b = key
    K, fan_out, fan_out_miss, C, backup, tok_s, p_hit, b_star = MAKE_PLAN[key]
    res = make_plan(_profile(name), PlanRequest(batch_size=b, temperature=T))
    p = res.plan
    assert (p.K, p.fan_out, p.fan_out_miss, p.saguaro_c, p.backup) == (K, fan_out, fan_out_miss, C, backup)
    assert (res.ssd.per_seq_tok_s, res.ssd.p_hit) == pytest.approx((tok_s, p_hit), **EXACT)
    assert res.b_star == b_star


@pytest.mark.parametrize("name", PRESETS)
def test_predict_outcomes_and_sweeps_are_unchanged(name):
    prof = _profile(name)
    pred = predict_ssd(prof, PLAN)
    assert (pred.per_seq_tok_s, pred.p_hit) == pytest.approx(PREDICT[name], **EXACT)
    t = OutcomeTables.from_point(prof.acceptance.at(1.0, 0.6), PLAN)
    cache, jit, fast = OUTCOMES[name]
    assert t.hit_after_cache.tolist() == pytest.approx(cache, **EXACT)
    assert t.hit_after_jit.tolist() == pytest.approx(jit, **EXACT)
    assert t.hit_after_fast == pytest.approx(fast, **EXACT)
    assert whatif.fan_outs(prof, 4, 20, 0.8, 0.5, "jit") == FAN_OUTS[name]
    got = whatif.hit_rate_vs_budget(prof, 4, 0.8, 0.5, max_budget=12)["optimal"][:6]
    assert got == pytest.approx(HIT_VS_BUDGET[name], **EXACT)
