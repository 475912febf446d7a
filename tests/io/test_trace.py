"""Trace parsing: logged distribution records are validated with one error line naming the trace line."""

from __future__ import annotations

import json

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import parse_trace

HEADER = {"type": "header", "schema": "ssd-trace/1", "mode": "sd", "plan": {}, "batch_size": 1, "log_topn": 2}
GOOD = [[3, 7], [-0.1, -2.5], 0.0131, [3, 9], [-0.2, -2.0], 0.0834]


def trace_with(dists) -> list[str]:
    seq = {"seq": 0, "accepted": 1, "bonus": 5, "committed": 2, "dists": dists}
    return [json.dumps(HEADER), json.dumps({"type": "round", "round": 0, "K": 2, "seqs": [seq], "timings_ms": {}})]


def test_well_formed_distributions_parse():
    t = parse_trace(trace_with([GOOD, GOOD[:3] + [None, None, None]]))
    assert t.rounds[0].seqs[0].dists[1][3] is None


@pytest.mark.parametrize("dists", [
    [GOOD],  # accepted 1 needs two positions
    [GOOD, GOOD[:5]],  # five fields
    [GOOD, [[3, 7], [-0.1], 0.0, [3], [-0.2], 0.1]],  # ids and log-probs of different lengths
    [GOOD, [[3, 7], [0.5, -1.0], 0.0, [3], [-0.2], 0.1]],  # a positive log-prob
    [GOOD, [[3, -7], [-0.1, -1.0], 0.0, [3], [-0.2], 0.1]],  # a negative token id
    [GOOD, [[3, 7], [-0.1, -1.0], 1.5, [3], [-0.2], 0.1]],  # rest mass above 1
    [GOOD, [[3, 7], [-0.1, "x"], 0.0, [3], [-0.2], 0.1]],
    [GOOD, [None, None, None, [3], [-0.2], 0.1]],  # only the draft side may be missing
    [GOOD, [[3, True], [-0.1, -1.0], 0.0, [3], [-0.2], 0.1]],  # a boolean is no token id
    [GOOD, [[3, 7.0], [-0.1, -1.0], 0.0, [3], [-0.2], 0.1]],  # nor is a float
    [GOOD, [[3, 7], [-0.1, float("nan")], 0.0, [3], [-0.2], 0.1]],  # a log-prob must be finite
    [GOOD, [[3, 7], [-0.1, False], 0.0, [3], [-0.2], 0.1]],  # and a number
    [GOOD, [[], [], 0.0, [3], [-0.2], 0.1]],  # at least one token
    "not a list",
])
def test_malformed_distributions_name_the_line(dists):
    with pytest.raises(ConfigError) as e:
        parse_trace(trace_with(dists), source="t.jsonl")
    msg = str(e.value)
    assert e.value.field == "dists" and "t.jsonl line 2" in msg and "\n" not in msg


@pytest.mark.parametrize("field,value,message", [
    ("devices", "cpu", "devices = 'cpu' must be an object"),
    ("phases", None, "phases = None must be a list of phase names"),
    ("models", "x", "models = 'x' must be an object"),
    ("seed", 1.5, "seed = 1.5 must be an integer"),
    ("plan", {"temperature": None}, "plan.temperature = None must be a finite number >= 0"),
    ("plan", {"num_speculative_tokens": "3"}, "plan.num_speculative_tokens = '3' must be an integer in 0..64"),
])
def test_a_header_field_of_the_wrong_kind_is_one_line(field, value, message):
    """These parsed and then failed in calibration or replay (AttributeError, TypeError)."""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        parse_trace([json.dumps(HEADER | {field: value})])
