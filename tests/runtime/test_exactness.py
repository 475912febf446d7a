"""Exactness of SD and SSD on two real processes (cpu + gloo), one process pair for the whole module.

Greedy: outputs equal autoregressive greedy decoding token for token. The reference is computed here by
full recomputation without the runtime, and the smallest top-1/top-2 logit gap along it is asserted to be
large (>= 1e-3, while cached and fresh logits differ by ~1e-5), so float noise between batched/cached and fresh forwards cannot flip an argmax; no seed was
picked to hide a near-tie.
Sampling: on a vocabulary of 8, the distribution of whole 4-token continuations under SSD matches the target's
exact distribution (enumerated) by a chi-square goodness-of-fit test at alpha = 1e-3 with 4,000 samples; two
deliberately broken verifiers fail the same test.
"""

from __future__ import annotations

import pytest

from ssd_runtime.hooks import TestHooks
from ssd_runtime.run import Job, Session
from ssd_runtime.sampling import NO_TRUNCATION, Truncation
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import (
    ALPHA,
    DRAFT,
    SMALL_DRAFT,
    SMALL_TARGET,
    TARGET,
    continuation_pvalue,
    exact_continuations,
    make_prompts,
    reference_greedy,
    spec,
    target_model,
)

N_NEW = 24
PROMPTS = make_prompts([3, 11, 6, 8], TARGET["vocab"], seed=0)  # 4 prompts: at b = 3 the 4th refills a row


@pytest.fixture(scope="module")
def session():
    with Session(spec(TARGET), spec(DRAFT)) as s:
        yield s


@pytest.fixture(scope="module")
def reference():
    model = target_model(TARGET)
    outs, gaps = zip(*(reference_greedy(model, p, N_NEW) for p in PROMPTS), strict=True)
    assert min(gaps) >= 1e-3, "the tiny target has a near-tie: pick another seed in runtime_helpers.TARGET"
    return list(outs)


def test_autoregressive_mode_equals_the_reference(session, reference):
    for b in (1, 3):
        res = session.run(Job(Plan(batch_size=b, mode="ar"), PROMPTS, N_NEW))
        assert res.outputs == reference and res.faults == []


GREEDY_CASES = {
    "sd-K1": ("sd", Plan(num_speculative_tokens=1)),
    "sd-K3": ("sd", Plan(num_speculative_tokens=3)),
    "ssd-K1-jit": ("ssd", Plan(num_speculative_tokens=1, fan_out=(1, 2))),
    "ssd-K2-fast": ("ssd", Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), backup="fast")),
    "ssd-K3-jit-geometric": ("ssd", Plan(num_speculative_tokens=3, fan_out=(3, 2, 1, 2), fan_out_miss=(2, 2, 2, 2))),
    "ssd-K3-jit-batch-redraft": ("ssd", Plan(num_speculative_tokens=3, fan_out=(1, 1, 1, 1), jit_redraft="batch")),
    "ssd-K2-adaptive": ("ssd", Plan(num_speculative_tokens=2, fan_out=(1, 0, 2), backup="adaptive",
                                    backup_threshold=2)),
}


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize("case", list(GREEDY_CASES))
def test_greedy_speculative_output_equals_autoregressive(session, reference, case, b):
    mode, plan = GREEDY_CASES[case]
    res = session.run(Job(plan.replace(batch_size=b, mode=mode), PROMPTS, N_NEW))
    assert res.faults == []
    assert res.outputs == reference
    seqs = [s for r in res.rounds for s in r.seqs]
    assert {s.accepted for s in seqs} == set(range(plan.K + 1))  # every outcome k = 0..K occurred
    if mode == "ssd":
        hits = [s.hit for s in seqs if not s.first]
        assert any(hits) and not all(hits)  # both the cache and the backup served rounds


