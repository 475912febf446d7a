"""ssd_sim.io.overlap: how much text a predicted run shares with its calibration (logged contexts, else prompts)."""

import pytest

from ssd_sim.io.overlap import LEAK_SHARE, overlap, prompt_ids
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
