"""model.profile: a profile file's numbers are checked alike however infinity is spelled."""

from __future__ import annotations

import json

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.model.presets import get_preset
from ssd_sim.model.profile import load_profile_file

SPELLINGS = ("Infinity", "1e999", '"inf"', '"Infinity"', '"+INF"')


def _message(tmp_path, edit, value: str) -> str:
    data = get_preset("qwen-coder-1.5b-0.5b-cpu").to_dict()
    edit(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data).replace('"@"', value))
    with pytest.raises(ConfigError) as e:
        load_profile_file(path)
    return str(e.value).replace(str(path), "P")


@pytest.mark.parametrize("edit,message", [
    (lambda d: d["latency"]["target"].update(fixed_ms="@"), "latency.target.fixed_ms: P: must be a number in 0..1e+07 "
                                                            "(ms), got inf"),
    (lambda d: d.update(max_batch_size="@"), "max_batch_size: P: must be a whole number of sequences >= 1, got inf"),
    (lambda d: d["acceptance"]["points"][0].update(temperature="@"), "temperature: P: must be a finite number >= 0, "
                                                                     "got inf"),
])
def test_infinity_in_a_profile_is_refused_with_one_message_however_spelled(tmp_path, edit, message):
    assert {_message(tmp_path, edit, v) for v in SPELLINGS} == {message}


@pytest.mark.parametrize("edit,message", [
    (lambda d: d.update(target_model=None), "target_model: P: must be a string (text), got None"),
    (lambda d: d.update(draft_model=7), "draft_model: P: must be a string (text), got 7"),
    (lambda d: d["latency"]["target"].update(compute_ms_per_token=1e308),
     "latency.target.compute_ms_per_token: P: must be a number in 0..1e+07 (ms), got 1e+308"),
    (lambda d: d["uncertainty"].update(timed_rows_tokens=[6]),
     "uncertainty.timed_rows_tokens: P: must be [] (any) or [target, draft]: the most rows x tokens of one timed "
     "forward (integers >= 1), got [6]"),
])
def test_a_profile_value_that_was_a_traceback_is_one_line(tmp_path, edit, message):
    """Each of these loaded and then failed deep in the planner (AttributeError, ZeroDivisionError, IndexError)."""
    data = get_preset("qwen-coder-1.5b-0.5b-cpu").to_dict()
    data["uncertainty"] = data.get("uncertainty") or {}
    edit(data)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as e:
        load_profile_file(path)
    assert str(e.value).replace(str(path), "P") == message


def test_a_profile_named_inf_keeps_its_name(tmp_path):
    data = get_preset("qwen-coder-1.5b-0.5b-cpu").to_dict() | {"name": "inf", "description": "Infinity"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    prof = load_profile_file(path)
    assert (prof.name, prof.description) == ("inf", "Infinity")
