"""make_plan's request: validated and frozen on construction, and the three ways of finding b* (BStar)."""

import dataclasses
import math

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.plan.planner import BStar, Knobs, PlanRequest, SearchLimits, make_plan


@pytest.mark.parametrize("changes, field, text", [
    ({"objective": "speed"}, "objective", "must be one of ('latency', 'throughput-per-device'), got 'speed'"),
    ({"batch_size": 0}, "batch_size", "must be in 1..4096, got 0"),
    ({"batch_size": 4097}, "batch_size", "must be in 1..4096, got 4097"),
    ({"risk": 0.7}, "risk", "must be a quantile in (0, 0.5] (0.1 = plan for the 10% worst case), got 0.7"),
    ({"risk": 0.0}, "risk", "must be a quantile in (0, 0.5]"),
    ({"b_star": "sometimes"}, "b_star", "must be one of ('scan', 'chosen', 'skip'), got 'sometimes'"),
])
def test_a_bad_request_is_a_config_error_naming_the_field(changes, field, text):
    with pytest.raises(ConfigError) as e:
        PlanRequest(**changes)
    assert e.value.field == field and str(e.value).startswith(f"{field}: {text}")


def test_replace_validates_the_new_request_too():
    base = PlanRequest(batch_size=4, temperature=1.0)
    assert base.replace(batch_size=8) == PlanRequest(batch_size=8, temperature=1.0)
    with pytest.raises(ConfigError, match="^batch_size: must be in 1..4096, got 0$"):
        base.replace(batch_size=0)


def test_the_request_and_its_limits_are_frozen():
    request = PlanRequest()
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.batch_size = 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.limits.k_max = 3
    assert request == PlanRequest(1, 0.0, 1, Knobs(), "latency", SearchLimits(10, 128, 8), None, BStar.SCAN)
    assert hash(request) == hash(PlanRequest())  # usable as a cache key


def test_b_star_accepts_the_mode_by_name():
    assert PlanRequest(b_star="skip").b_star is BStar.SKIP
    assert PlanRequest(b_star="chosen").b_star is BStar.CHOSEN


def test_skip_gives_no_b_star_and_the_same_predictions_as_scan():
    prof = get_preset("llama70b-1b-h100")
    scan = make_plan(prof)
    skip = make_plan(prof, PlanRequest(b_star=BStar.SKIP))
    assert scan.b_star == 2.0 and scan.b_star_closed_form == pytest.approx(1.1074701512421592, rel=1e-9)
    assert scan.plan.backup == "adaptive" and scan.plan.backup_threshold == 2.0 and scan.crossover is not None
    assert math.isnan(skip.b_star) and math.isnan(skip.b_star_closed_form) and skip.crossover is None
    assert skip.plan.backup == "jit" and math.isinf(skip.plan.backup_threshold)  # the single backup it was scored with
    assert skip.plan.replace(backup="adaptive", backup_threshold=2.0) == scan.plan
    assert skip.ssd.per_seq_tok_s == scan.ssd.per_seq_tok_s == pytest.approx(283.73383285918055, rel=1e-9)
    assert (skip.ar, skip.sd, skip.ssd) == (scan.ar, scan.sd, scan.ssd)


def test_chosen_holds_the_plan_fixed_where_scan_replans_each_batch_size():
    # On this preset the plan chosen at b = 1 crosses over one batch size later than the best plan of each size.
    prof = get_preset("qwen-coder-1.5b-0.5b-cpu-dense")
    scan = make_plan(prof)
    chosen = make_plan(prof, PlanRequest(b_star=BStar.CHOSEN))
    assert (scan.b_star, chosen.b_star) == (2.0, 3.0)
    assert chosen.crossover is None and scan.crossover.b_star == 2.0
    assert chosen.b_star_closed_form == scan.b_star_closed_form and math.isfinite(chosen.b_star_closed_form)
    assert chosen.plan.backup_threshold == 3.0 and chosen.plan.replace(backup_threshold=2.0) == scan.plan
    assert chosen.ssd.per_seq_tok_s == scan.ssd.per_seq_tok_s


def test_scan_with_a_fixed_fan_out_does_what_chosen_does():
    prof = get_preset("llama70b-1b-h100")
    request = PlanRequest(knobs=Knobs(num_speculative_tokens=4, fan_out=2))
    scan, chosen = make_plan(prof, request), make_plan(prof, request.replace(b_star=BStar.CHOSEN))
    assert scan.crossover is None and scan == chosen
