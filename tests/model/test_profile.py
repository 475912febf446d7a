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
    (lambda d: d["latency"]["target"].update(fixed_ms="@"), "latency.target.fixed_ms: P: must be a finite number "
                                                            ">= 0 (ms), got inf"),
    (lambda d: d.update(max_batch_size="@"), "max_batch_size: P: must be a whole number of sequences >= 1, got inf"),
    (lambda d: d["acceptance"]["points"][0].update(temperature="@"), "temperature: P: must be a finite number >= 0, "
                                                                     "got inf"),
])
def test_infinity_in_a_profile_is_refused_with_one_message_however_spelled(tmp_path, edit, message):
    assert {_message(tmp_path, edit, v) for v in SPELLINGS} == {message}


def test_a_profile_named_inf_keeps_its_name(tmp_path):
    data = get_preset("qwen-coder-1.5b-0.5b-cpu").to_dict() | {"name": "inf", "description": "Infinity"}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data))
    prof = load_profile_file(path)
    assert (prof.name, prof.description) == ("inf", "Infinity")
