"""ssd_sim.plan.compare: per-round series of a trace and its measured metrics beside the prediction."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.model.presets import get_preset
from ssd_sim.plan import compare
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.predict import predict_ssd
from tests.helpers.trace_samples import write_trace


@pytest.fixture(scope="module")
def prof():
    return get_preset("llama70b-1b-h100")


def test_trace_series_and_predicted_vs_measured(tmp_path, prof):
    trace = read_trace(write_trace(tmp_path / "t.jsonl", rounds=30, batch=2))
    s = compare.trace_series(trace, window=5)
    assert s["round"] == list(range(30))
    r3 = trace.rounds[3].seqs
    assert s["accept_len"][3] == pytest.approx(np.mean([q.accepted + 1 for q in r3]))
    assert math.isnan(s["hit_rate"][0])  # first round: no lookups that can hit
    looked = [q for r in trace.rounds[1:6] for q in r.seqs]
    assert s["rolling_hit_rate"][5] == pytest.approx(sum(q.hit for q in looked) / len(looked))
    assert s["phase_ms"]["verify"] == [10.0] * 30
    pvm = compare.predicted_vs_measured(prof, trace)
    m = summarize(trace)
    names = [row[0] for row in pvm["rows"]]
    assert names[-1] == "cache hit rate"
    assert pvm["rows"][0][2] == m.tok_s and pvm["rows"][2][2] == m.hit_rate
    plan = Plan.from_dict(trace.header.plan)
    assert compare.trace_plan(trace) == plan.replace(batch_size=2, mode="ssd")
    assert pvm["prediction"]["per_seq_tok_s"] == predict_ssd(prof, plan).per_seq_tok_s
    assert [row[3] for row in pvm["rows"]] == [None] * 3
    sim = compare.predicted_vs_measured(prof, trace, {"total_tok_s": 9.0, "mean_accept_len": 2.0, "hit_rate": 0.5})
    assert [row[3] for row in sim["rows"]] == [9.0, 2.0, 0.5]


def test_position_curves_put_counted_derived_and_profile_rates_side_by_side(tmp_path, prof):
    from tests.helpers.synthetic_traces import add_greedy_dists
    from tests.helpers.synthetic_traces import write_trace as write_synthetic

    path = write_synthetic(tmp_path / "sd.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=200, seed=4)
    bare = compare.position_curves(read_trace(path), prof)
    assert bare["derived_acceptance"] is None and len(bare["measured_acceptance"]) == 3
    a = prof.acceptance.at(0.0).acceptance
    assert bare["profile_acceptance"] == pytest.approx([a[min(k, len(a) - 1)] for k in range(3)])
    c = compare.position_curves(read_trace(add_greedy_dists(path)), prof)
    assert c["derived_acceptance"][0] == pytest.approx(c["measured_acceptance"][0])  # greedy: the same events
    assert len(c["derived_hit"]) == len(c["profile_hit"]) == 4 and all(0 <= h <= 1 for h in c["derived_hit"])
    assert c["measured_hit"] == [None] * 4  # SD traces have no cache to hit
