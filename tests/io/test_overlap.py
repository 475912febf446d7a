"""ssd_sim.io.overlap: how much text a predicted run shares with its calibration (logged contexts, else prompts)."""

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.overlap import COMPOSITE_SETS, LEAK_SHARE, canonical_prompt, overlap, prompt_ids
from ssd_sim.io.trace import summarize
from tests.helpers.trace_samples import trace_from


def _run(tokens: list[int], mode: str = "sd", T: float = 0.0, seed: int = 0, prompts: str = "prompt-set:code[0:2]",
         logged: bool = True):
    """One sequence, one committed token per round; token t's context is keyed by top ids (t, t + 1)."""
    rounds = []
    for i, t in enumerate(tokens):
        seq = {"seq": 0, "accepted": 0, "bonus": t, "committed": 1}
        if logged:
            seq["dists"] = [[[t, t + 1], [-0.1 - t / 1000, -2.5], 0.05, [t, t + 1], [-0.2, -2.0], 0.1]]
        rounds.append({"round": i, "K": 1, "batch": 1, "seqs": [seq], "timings_ms": {"verify": 1.0, "round": 1.0}})
    plan = {"num_speculative_tokens": 1, "temperature": T}
    header = {"mode": mode, "plan": plan, "batch_size": 1, "prompt_source": prompts, "num_prompts": 2, "seed": seed,
              "log_topn": 2 if logged else 0}
    return trace_from(header, rounds)


def test_the_same_contexts_are_shared_text_and_others_are_not():
    cal = [_run([1, 2, 3, 4])]
    assert overlap(cal, _run([1, 2, 3, 4])).share == 1.0
    assert overlap(cal, _run([1, 2, 50, 60])).contexts == 0.5
    unseen = overlap(cal, _run([70, 80, 90, 95], prompts="prompt-set:code[2:4]"))
    assert unseen.share == 0.0 and not unseen.leaks


def test_without_logged_contexts_the_prompts_decide():
    greedy_ar = _run([1, 2], mode="ar", logged=False)
    # the same prompts at T = 0 generate the same tokens: all shared, whatever the predicted run logged
    assert overlap([greedy_ar], _run([7, 8])).share == 1.0
    assert overlap([greedy_ar], _run([7, 8], prompts="prompt-set:code[1:3]")).prompts == 0.5
    assert overlap([greedy_ar], _run([7, 8], prompts="prompt-set:chat[0:2]")).share == 0.0
    # both sampled: the same seed repeats text, another seed does not
    hot = _run([1, 2], mode="ar", T=1.0, logged=False)
    assert overlap([hot], _run([7, 8], T=1.0, logged=False)).share == 1.0
    assert overlap([hot], _run([7, 8], T=1.0, seed=3, logged=False)).share == 0.0


def test_a_run_above_the_leak_share_leaks():
    cal = [_run(list(range(100)))]
    few = overlap(cal, _run(list(range(95, 195))))
    assert few.contexts == pytest.approx(0.05) and not few.leaks  # exactly at the share: still a hold-out
    assert overlap(cal, _run(list(range(90, 190)))).leaks and LEAK_SHARE == 0.05


def test_prompt_ids_read_the_header_slice():
    assert prompt_ids(_run([1], prompts="prompt-set:code[8:16]")) == {f"code:{i}" for i in range(8, 16)}
    assert prompt_ids(_run([1], prompts="prompt-set:code[1:12:2]")) == {f"code:{i}" for i in (1, 3, 5, 7, 9, 11)}
    # ssd-run calibrate-here names its built-in set as ssd-run does, after its own prefix
    assert prompt_ids(_run([1], prompts="calibrate-here:prompt-set:code[0:7:2]")) == {"code:0", "code:2", "code:4",
                                                                                      "code:6"}
    assert prompt_ids(_run([1], prompts="calibrate-here:mine.jsonl[0:7:2]")) == {"calibrate-here:mine.jsonl[0:7:2]"}


def _pool(seqs: int = 4, batch: int = 1, prompts: str = "prompt-set:pool[0:4]"):
    """A run over `seqs` prompts, two rounds per sequence (one round per batch of `batch` sequences)."""
    rounds = []
    for j in range(0, seqs, batch):
        for _ in range(2):
            rows = [{"seq": q, "accepted": 1, "bonus": 10 * q, "committed": 2} for q in range(j, j + batch)]
            rounds.append({"round": len(rounds), "K": 1, "batch": batch, "seqs": rows,
                           "timings_ms": {"verify": 5.0 + j, "round": 10.0 + j}})
    header = {"mode": "sd", "plan": {"num_speculative_tokens": 1, "temperature": 0.0}, "batch_size": batch,
              "prompt_source": prompts, "num_prompts": seqs, "seed": 0}
    return trace_from(header, rounds)


def test_a_run_cut_to_some_requests_keeps_their_rounds_and_prompts():
    run = _pool()
    cut = run.only_requests([1, 3], "B0")
    assert [r.seqs[0].seq for r in cut.rounds] == [1, 1, 3, 3] and cut.requests == (1, 3)
    assert cut.summary is None and cut.path.endswith("[B0]")
    assert prompt_ids(cut) == {"code:1", "code:3"} and prompt_ids(run) == {f"code:{i}" for i in range(4)}
    assert summarize(cut).tokens == 8 and summarize(cut).wall_ms == pytest.approx(2 * 11.0 + 2 * 13.0)
    # the two halves of a pool share no prompt, so a greedy AR calibration on one cannot leak into the other
    assert overlap([run.only_requests([0, 2])], cut).prompts == 0.0
    strided = _pool(prompts="prompt-set:code[1:8:2]").only_requests([0, 3])
    assert prompt_ids(strided) == {"code:1", "code:7"}


def test_a_cut_that_splits_a_batched_round_or_names_no_request_is_refused():
    with pytest.raises(ConfigError, match="batches kept sequences with others"):
        _pool(batch=2).only_requests([0])
    assert len(_pool(batch=2).only_requests([0, 1]).rounds) == 2  # whole batches can be cut
    with pytest.raises(ConfigError, match="has no sequence 9"):
        _pool().only_requests([1, 9])


def test_a_pool_prompt_is_the_code_or_chat_prompt_it_holds():
    assert [canonical_prompt("pool", i) for i in (0, 23, 24, 47)] == ["code:0", "code:23", "chat:0", "chat:23"]
    assert canonical_prompt("chat", 5) == "chat:5"
    # a greedy pool run without logged contexts holds the text of the code runs on the same prompts
    pool_ar = _pool(seqs=48, prompts="prompt-set:pool[0:48]").only_requests([1, 30])
    assert overlap([pool_ar], _run([7, 8], prompts="prompt-set:code[1:2]")).share == 1.0
    assert overlap([pool_ar], _run([7, 8], prompts="prompt-set:chat[6:7]")).share == 1.0
    assert overlap([pool_ar], _run([7, 8], prompts="prompt-set:code[3:4]")).share == 0.0


def test_the_composite_sets_match_the_runtime_prompt_sets():
    from ssd_runtime.prompts import PROMPT_SETS

    for name, parts in COMPOSITE_SETS.items():
        assert PROMPT_SETS[name] == sum((PROMPT_SETS[part][:n] for part, n in parts), ())
        assert [n for _, n in parts] == [len(PROMPT_SETS[part]) for part, _ in parts]
