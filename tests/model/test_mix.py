"""A workload mix weighs the calibration's requests to the predicted traffic's class shares (model.mix)."""

from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import calibrate_traces
from ssd_sim.model.logged import logged_positions, response
from ssd_sim.model.mix import RequestMix, request_weights, tags_by_range
from tests.model.test_logged import V, pairs, trace_of

ROOT = Path(__file__).resolve().parents[2]
POOL40 = sorted((ROOT / "traces" / "cpu-fp32-pool40").glob("*.jsonl"))
GRID = ROOT / "traces" / "cpu-fp32-grid"
CLASSES = ["code"] * 24 + ["chat"] * 24  # the pool: 24 code prompts, then 24 chat prompts


def test_shares_are_parsed_and_normalised_counts_too():
    assert RequestMix.parse("code=0.6, chat=0.4").shares == (("chat", 0.4), ("code", 0.6))
    assert RequestMix.parse("code=3,chat=1").shares == (("chat", 0.25), ("code", 0.75))
    assert RequestMix.parse("code=1,chat=0").tags == ("code",)  # a class of share 0 is left out
    assert RequestMix.of_requests(["code", "chat", "code", "code"]).describe() == "chat 25%, code 75%"


@pytest.mark.parametrize("text,says", [("code", "is not CLASS=SHARE"), ("code=0.5,code=0.5", "given twice"),
                                       ("code=-1", "finite number >= 0"), ("code=nan", "finite number >= 0"),
                                       ("code=x", "finite number >= 0"), ("code=0,chat=0", "every share is 0"),
                                       ("c de=1", "is not CLASS=SHARE"), ("=1", "is not CLASS=SHARE")])
def test_a_bad_mix_is_one_line_naming_the_fix(text, says):
    with pytest.raises(ConfigError, match=says) as e:
        RequestMix.parse(text)
    assert e.value.field == "mix" and "\n" not in str(e.value)


def test_each_request_weighs_its_class_share_over_its_class_count():
    w = RequestMix.parse("code=0.5,chat=0.5").weights(["code", "code", "code", "chat", "other"])
    assert w == pytest.approx([0.5 / 3, 0.5 / 3, 0.5 / 3, 0.5, 0.0])
    with pytest.raises(ConfigError, match="class 'math' has no request in the calibration"):
        RequestMix.parse("math=1").weights(["code", "chat"])
    with pytest.raises(ConfigError, match="1 of the requests have no class"):
        RequestMix.of_requests(["code", ""])
    # per context: its request's weight
    assert request_weights(RequestMix.parse("a=1"), np.array([0, 0, 1, 2]), ["a", "b", "a"]) == \
        pytest.approx([0.5, 0.5, 0.0, 0.5])
    assert request_weights(None, np.array([0, 1]), ["a", "b"]) is None


def test_requests_are_worth_what_they_add_to_the_mixs_weighted_mean():
    """Kish's effective size: the weighted mean's variance is the within-class variance over it."""
    code = RequestMix.parse("code=1")
    assert code.effective_requests(Counter(["code"] * 12 + ["chat"] * 24)) == pytest.approx(12.0)
    halves = RequestMix.parse("code=1,chat=1")
    assert halves.effective_requests(Counter(["code"] * 12 + ["chat"] * 12)) == pytest.approx(24.0)
    # half A holds 13 code and 11 chat, half B the other way round: 1 / ((11/24)^2 / 13 + (13/24)^2 / 11)
    b = RequestMix.of_requests(["code"] * 11 + ["chat"] * 13)
    assert b.effective_requests(Counter(["code"] * 13 + ["chat"] * 11)) == pytest.approx(23.35, abs=0.01)
    assert code.effective_requests(Counter(["chat"] * 5)) == 0.0  # no request of the mix's class


