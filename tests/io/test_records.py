"""The trace records: one declaration, a round trip through ssd-trace/2, and ssd-trace/1 traces still read."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.records import PHASES, SCHEMA, Header, Phase, RoundRecord, SeqRecord
from ssd_sim.io.trace import TraceWriter, parse_trace, read_trace, summarize
from ssd_sim.sim.des import SIM_PHASES
from tests.helpers.trace_samples import summary_of

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "traces" / "cpu-fp32-grid"


def ssd_round(i: int) -> RoundRecord:
    seqs = [SeqRecord(0, 2, 17, 3, first=i == 0, hit=i > 0, backup=None if i > 0 else "jit", fan_out=2, bonus_rank=1),
            SeqRecord(1, 0, 5, 1, hit=False, backup="fast", fan_out=1, bonus_rank=None, lookup_hit=True)]
    timings = {**dict.fromkeys(PHASES, 0.0), "verify": 10.0, "draft_glue": 2.0, "draft_branch": 4.5, "round": 12.5}
    return RoundRecord(i, 3, 2, seqs, timings)


def test_a_written_trace_reads_back_as_the_same_records(tmp_path):
    header = Header(mode="ssd", plan={"num_speculative_tokens": 3}, batch_size=2, seed=4, extra={"note": "x"})
    rounds = [ssd_round(i) for i in range(3)]
    w = TraceWriter(tmp_path / "t.jsonl", header)
    for r in rounds:
        w.round(r)
    w.close(summary_of(header, rounds))
    t = read_trace(tmp_path / "t.jsonl")
    assert t.header == header and t.header.schema == SCHEMA == "ssd-trace/2"
    assert t.rounds == rounds
    assert t.summary.tok_s == pytest.approx(summarize(t).tok_s) == pytest.approx(4 * 3 / 37.5 * 1e3)


def test_version_2_leaves_defaults_out_and_version_1_spells_them():
    lean = {"type": "round", **ssd_round(1).to_json()}
    assert "first" not in lean["seqs"][0] and "lookup_hit" not in lean["seqs"][0]
    assert set(lean["timings_ms"]) == {"verify", "draft_glue", "draft_branch", "round"}  # phases that ran
    full = json.loads(json.dumps(lean))  # the same round as ssd-trace/1 wrote it: every field, nulls and zeros
    for s in full["seqs"]:
        s.setdefault("first", False)
        for key in ("hit", "backup", "fan_out", "bonus_rank"):
            s.setdefault(key, None)
    full["timings_ms"] = {**dict.fromkeys(PHASES, 0.0), **full["timings_ms"]}
    v1 = {"type": "header", "schema": "ssd-trace/1", "mode": "ssd", "plan": {}, "batch_size": 2}
    v2 = {**v1, "schema": "ssd-trace/2"}
    one = parse_trace([json.dumps(v1), json.dumps(full)])
    two = parse_trace([json.dumps(v2), json.dumps(lean)])
    assert one.rounds == two.rounds == [ssd_round(1)]
    assert len(json.dumps(lean)) < 0.8 * len(json.dumps(full))


@pytest.mark.parametrize("path", sorted(GRID.glob("*.jsonl"))[:6], ids=lambda p: p.name)
def test_shipped_version_1_traces_read_and_their_metrics_match_what_the_runtime_printed(path):
    t = read_trace(path)
    assert t.header.schema == "ssd-trace/1" and t.rounds and t.summary is not None
    m = summarize(t)
    assert (m.rounds, m.tokens) == (t.summary.rounds, t.summary.tokens)
    assert m.tok_s == pytest.approx(t.summary.tok_s, rel=1e-9)
    assert m.mean_accept_len == pytest.approx(t.summary.mean_accept_len, rel=1e-9)


def test_an_unknown_schema_and_an_impossible_entry_are_one_line_naming_the_field():
    head = {"type": "header", "schema": "ssd-trace/9", "mode": "ssd", "plan": {}, "batch_size": 1}
    with pytest.raises(ConfigError, match=r"'ssd-trace/9' unsupported, expected one of 'ssd-trace/1', 'ssd-trace/2'"):
        parse_trace([json.dumps(head)], source="t.jsonl")
    head["schema"] = SCHEMA
    bad = {"type": "round", "round": 0, "K": 2, "seqs": [{"seq": 0, "accepted": 1, "bonus": 3, "committed": 2,
                                                           "backup": "slow"}], "timings_ms": {}}
    with pytest.raises(ConfigError) as e:
        parse_trace([json.dumps(head), json.dumps(bad)], source="t.jsonl")
    assert (e.value.field, str(e.value)) == ("backup", "backup: t.jsonl line 2: seqs[0].backup = 'slow' must be jit, "
                                                       "fast or null; the trace is corrupt or not from ssd-run")


def test_the_simulator_times_phases_under_the_runtimes_names():
    assert set(SIM_PHASES) <= set(PHASES) and {Phase.DRAFT_GLUE, Phase.DRAFT_BRANCH} <= set(SIM_PHASES)


def test_a_summary_without_metrics_takes_them_from_the_rounds():
    head = {"type": "header", "schema": "ssd-trace/1", "mode": "ssd", "plan": {}, "batch_size": 2}
    lines = [json.dumps(head), json.dumps({"type": "round", **ssd_round(0).to_json()}),
             json.dumps({"type": "summary", "tokens": 4, "faults": ["x"], "note": "hand-written"})]
    t = parse_trace(lines)
    assert t.summary.tok_s == pytest.approx(summarize(t).tok_s) and t.summary.faults == ("x",)
    assert t.summary.extra == {"note": "hand-written"}


def test_a_graph_warmup_round_is_marked_in_its_line_and_a_steady_round_keeps_the_line_it_had():
    head = {"type": "header", "schema": SCHEMA, "mode": "ssd", "plan": {}, "batch_size": 2}
    warm = dataclasses.replace(ssd_round(1), warmup=True)
    line = {"type": "round", **warm.to_json()}
    assert line["warmup"] is True and "warmup" not in ssd_round(1).to_json()
    assert parse_trace([json.dumps(head), json.dumps(line)]).rounds == [warm]
    line["warmup"] = "yes"
    with pytest.raises(ConfigError) as e:
        parse_trace([json.dumps(head), json.dumps(line)], source="t.jsonl")
    assert e.value.field == "warmup" and str(e.value).startswith("warmup: t.jsonl line 2: warmup = 'yes' must be true")
