"""Continuous batching in-process (Target + LocalLink): finished rows are refilled from the queue, exactly;
arrivals are respected; per-request times give TTFT / TPOT as the simulator defines them."""

from __future__ import annotations

import pytest

from ssd_runtime.draft import Drafter
from ssd_runtime.draft_trace import DraftRecorder
from ssd_runtime.run import request_percentiles
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.io.records import RequestRecord
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts, reference_greedy, target_model

V = TARGET["vocab"]
N_NEW = 12
PROMPTS = make_prompts([3, 11, 6, 8, 5, 9, 4], V, seed=21)


@pytest.fixture(scope="module")
def models():
    return target_model(TARGET), target_model(DRAFT)


@pytest.fixture(scope="module")
def reference(models):
    outs, gaps = zip(*(reference_greedy(models[0], p, N_NEW) for p in PROMPTS), strict=True)
    assert min(gaps) >= 1e-3
    return list(outs)


def run(models, plan: Plan, mode: str, arrivals=None) -> tuple[list[list[int]], list[dict], Target]:
    recs: list[dict] = []
    link = None if mode == "ar" else LocalLink(lambda msg: DraftRecorder(Drafter(models[1], plan.replace(mode=mode), 0, V)))
    if link:
        link.job({})
    target = Target(models[0], TargetConfig(plan.replace(mode=mode), N_NEW), link, on_round=recs.append)
    return target.generate(PROMPTS, arrivals), recs, target


def joined_mid_run(recs: list[dict]) -> int:
    """Rounds in which a sequence had its first round while others were already decoding."""
    return sum(1 for r in recs if any(s.first for s in r.seqs) and not all(s.first for s in r.seqs))


@pytest.mark.parametrize("mode, plan", [
    ("ar", Plan()),
    ("sd", Plan(num_speculative_tokens=3)),
    ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 1))),
    ("ssd", Plan(num_speculative_tokens=3, fan_out=(1, 1, 1, 1), jit_redraft="batch")),
])
def test_refilled_rows_give_the_autoregressive_output(models, reference, mode, plan):
    outs, recs, target = run(models, plan.replace(batch_size=3), mode)
    assert outs == reference and target.faults == []
    assert max(r.batch for r in recs) == 3
    if mode != "ar":  # AR rows commit one token a round, so they finish (and are refilled) together
        assert joined_mid_run(recs) >= 2  # later sequences joined a running batch
    assert sorted(r.seq for r in target.requests) == list(range(len(PROMPTS)))


def test_requests_wait_for_their_arrival_and_a_free_row(models, reference):
    arrivals = [0.0, 0.0, 0.0, 0.0, 400.0, 400.0, 2000.0]
    outs, recs, target = run(models, Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), batch_size=2), "ssd",
                             arrivals)
    assert outs == reference
    assert max(r.batch for r in recs) == 2
    by_seq = {r.seq: r for r in target.requests}
    for sid, r in by_seq.items():
        assert r.first_token_ms >= arrivals[sid]
        assert r.finish_ms >= r.first_token_ms and r.output_tokens == N_NEW
    assert by_seq[6].first_token_ms >= 2000.0
    assert by_seq[2].first_token_ms >= min(by_seq[0].finish_ms, by_seq[1].finish_ms)  # queued for a row


def test_ttft_and_tpot_follow_the_simulators_definitions():
    reqs = [RequestRecord(0, arrival_ms=0.0, first_token_ms=10.0, finish_ms=110.0, output_tokens=11),
            RequestRecord(1, arrival_ms=5.0, first_token_ms=35.0, finish_ms=35.0, output_tokens=1)]
    p = request_percentiles(reqs)
    assert p["ttft_ms_p50"] == pytest.approx(20.0) and p["ttft_ms_p99"] == pytest.approx(29.8)
    assert p["tpot_ms_p50"] == pytest.approx(10.0)  # the 1-token request has no TPOT
    assert request_percentiles([])["ttft_ms_p50"] is None


@pytest.mark.parametrize("T", [1e-30, 1e-45, 5e-324])
@pytest.mark.parametrize("mode", ["ar", "ssd"])
def test_a_vanishing_temperature_samples_the_greedy_limit(models, reference, mode, T):
    """T far below float32's range: sampling is its T -> 0+ limit (the argmax), not overflowed logits."""
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), batch_size=3, temperature=T)
    outs, _, target = run(models, plan, mode)
    assert outs == reference and target.faults == []


@pytest.mark.parametrize("T, used", [(4.9e-5, 0.0), (1e-30, 0.0), (5e-5, 5e-5), (0.7, 0.7)])
def test_target_and_draft_share_the_planners_greedy_floor(models, T, used):
    from ssd_sim.io.limits import GREEDY_BELOW_T

    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 1), temperature=T)
    assert GREEDY_BELOW_T == 5e-5
    assert Target(models[0], TargetConfig(plan, N_NEW)).T == used == Drafter(models[1], plan, 0, V).T