def test_the_calibrations_sample_size_is_what_its_requests_are_worth_to_the_mix(pool40):
    code, _ = calibrated("code=1")
    both, _ = calibrated("code=1,chat=1")
    plain, _ = calibrated(None)
    assert (code.uncertainty.sequences, both.uncertainty.sequences, plain.uncertainty.sequences) == (24, 48, 48)
    assert code.uncertainty.run_sequences == 48  # a predicted run's default size stays a calibration run's
    assert "over 24 sequences' worth under the mix code 100%" in code.uncertainty.sources["acceptance_logit_sd"]

    # a code run and a chat run recorded apart: each class counts the requests its own trace decoded
    runs = [read_trace(p).with_tags(CLASSES) for p in POOL40 if "ar" not in p.name][:1]
    apart = [runs[0].only_requests(range(24)), runs[0].only_requests(range(24, 48))]
    split, _ = calibrate_traces(apart, ["code.jsonl", "chat.jsonl"], mix=RequestMix.parse("code=1,chat=1"))
    assert split.uncertainty.sequences == 48


def two_classes(n_a: int, n_b: int):
    """A trace of n_a contexts of class a and n_b of class b (one request each), drawn from different pairs."""
    pa, qa = pairs(n_a, seed=1)
    pb, qb = pairs(n_b, seed=7)
    pb = pb ** 3 / (pb ** 3).sum(1, keepdims=True)  # b: a sharper target, so the classes' rates differ
    both = trace_of(np.concatenate([pa, pb]), np.concatenate([qa, qb]), V).with_tags(["a"] * n_a + ["b"] * n_b)
    return both, trace_of(pa, qa, V), trace_of(pb, qb, V)


def test_a_mix_of_one_class_gives_that_class_rates_and_halves_give_the_mean_of_the_classes():
    both, only_a, only_b = two_classes(60, 180)
    lp = logged_positions([both])
    ra, rb = response(logged_positions([only_a]), 1.0, min_contexts=1), response(logged_positions([only_b]), 1.0,
                                                                                 min_contexts=1)
    assert abs(ra.acceptance[0] - rb.acceptance[0]) > 0.05
    mixed = response(lp, 1.0, min_contexts=1, weights=request_weights(RequestMix.parse("a=1"), lp.group, lp.group_tags))
    assert mixed.acceptance == pytest.approx(ra.acceptance)
    assert mixed.accepted == pytest.approx(ra.accepted) and mixed.reject == pytest.approx(ra.reject)
    half = response(lp, 1.0, min_contexts=1,
                    weights=request_weights(RequestMix.parse("a=1,b=1"), lp.group, lp.group_tags))
    assert half.acceptance[0] == pytest.approx((ra.acceptance[0] + rb.acceptance[0]) / 2)
    plain = response(lp, 1.0, min_contexts=1)  # unweighted: 1 : 3, the calibration's own sample
    assert plain.acceptance[0] == pytest.approx((ra.acceptance[0] + 3 * rb.acceptance[0]) / 4)


@pytest.fixture(scope="module")
def pool40():
    return [read_trace(p).with_tags(CLASSES) for p in POOL40]


@functools.cache
def calibrated(mix: str | None):
    """(profile, report) of the tagged pool40 runs under this mix (None: unweighted), once per test session."""
    return calibrate_traces([read_trace(p).with_tags(CLASSES) for p in POOL40], POOL40,
                            mix=RequestMix.parse(mix) if mix else None)


def test_calibrating_for_one_class_equals_calibrating_on_that_class_alone(pool40):
    code, _ = calibrated("code=1")
    alone, _ = calibrate_traces([t.only_requests(range(24)) for t in pool40], POOL40)
    at0, alone0 = code.acceptance.at(0.0), alone.acceptance.at(0.0)
    assert at0.acceptance == pytest.approx(alone0.acceptance, rel=1e-9)
    assert np.array(at0.primary_hit.accepted) == pytest.approx(np.array(alone0.primary_hit.accepted), rel=1e-9)
    assert np.array(at0.primary_hit.reject) == pytest.approx(np.array(alone0.primary_hit.reject), rel=1e-9)
    # at T = 1 the truncation share (logged.truncation_share) is measured on every counted context, class-blind,
    # so the code-only calibration adds back a slightly larger part of the bound: 0.896 against 0.887
    assert code.acceptance.at(1.0).acceptance == pytest.approx(alone.acceptance.at(1.0).acceptance, abs=0.012)
    assert "code 100% of requests (72 calibrated)" in code.provenance["acceptance.mix"]


