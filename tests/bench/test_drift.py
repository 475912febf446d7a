"""bench/drift.py: the draft's drift is read beside the verify's in the same repeat runs."""

import dataclasses
import math

import pytest

from ssd_sim.io.records import Phase
from ssd_sim.io.trace import read_trace
from ssd_sim.plan.plan import Plan
from tests.helpers.bench import load_bench
from tests.helpers.synthetic_traces import write_trace

BENCH = load_bench("drift")


def _scaled(trace, verify: float, draft: float):
    """The trace with every verify `verify` times and every draft step `draft` times as long."""
    def scale(r):
        ms = dict(r.timings_ms)
        ms[Phase.VERIFY] *= verify
        for ph in (Phase.DRAFT_SD, Phase.DRAFT_BRANCH):
            if ms.get(ph):
                ms[ph] *= draft
        return dataclasses.replace(r, timings_ms=ms)
    return dataclasses.replace(trace, rounds=[scale(r) for r in trace.rounds])


def test_a_draft_slowed_more_than_the_verify_sits_apart_by_half_the_log_ratio_each(tmp_path):
    for mode in ("sd", "ssd"):
        run = read_trace(write_trace(tmp_path / f"{mode}.jsonl", Plan(mode=mode, num_speculative_tokens=2), rounds=41))
        pairs = BENCH.draft_against_verify([[run, _scaled(run, 1.1, 1.2)]])
        half_v, half_d = math.log(1.1) / 2, math.log(1.2) / 2
        assert pairs == [pytest.approx((-half_v, -half_d)), pytest.approx((half_v, half_d))]
        assert BENCH._apart(pairs) == f"{half_d - half_v:.1%} (2)"  # (ln 1.2 - ln 1.1) / 2 = 4.4% each run


def test_ar_repeats_have_no_draft_to_compare(tmp_path):
    run = read_trace(write_trace(tmp_path / "ar.jsonl", Plan(mode="ar"), rounds=41))
    assert BENCH.draft_against_verify([[run, _scaled(run, 1.1, 1.0)]]) == []
    assert BENCH._apart([]) == "-"
