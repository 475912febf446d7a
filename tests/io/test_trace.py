"""Trace parsing: logged distribution records are validated with one error line naming the trace line."""

from __future__ import annotations

import json
import math

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


def _round(seqs, no=0) -> str:
    return json.dumps({"type": "round", "round": no, "K": 2, "seqs": seqs, "timings_ms": {"verify": 5.0}})


SEQ = {"seq": 0, "accepted": 1, "bonus": 5, "committed": 2}
SUMMARY = json.dumps({"type": "summary", "rounds": 1, "tokens": 2, "wall_ms": 5.0, "tok_s": 400.0,
                      "mean_accept_len": 2.0, "acceptance_rate": 0.5, "hit_rate": None, "primary_hit_rate": None,
                      "backup_hit_rate": None, "tokens_per_round_hit": None, "tokens_per_round_miss": None,
                      "per_position_acceptance": [1.0, 0.0]})


@pytest.mark.parametrize("lines, needle", [
    ([json.dumps(HEADER), _round([SEQ]), json.dumps(HEADER), _round([SEQ])], "line 3: a second header line (the first is line 1)"),
    ([json.dumps(HEADER), _round([SEQ]), SUMMARY, SUMMARY], "line 4: a second summary line (the first is line 3)"),
    ([json.dumps(HEADER), SUMMARY, _round([SEQ])], "line 3: a round line after the summary (line 2)"),
])
def test_two_traces_joined_in_one_file_are_refused(lines, needle):
    with pytest.raises(ConfigError) as e:
        parse_trace(lines, "t.jsonl")
    assert needle in str(e.value) and "split them" in str(e.value)


@pytest.mark.parametrize("seqs, needle", [
    ([SEQ, SEQ], "names sequence 0 twice"),
    ([{**SEQ, "seq": 10**6}], "seqs[0].seq = 1000000 must be an integer in 0..999999"),
    ([{**SEQ, "bonus": 2**31}], "must be a token id in 0..2147483647"),
])
def test_a_round_names_each_sequence_once_with_ids_in_range(seqs, needle):
    with pytest.raises(ConfigError) as e:
        parse_trace([json.dumps(HEADER), _round(seqs)], "t.jsonl")
    assert needle in str(e.value)


@pytest.mark.parametrize("field, value, name", [
    ("tok_s", 1e30, "tok_s"), ("wall_ms", -5.0, "wall_ms"), ("prefill_ms", float("inf"), "prefill_ms"),
    ("phase_ms", {"verify": 1e30}, "phase_ms.verify"), ("per_position_acceptance", [1.0, 1e30], "per_position_acceptance[1]"),
    ("requests", [{"seq": 0, "arrival_ms": 0.0, "first_token_ms": 1e30, "finish_ms": 2.0, "output_tokens": 2}],
     "requests[0].first_token_ms"),
])
def test_a_summary_number_beyond_any_run_is_refused(field, value, name):
    summary = json.dumps({**json.loads(SUMMARY), field: value})
    with pytest.raises(ConfigError) as e:
        parse_trace([json.dumps(HEADER), _round([SEQ]), summary], "t.jsonl")
    assert f"line 3: {name} = " in str(e.value) and "must be a number in 0..1e+12 (or NaN: none counted)" in str(e.value)


def test_a_whole_trace_with_its_summary_still_parses():
    nan_rate = SUMMARY.replace("[1.0, 0.0]", "[1.0, NaN]")  # a position no round reached: nothing counted
    t = parse_trace([json.dumps(HEADER), _round([SEQ, {**SEQ, "seq": 1}]), nan_rate], "t.jsonl")
    assert [q.seq for q in t.rounds[0].seqs] == [0, 1] and t.summary.tok_s == 400.0
    assert math.isnan(t.summary.per_position_acceptance[1])