def test_the_mix_moves_the_rates_and_the_spread_is_taken_within_classes(pool40):
    plain, _ = calibrated(None)
    tokens = {m: calibrated(m)[0] for m in ("code=1", "chat=1", "code=1,chat=1")}
    e = {m: p.acceptance.at(0.0).expected_tokens(2) for m, p in tokens.items()}
    # measured on the pool (40 tokens per request, SD K = 2 at T = 0): code 2.665, chat 2.164, both pools 2.388
    assert e["code=1"] == pytest.approx(2.665, abs=0.005) and e["chat=1"] == pytest.approx(2.164, abs=0.005)
    assert plain.acceptance.at(0.0).expected_tokens(2) == pytest.approx(2.388, abs=0.005)
    # 24 + 24 requests: the halves mix weighs each request as the unweighted calibration does
    assert e["code=1,chat=1"] == pytest.approx(plain.acceptance.at(0.0).expected_tokens(2), rel=1e-9)
    # the request-to-request spread without the code / chat difference: 0.76 of logit acceptance against 1.09
    assert tokens["code=1,chat=1"].uncertainty.acceptance_logit_sd == pytest.approx(0.763, abs=0.01)
    assert plain.uncertainty.acceptance_logit_sd == pytest.approx(1.087, abs=0.01)
    assert "within classes" in tokens["code=1,chat=1"].uncertainty.sources["acceptance_logit_sd"]


def test_counted_acceptance_without_logged_distributions_is_weighted_too():
    # the grid's traces log no distributions: acceptance and hit curves come from counts and ranks
    paths = sorted(GRID.glob("*-b1-t0.jsonl"))
    traces = [read_trace(p) for p in paths]
    n = max(s.seq for t in traces for r in t.rounds for s in r.seqs) + 1
    tags = ["even" if i % 2 == 0 else "odd" for i in range(n)]
    even, _ = calibrate_traces([t.with_tags(tags) for t in traces], paths, mix=RequestMix.parse("even=1"))
    alone, _ = calibrate_traces([t.only_requests(range(0, n, 2)) for t in traces], paths)
    assert even.acceptance.at(0.0).acceptance == pytest.approx(alone.acceptance.at(0.0).acceptance, rel=1e-9)
    assert even.acceptance.at(0.0).primary_hit.miss_at_one == pytest.approx(alone.acceptance.at(0.0).primary_hit.miss_at_one,
                                                                        rel=1e-6)


def test_a_mix_naming_a_class_the_calibration_never_ran_is_refused(pool40):
    with pytest.raises(ConfigError, match="class 'math' has no request in the runs"):
        calibrate_traces(pool40, POOL40, mix=RequestMix.parse("math=1"))
    untagged = [read_trace(p) for p in POOL40]
    with pytest.raises(ConfigError, match="the traces record no request_tags"):
        calibrate_traces(untagged, POOL40, mix=RequestMix.parse("code=1"))


def test_classes_by_sequence_range_name_each_sequence_once():
    assert tags_by_range("code=0-2,chat=3-4") == ["code"] * 3 + ["chat"] * 2
    assert tags_by_range("chat=2") == ["", "", "chat"]
    for bad, says in (("code=0-", "is not CLASS=FIRST-LAST"), ("code=3-1", "from low to high"),
                      ("code=0-3,chat=2-5", "overlaps another range"), ("code", "is not CLASS=FIRST-LAST")):
        with pytest.raises(ConfigError, match=says):
            tags_by_range(bad)


def test_requests_a_mix_leaves_out_are_named_in_a_warning(pool40):
    _, report = calibrated("code=1")
    assert "72 of 144 calibrated requests weigh 0 under the mix code 100%: chat x72" in "\n".join(report.warnings)
    _, both = calibrated("code=1,chat=1")
    assert not any("weigh 0" in w for w in both.warnings)