@pytest.mark.parametrize("arrivals", [[0.0], [0.0, 1.0, float("nan"), 2.0], [0.0, -1.0, 2.0, 3.0]])
def test_arrival_times_must_give_one_finite_time_per_prompt(session, arrivals):
    with pytest.raises(ConfigError, match="arrivals_ms: needs one finite time >= 0"):
        session.run(Job(Plan(mode="ar"), PROMPTS, N_NEW, arrivals_ms=arrivals))


def test_adaptive_backup_switches_to_fast_at_the_threshold(session):
    mode, plan = GREEDY_CASES["ssd-K2-adaptive"]
    for b, want in ((1, {"jit"}), (3, {"fast"})):
        res = session.run(Job(plan.replace(batch_size=b, mode=mode), PROMPTS[:b], N_NEW))
        first_round = res.rounds[0].seqs
        assert {s.backup for s in first_round} == want


def test_trace_of_a_speculative_run_summarizes_consistently(session, tmp_path):
    path = tmp_path / "ssd.jsonl"
    plan = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), batch_size=3)
    res = session.run(Job(plan.replace(mode="ssd"), PROMPTS, N_NEW, trace_path=str(path), header={"prompt_source": "test"}))
    tr = read_trace(path)
    m = summarize(tr)
    seqs = [s for r in tr.rounds for s in r.seqs]
    assert tr.header.mode == "ssd" and tr.header.plan["fan_out"] == [2, 1, 1]
    assert tr.header.prompt_source == "test" and tr.header.versions["torch"]
    assert m.tokens == sum(len(o) for o in res.outputs) - len(PROMPTS)  # all but the prefill tokens
    assert m.rounds == len(tr.rounds) == tr.summary.rounds
    assert m.mean_accept_len == pytest.approx(1 + sum(s.accepted for s in seqs) / len(seqs))
    assert m.acceptance_rate == pytest.approx(sum(s.accepted for s in seqs) / (2 * len(seqs)))
    looked = [s for s in seqs if not s.first]
    assert m.hit_rate == pytest.approx(sum(s.hit for s in looked) / len(looked))
    assert 0 < m.hit_rate < 1 and m.tok_s > 0 and tr.summary.tok_s == pytest.approx(m.tok_s)
    for ph in ("target_wait", "verify", "commit", "draft_lookup", "draft_backup", "draft_glue", "draft_branch"):
        assert m.phase_ms[ph] > 0, ph
    ranked = [s for s in seqs if s.bonus_rank is not None]
    assert len(ranked) >= len(seqs) - len(PROMPTS)  # every bonus is ranked, except maybe the very last ones


# ---- sampling: distribution of continuations ------------------------------------------------------------
SAMPLES = 4000
REFILL_SAMPLES = 800  # a b = 3 run costs ~33 ms a request on this host (b = 1: ~1 ms), so fewer than SAMPLES
SMALL_PROMPT = [1, 2, 3]
SMALL_NEW = 4
SAMPLING_PLAN = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), temperature=1.0, batch_size=SAMPLES)


@pytest.fixture(scope="module")
def exact():
    return exact_continuations(target_model(SMALL_TARGET), SMALL_PROMPT, SMALL_NEW, 1.0)


def sampled(session, plan: Plan, hooks: TestHooks | None = None, seed: int = 0, mode: str = "ssd",
            n: int = SAMPLES, truncation: Truncation = NO_TRUNCATION):
    res = session.run(Job(plan.replace(mode=mode), [SMALL_PROMPT] * n, SMALL_NEW, seed=seed, target=spec(SMALL_TARGET),
                          draft=spec(SMALL_DRAFT), hooks=hooks, truncation=truncation))
    assert res.faults == []
    return [tuple(o) for o in res.outputs], res


