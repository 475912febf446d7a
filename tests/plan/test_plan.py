"""Plan validation, JSON round trip and plan files."""

import json
import math

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.plan.plan import Plan, PlanFile, load_plan


def test_defaults_fill_uniform_fan_out_of_k_plus_one():
    p = Plan(num_speculative_tokens=3)
    assert p.fan_out == (1, 1, 1, 1) and p.fan_out_miss == p.fan_out and p.budget == 4


def test_wrong_fan_out_length_names_the_field_and_the_fix():
    with pytest.raises(ConfigError, match=r"fan_out: has 6 entries, expected K\+1 = 8"):
        Plan(num_speculative_tokens=7, fan_out=(3,) * 6)


def test_miss_list_must_share_the_budget():
    with pytest.raises(ConfigError, match="fan_out_miss"):
        Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), fan_out_miss=(4, 1, 1))


@pytest.mark.parametrize("field,value", [("saguaro_c", 1.5), ("backup", "slow"), ("temperature", -1.0),
                                         ("batch_size", 0), ("backup_threshold", 0.5), ("mode", "x")])
def test_bad_fields_are_named(field, value):
    with pytest.raises(ConfigError, match=field):
        Plan(**{field: value})


def test_adaptive_backup_switches_at_threshold():
    p = Plan(backup="adaptive", backup_threshold=4)
    assert [p.backup_for(b) for b in (1, 3, 4, 8)] == ["jit", "jit", "fast", "fast"]


def test_round_trip_keeps_infinite_threshold_as_null():
    p = Plan(num_speculative_tokens=2, fan_out=(3, 2, 4), saguaro_c=0.5, backup="fast")
    d = p.to_dict()
    assert d["backup_threshold"] is None
    assert Plan.from_dict(json.loads(json.dumps(d))) == p
    assert math.isinf(Plan.from_dict(d).backup_threshold)


def test_unknown_field_in_plan_file(tmp_path):
    f = tmp_path / "plan.json"
    f.write_text(json.dumps({"schema": "ssd-plan/1", "plan": {"num_speculative_tokens": 3, "fanout": [1]}}))
    with pytest.raises(ConfigError, match="fanout: unknown plan field"):
        load_plan(f)


def test_plan_file_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    for path in (bad, tmp_path / "missing.json"):
        with pytest.raises(ConfigError) as e:
            load_plan(path)
        assert "\n" not in str(e.value)


def test_plan_file_round_trip(tmp_path):
    p = Plan(num_speculative_tokens=4, fan_out=(5, 3, 2, 2, 4))
    f = tmp_path / "p.json"
    f.write_text(PlanFile(p, {"predicted": {"ssd_tok_s": 1.0}}).to_json())
    pf = load_plan(f)
    assert pf.plan == p and pf.extra["predicted"]["ssd_tok_s"] == 1.0


def test_per_position_saguaro_c_is_a_list_of_k_values():
    p = Plan(num_speculative_tokens=3, saguaro_c_list=(0.4, 0.7, 1.0), temperature=1.0)
    assert [p.c_at(k) for k in range(3)] == [0.4, 0.7, 1.0] and p.c_label == "[0.4, 0.7, 1]"
    assert Plan(num_speculative_tokens=2, saguaro_c=0.6).c_at(1) == 0.6
    assert Plan.from_dict(p.to_dict()) == p
    assert Plan.from_dict({"num_speculative_tokens": 2, "saguaro_c": [0.5, 0.9]}).saguaro_c_list == (0.5, 0.9)
    for bad in ((0.5, 0.5), (0.5, 1.5, 1.0)):
        with pytest.raises(ConfigError) as e:
            Plan(num_speculative_tokens=3, saguaro_c_list=bad)
        assert e.value.field == "saguaro_c_list"


def _plan_file(tmp_path, body: str):
    path = tmp_path / "plan.json"
    path.write_text('{"schema": "ssd-plan/1", "plan": {' + body + "}}")
    return path


@pytest.mark.parametrize("value", ["null", "Infinity", "1e999", '"inf"', '"Infinity"', '"+INF"', '"1e999"'])
def test_a_plan_file_threshold_of_infinity_means_never_however_spelled(tmp_path, value):
    plan = load_plan(_plan_file(tmp_path, f'"backup": "adaptive", "backup_threshold": {value}')).plan
    assert plan.backup_threshold == math.inf and plan.backup_for(4096) == "jit"


def test_a_plan_file_temperature_of_infinity_is_refused_alike_however_spelled(tmp_path):
    errors = set()
    for value in ("Infinity", "1e999", '"inf"', '"Infinity"', '"+inf"'):
        with pytest.raises(ConfigError) as e:
            load_plan(_plan_file(tmp_path, f'"temperature": {value}'))
        errors.add(str(e.value))
    assert errors == {"temperature: must be in [0, 10], got inf"}


@pytest.mark.parametrize("key", ["fan_out", "fan_out_miss"])
def test_an_empty_fan_out_list_in_a_plan_file_is_refused_not_read_as_one_guess_each(key):
    with pytest.raises(ConfigError, match=rf"^{key}: is an empty list: give K\+1 integers"):
        Plan.from_dict({"num_speculative_tokens": 2, key: []})
    assert Plan.from_dict({"num_speculative_tokens": 2}).fan_out == (1, 1, 1)  # left out: one guess per position