@pytest.mark.parametrize("backup", ["jit", "fast"])
@pytest.mark.parametrize("C", [1.0, 0.3])
def test_ssd_sampling_matches_the_target_distribution(session, exact, C, backup):
    samples, res = sampled(session, SAMPLING_PLAN.replace(saguaro_c=C, backup=backup))
    pvalue = continuation_pvalue(samples, exact)
    seqs = [s for r in res.rounds for s in r.seqs if not s.first]
    assert 0.1 < sum(s.hit for s in seqs) / len(seqs) < 0.9  # the cache served a good share of rounds
    assert pvalue > ALPHA, f"C={C} backup={backup}: chi-square p = {pvalue:.3g}"


def test_ssd_sampling_with_a_per_position_c_matches_the_target_distribution(session, exact):
    samples, _ = sampled(session, SAMPLING_PLAN.replace(saguaro_c_list=(0.2, 0.8)))
    assert continuation_pvalue(samples, exact) > ALPHA


@pytest.mark.parametrize("mode", ["sd", "ssd"])
def test_sampling_with_refilled_rows_at_b3_matches_the_target_distribution(session, exact, mode):
    """Continuous batching at b = 3: 800 requests through 3 rows, each refilled as soon as it finishes."""
    samples, res = sampled(session, SAMPLING_PLAN.replace(batch_size=3), mode=mode, n=REFILL_SAMPLES)
    mixed = [r for r in res.rounds if len({s.first for s in r.seqs}) > 1]
    assert len(mixed) > REFILL_SAMPLES / 10  # requests joined running batches all along
    assert continuation_pvalue(samples, exact) > ALPHA


def test_sd_sampling_matches_the_target_distribution(session, exact):
    samples, _ = sampled(session, SAMPLING_PLAN, mode="sd")
    assert continuation_pvalue(samples, exact) > ALPHA


def test_verifier_testing_with_the_unscaled_q_fails_the_same_test(session, exact):
    """Draft samples from Saguaro q_C (C = 0.3) but reports the plain q: the ratio test is then biased."""
    samples, _ = sampled(session, SAMPLING_PLAN.replace(saguaro_c=0.3), TestHooks(report_unscaled_q=True))
    assert continuation_pvalue(samples, exact) < ALPHA


def test_per_position_c_with_the_unscaled_q_fails_the_same_test(session, exact):
    samples, _ = sampled(session, SAMPLING_PLAN.replace(saguaro_c_list=(0.2, 0.3)), TestHooks(report_unscaled_q=True))
    assert continuation_pvalue(samples, exact) < ALPHA


def test_greedy_matching_of_fast_backup_rows_fails_the_same_test(session, exact):
    """The reference engine's fast path at T > 0 (greedy matching instead of q = delta) is not exact."""
    samples, _ = sampled(session, SAMPLING_PLAN.replace(backup="fast"), TestHooks(greedy_fast=True))
    assert continuation_pvalue(samples, exact) < ALPHA


# ---- top-k / top-p: exact for the truncated target distribution ---------------------------------------------
TRUNCATION = Truncation(top_k=5, top_p=0.85)


@pytest.fixture(scope="module")
def exact_truncated():
    return exact_continuations(target_model(SMALL_TARGET), SMALL_PROMPT, SMALL_NEW, 1.0, TRUNCATION.top_k,
                               TRUNCATION.top_p)


@pytest.mark.parametrize(("mode", "backup"), [("ar", "jit"), ("sd", "jit"), ("ssd", "jit"), ("ssd", "fast")])
def test_top_k_top_p_sampling_matches_the_truncated_target_distribution(session, exact, exact_truncated, mode,
                                                                        backup):
    samples, res = sampled(session, SAMPLING_PLAN.replace(saguaro_c=0.5, backup=backup), mode=mode,
                           truncation=TRUNCATION)
    assert continuation_pvalue(samples, exact_truncated) > ALPHA
    assert continuation_pvalue(samples, exact) < ALPHA  # the truncation acts: the plain distribution is rejected
    assert min(sum(p > 0 for p in exact_truncated.values()), len(set(samples))) > 20
