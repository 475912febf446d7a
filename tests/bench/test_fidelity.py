"""The shipped real CPU traces: calibration + simulator predict runs held out by prompts, modes, temperature, C and
batch size (bench/fidelity.py). Only the prompt splits hold out text: the others predict runs on the calibration's
own prompts (at T = 0 the same tokens), which the overlap check refuses as hold-outs; they are still run with
allow_leaks, as configuration checks without a goal, so a regression fails."""

import json
import math
import os
from pathlib import Path

import pytest

from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.model.calibrate import calibrate, calibrate_traces
from ssd_sim.model.drift import SHIPPED_DRIFTS
from ssd_sim.model.profile import load_profile_file
from ssd_sim.model.residual import (
    SHIPPED_RESIDUAL,
    calibration_groups,
    calibration_residuals,
    pooled_residual,
    prior_dof,
)
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ssd
from tests.helpers.bench import load_bench

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "traces" / "cpu-fp32-grid"


BENCH = load_bench("fidelity")
SPLITS = BENCH.splits()


TEST_DRAWS = 3  # random halves per pool split in CI (the bench's default is the manifest's 10; ~10 s per split here)
JOBS = min(4, os.cpu_count() or 1)  # worker processes for the splits (the results do not depend on it)


@pytest.fixture(scope="module")
def reported():
    """name -> run_split of that split with allow_leaks, once per module (the limit and coverage tests share it); a
    halves split on its first TEST_DRAWS draws. Every split starts at the first use, JOBS at a time, in the order the
    tests ask for them."""
    first = "b2-to-b4"  # the leak test asks first, then the limit tests in name order
    runs = BENCH.SplitRuns({n: SPLITS[n] for n in [first, *sorted(set(SPLITS) - {first})]}, JOBS, allow_leaks=True,
                           draws=TEST_DRAWS)
    yield runs.result
    runs.close()


def test_every_split_named_by_the_issue_is_there():
    assert {"config", "prompts", "ar-sd-to-ssd", "t0-to-t1", "c1-to-c", "b2-to-b4", "code-to-chat", "halves-t0",
            "halves-t1", "halves-probe", "avx512-odd", "pool-halves", "pool-halves-configs", "pool-halves-ar-sd"} <= set(SPLITS)
    pool = [n for n, s in SPLITS.items() if "halves" in s]
    assert sorted(pool) == ["epyc-fresh96-halves", "epyc-pool96-to-fresh96", "epyc-pool96i-halves",
                            "epyc-pool96i-later", "epyc-pool96i-later-halves",
                            "epyc-pool96t-halves", "epyc-pool96t-later", "epyc-to-zen4-fresh96-probe", "pool-halves",
                            "pool-halves-ar-sd", "pool-halves-configs", "pool40-halves",
                            "pool40-to-pool40i", "pool40i-halves", "pool40i-to-zen4-fresh96", "pool40i-to-zen4-pool40r",
                            "pool64i-halves", "xeon-fresh96-fourth",
                            "xeon-fresh96-fourth-halves", "xeon-fresh96-halves", "xeon-fresh96-later",
                            "xeon-fresh96-later-halves", "xeon-fresh96-probe-fourth", "xeon-fresh96-slow-to-third",
                            "xeon-fresh96-third", "xeon-fresh96-third-halves", "xeon-pool32i-day2",
                            "xeon-pool32i-halves", "xeon-pool32i-later", "xeon-pool32i-later-halves",
                            "xeon-pool32i-to-fresh96", "xeon-to-zen4-fresh96-probe", "zen4-fresh96-halves",
                            "zen4-fresh96-later", "zen4-fresh96-later-halves", "zen4-fresh96-later-to-third",
                            "zen4-fresh96-probe", "zen4-fresh96-third", "zen4-mixed192-t0-halves",
                            "zen4-mixed192-t1-halves", "zen4-mixed192-t1-to-t0",
                            "zen4-pool40r-halves", "zen4-pool40r-to-pool40s", "zen4-pool40s-halves",
                            "zen4-to-zen5-mixed192-t1", "zen5-mixed192-t1-halves"]
    assert sorted(n for n, s in SPLITS.items() if "workload_from" in s) == [
        "avx2-to-pool", "avx2-to-pool40i", "avx2-to-xeon", "epyc-to-zen4-fresh96-probe", "pool-to-avx2", "pool-to-xeon",
        "xeon-to-zen4-fresh96-probe"]



@pytest.mark.parametrize("name", sorted(SPLITS))
def test_calibration_and_prediction_files_are_disjoint(name):
    s = SPLITS[name]
    assert s["calibrate"] and s["predict"]
    if "halves" in s or s.get("predict_prompts"):  # one run may calibrate some requests and be predicted on others
        assert all(p.is_file() for p in s["calibrate"] + s["predict"] + s.get("workload_from", []))
        return
    assert not {p.resolve() for p in s["calibrate"]} & {p.resolve() for p in s["predict"]}


def test_each_split_holds_out_what_its_name_says():
    def traces(name, side):
        return [read_trace(p) for p in SPLITS[name][side]]

    for name, held in (("prompts", "prompts"), ("code-to-chat", "prompts"), ("t0-to-t1", "temperature"),
                       ("c1-to-c", "saguaro_c"), ("b2-to-b4", "batch_size")):
        shared = BENCH.shared(traces(name, "calibrate"), traces(name, "predict"))
        assert shared[held] == [], f"{name} shares {held}: {shared[held]}"
    assert {t.mode for t in traces("ar-sd-to-ssd", "calibrate")} == {"ar", "sd"}
    assert {t.mode for t in traces("ar-sd-to-ssd", "predict")} == {"ssd"}
    cal_prompts = set().union(*(BENCH.prompt_ids(t) for t in traces("prompts", "calibrate")))
    assert cal_prompts == {f"code:{i}" for i in range(8)}


TEXT_HOLDOUTS = {"prompts", "code-to-chat", "halves-t0", "halves-t1", "halves-probe", "avx512-odd", "pool-to-avx2",
                 "avx2-to-pool", "avx2-to-pool40i", "xeon-here", "pool-to-xeon", "avx2-to-xeon", "xeon-idle-here",
                 "xeon-earlier", "avx512-odd-next-guest"}  # share no text


@pytest.mark.parametrize("name", sorted(n for n, s in SPLITS.items() if "halves" not in s))  # halves: per draw, below
def test_the_overlap_check_refuses_every_split_that_shares_text(name):
    s = SPLITS[name]
    if "workload_from" in s:  # the runs as the split cuts them; the workload's text counts as calibration
        cal, workload, pred, _ = BENCH.workload_sides(name, s)
        cal = list(cal.values()) + list(workload.values())
    else:
        cal, pred = [read_trace(p) for p in s["calibrate"]], {p.name: read_trace(p) for p in s["predict"]}
    if name in TEXT_HOLDOUTS:
        BENCH.check_holdout(name, cal, pred)  # no LeakingSplit
    else:
        with pytest.raises(BENCH.LeakingSplit, match="share more than 5% of their text"):
            BENCH.check_holdout(name, cal, pred)


def test_a_leaking_split_is_refused_unless_asked_and_then_has_no_goal(reported):
    with pytest.raises(BENCH.LeakingSplit, match="split b2-to-b4: 2 of 2 predicted runs"):
        BENCH.run_split("b2-to-b4", SPLITS["b2-to-b4"])
    res = reported("b2-to-b4")
    assert res["leak"] and res["goal"] is False  # reported, but never counted toward a goal


def test_a_split_run_in_a_worker_process_gives_what_it_gives_here(reported):
    here = BENCH.run_split("c1-to-c", SPLITS["c1-to-c"], allow_leaks=True, draws=TEST_DRAWS)
    assert reported("c1-to-c") == here
    runs = BENCH.SplitRuns({"b2-to-b4": SPLITS["b2-to-b4"]}, 1)  # a leak is raised here, as run_split raises it
    try:
        with pytest.raises(BENCH.LeakingSplit, match="split b2-to-b4: 2 of 2 predicted runs"):
            runs.result("b2-to-b4")
    finally:
        runs.close()
    with pytest.raises(SystemExit) as e:
        BENCH.main(["--split", "prompts", "--jobs", "0"])
    assert e.value.code == 2


def test_the_prompt_split_shares_no_logged_context_with_its_calibration():
    s = SPLITS["prompts"]
    text = BENCH.check_holdout("prompts", [read_trace(p) for p in s["calibrate"]],
                               {p.name: read_trace(p) for p in s["predict"]})
    assert all(v.startswith("0% shared (0% of its contexts; 0% of its prompts)") for v in text.values()), text


# Measured with bench/fidelity.py on the shipped traces (the note of issue 10 has the tables). A split that misses
# the goal (median <= 5%, worst <= 10%) is pinned at its measured error, so a regression still fails.
# Misses and why (traces/cpu-fp32-splits/README.md): prompts 8-15 accept fewer tokens than the 8 calibration prompts
# (a workload difference no calibration on 0-7 can see); AR + SD traces cannot time the draft's glue / branch decode
# or the interference of the two processes (assumed at the middle of its range); b = 4 verifies 16 tokens, twice
# the most the calibration timed (the latency curve is extrapolated); chat is another workload (no goal).
# Since SSD's transfer is the wait beyond the draft's overrun of the verify (calibrate.ssd_transfer_samples; before, a
# low quantile of the wait read a draft slower than its verify as 20-95 ms of link time), SSD's rounds cost what they
# measure, and the splits whose errors that had cancelled show them: prompts 9.8 / 14.1 -> 13.9 / 19.8 (8-15 hit 0.80
# against 0.99 predicted), t0-to-t1 3.3 / 5.6 -> 8.4 / 10.8 (T = 1 hit rates derived from T = 0 runs, 0.93 against
# 0.84), pool40-to-pool40i 13.2 / 20.0 -> 17.8 / 26.7 (the host 16-19% slower 2.5 h later)
# Re-pinned on 2026-12-06, when the glue after a jit backup of every row became one token per row (docs/FIDELITY.md: "A
# seventh came from the runtime's own rounds"): every limit is this file's TEST_DRAWS error of its split + 0.1, rounded up to
# 0.5. The per-split numbers in the comments below are those of when each split was added, before that change; the
# split table of docs/FIDELITY.md gives each split's 10-draw errors with it and before it. Re-pinned by the same rule later that
# day, when a request's first SD round was priced at its 1-token first draft step (RoundLatency.sd_phases: SD's rounds
# 0.2-1.3% shorter) and each predicted run's simulation started at seeds of its own (fidelity.run_seed: seed 0 for
# every run had shifted their Monte Carlo errors together); 47 of the 64 limits moved, by 0.5-1.0.
LIMITS = {"config": (3.5, 6.0), "t0-to-t1": (9.0, 11.5), "c1-to-c": (3.5, 5.0),
          "prompts": (15.0, 20.0), "ar-sd-to-ssd": (6.5, 22.0), "ar-sd-to-ssd-latency": (4.5, 14.0),
          "b2-to-b4": (7.0, 9.0), "code-to-chat": (51.0, 57.5),
          # text hold-outs on the AVX2 host: the host drifted 12% during the session and the odd prompts accept less
          # (traces/cpu-fp32-halves/README.md); pinned at the measured error so a regression still fails
          "halves-t0": (39.0, 39.5), "halves-t1": (22.5, 22.5),
          # latencies from a probe beside the predicted runs (its tables hold each shape's mean; SD's first draft step
          # after an all-accepted round priced as the 2-token forward it is); 3 prompts x 16 tokens per run
          "halves-probe": (3.0, 6.0),
          # the Zen 5 host's calibrate-here runs -> profile_check's odd-prompt runs: SD K = 6 +11% (the odd prompts
          # accept less at positions 5-6)
          "avx512-odd": (5.5, 9.5),
          # random halves of the 48-prompt pool on the Zen 4 host, first TEST_DRAWS draws (10 draws in the bench:
          # traces/cpu-fp32-pool/README.md), each draw's calibration weighted to its half B's code / chat shares
          # (model.mix). Misses: the first runs of the session ran ~10% slower than its last (a repeat measured it)
          # while one latency serves every run, and a half's acceptance differs from the other's by up to ~5% (24
          # prompts each): the class floor (each run's own half A, per class, as the prediction of its half B) misses
          # by up to 12.3%; pool-halves-ar-sd's probe was made ~50 minutes after the runs. On these draws:
          # pool-halves 3.6% / 11.2% (4.4% / 12.8% before the transfer fix), pool-halves-configs 7.4% / 14.4%
          # (7.4% / 15.9%), pool-halves-ar-sd 3.8% / 6.7% (latencies from the probe, unchanged)
          "pool-halves": (4.0, 11.5), "pool-halves-configs": (7.5, 13.5), "pool-halves-ar-sd": (5.0, 8.5),
          # the same pool at 40 tokens per request (2.5x), AR / SD K = 2 / SSD K = 2 at T = 0 and SSD at T = 1
          # (traces/cpu-fp32-pool40/README.md): 2.6% / 7.7% on these draws (2.6% / 12.2% before the transfer fix;
          # 10 draws: 2.9% / 10.6%, the class floor 9.2%)
          "pool40-halves": (2.5, 7.5),
          # the same four runs interleaved in 12 chunks, 2.5 h later (traces/cpu-fp32-pool40i/README.md): 2.6% / 5.9%
          # on these draws (5.4% / 10.2% before the transfer fix, which priced SSD's rounds 4-8% high; 10 draws:
          # 2.5% / 9.2%)
          "pool40i-halves": (3.5, 6.0),
          # 64 tokens per request (4x the pool's), SD / SSD at T = 0 and SSD at T = 1 interleaved, no AR run
          # (traces/cpu-fp32-pool64i/README.md): 1.4% / 7.0% on these draws (10 draws: 2.7% / 10.8%, unweighted 3.3% /
          # 9.2%)
          "pool64i-halves": (2.0, 6.5),
          # across the two sessions: the host's two-process runs ran 16-19% slower 2.5 h later (10 draws: 18.8% / 32.6%)
          "pool40-to-pool40i": (18.0, 28.0),
          # across hosts (run_workload_split): one host's latencies (its runs, or its probe) with the acceptance and
          # hits of the other host's runs on other prompts, as `ssd-plan --profile P --acceptance-from W` composes
          # them. Measured when the splits were defined: Zen 4 pool -> AVX2 host's probe 4.1% / 5.7% (halves-probe,
          # with the AVX2 host's own even prompts: 1.6% / 5.7%); AVX2 even code prompts -> the Zen 4 pool's odd code
          # prompts 9.7% / 19.8% on the sequential 16-token session (its AR runs +8.2% / +4.5%: the odd code prompts
          # ran in the session's first, slower half while chat, in the second, carries the latency fit) and 4.6% /
          # 9.3% on the interleaved 40-token session; on both the odd code prompts accept ~4% less than the even ones
          "pool-to-avx2": (3.0, 6.0), "avx2-to-pool": (11.0, 17.5), "avx2-to-pool40i": (3.5, 8.0),
          # a new host (traces/cpu-fp32-xeon/README.md): calibrate-here, then runs on the odd code prompts, the splits
          # defined before those runs were made. Acceptance right, latency low: the host ran ~10% slower 20 minutes
          # later, and a forward after an idle wait (SD's verify, the draft's first step) costs 9-27% more than the
          # probe's back-to-back loops (bench/idle_wake.py); across hosts the even code prompts also accept more
          "xeon-here": (13.0, 17.0), "pool-to-xeon": (16.5, 22.5), "avx2-to-xeon": (14.5, 21.5),
          # the same first hour 2.5 h later on a host of the same kind (traces/cpu-fp32-xeon-idle/README.md), its probe
          # timing each model's forwards after sleeps, which the SD and SSD phases after a wait now pay: 2.7% / 5.5%;
          # the profile of 2.5 h before predicts the new runs 20% low (the host ran 21-30% faster)
          "xeon-idle-here": (3.0, 4.5), "xeon-earlier": (20.5, 21.5),
          # random halves of an interleaved pool session on the Xeon host (traces/cpu-fp32-xeon-pool32i/README.md),
          # the split committed before its runs: 1.3% / 7.5% on these draws (10 draws: 1.4% / 10.6%, the T = 1 run's
          # worst draw, whose class floor misses by 11.7%)
          "xeon-pool32i-halves": (2.0, 7.5),
          # the same grid 3.9 h later (traces/cpu-fp32-xeon-pool32i-later/README.md), both splits committed before
          # its runs: the first session's halves A -> this one's halves B 1.2% / 7.1% on these draws (10 draws: 1.5% /
          # 9.9%; the host ran within 1% of the first session), random halves within it 1.3% / 6.4% (1.8% / 9.9%)
          "xeon-pool32i-later": (2.0, 6.0), "xeon-pool32i-later-halves": (2.5, 5.5),
          # random halves of the 96-prompt pool (48 requests per half) on the AVX2 EPYC host, interleaved, the split
          # committed before its runs (traces/cpu-fp32-epyc-pool96i/README.md): 3.0% / 16.2% on these draws (10 draws:
          # 2.4% / 16.2%). The worst is SD K = 2's half B holding the one request whose two rounds stalled 22 s and 13 s
          # (the only rounds above 5x the median of their kind in 9.7 h of shipped rounds); its class floor misses by
          # 15.2%. Calibration times latency without stalled rounds (io.sanity.steady): 3.6% / 16.2% before
          "epyc-pool96i-halves": (3.5, 14.5),
          # the same grid 2.8 h later (traces/cpu-fp32-epyc-pool96i-later/README.md), both splits committed before its
          # runs: random halves within it 2.1% / 5.1% on these draws (10 draws: 2.0% / 8.0%); the first session's
          # halves A -> this one's halves B 8.8% / 17.2% (10 draws: 8.4% / 18.8%): the host ran 8-14% faster per run,
          # and at T = 1 the other seed's text accepted 6% more
          "epyc-pool96i-later-halves": (2.0, 6.0), "epyc-pool96i-later": (9.0, 17.0),
          # the 96-prompt pool with every mode at both temperatures (traces/cpu-fp32-epyc-pool96t/README.md), both
          # splits committed before its runs: random halves within it 2.8% / 6.9% on these draws (10 draws: 2.4% / 9.8%,
          # both goals); the session of 10 h before -> this one 3.9% / 11.6% (10 draws: 4.2% / 13.0%: AR and SD ran
          # 7-9% faster than predicted, SSD within 1%)
          "epyc-pool96t-halves": (2.0, 6.5), "epyc-pool96t-later": (3.5, 9.5),
          # the same grid on a prompt file the project had never run (traces/cpu-fp32-epyc-fresh96/README.md), both
          # splits committed before its runs: random halves within it 2.4% / 5.7% on these draws (10 draws: 2.0% /
          # 8.1%, both goals); pool96t's half A (the built-in prompts, 1.5-2.5 h before) -> the new file's half B
          # 2.1% / 6.4% (10 draws: 2.0% / 7.6%)
          "epyc-fresh96-halves": (2.0, 7.5), "epyc-pool96-to-fresh96": (2.5, 9.0),
          # the same grid repeated on the Intel Xeon host kind (traces/cpu-fp32-xeon-fresh96/README.md), both splits
          # committed before its runs: random halves within it 1.5% / 7.8% on these draws (10 draws: 1.5% / 8.8%, both
          # goals); the Xeon pool session's half A (another guest and prompt set, 33 h before) -> its half B 2.6% / 5.8%
          # (10 draws: 2.7% / 9.9%)
          "xeon-fresh96-halves": (2.5, 9.5), "xeon-pool32i-to-fresh96": (3.0, 5.5),
          # two runs of the Xeon pool grid 35 h after its later session, on another guest
          # (traces/cpu-fp32-xeon-pool32i-day2/README.md), the split committed before the runs: 1.9% / 6.0% on these
          # draws (10 draws: 1.8% / 6.0%)
          "xeon-pool32i-day2": (2.0, 5.5),
          # the fresh96 grid's T = 0 runs repeated 2.7 h later on the same Xeon guest
          # (traces/cpu-fp32-xeon-fresh96-later/README.md), both splits committed before the runs: the first session's
          # half A -> this one's half B 25.5% / 27.3% on these draws (10 draws: 25.3% / 27.3%): every forward ran
          # 15-27% slower, the same tokens; pinned at the measured error so a regression still fails. Random halves
          # within it 2.5% / 3.7% (10 draws: 2.2% / 8.4%, both goals)
          "xeon-fresh96-later": (26.0, 27.5), "xeon-fresh96-later-halves": (3.0, 4.0),
          # the same three runs a third time on that guest, 1 h after the slow session
          # (traces/cpu-fp32-xeon-fresh96-third/README.md), the splits committed before the runs: the first session's
          # half A -> this one's half B 2.0% / 3.0% on these draws (10 draws: 1.8% / 8.8%, both goals: the guest was
          # back to its first speed); the slow session's half A -> this one's 19.2% / 21.5% (10 draws: 20.1% / 25.7%),
          # pinned at the measured error; random halves within it 2.8% / 3.4% (10 draws: 2.0% / 8.2%)
          "xeon-fresh96-third": (2.0, 4.5), "xeon-fresh96-slow-to-third": (20.5, 22.0),
          "xeon-fresh96-third-halves": (3.0, 4.5),
          # a fourth time, 4.9 h after the first session, right after a fresh probe
          # (traces/cpu-fp32-xeon-fresh96-fourth/README.md), the splits committed before the probe and the runs: the
          # first session's half A for acceptance and the probe for latency -> half B 1.2% / 5.5% on these draws (10
          # draws: 1.1% / 10.5%; 0.6% / 6.2% and 0.9% / 11.1% while the probe's loops set the interference, which
          # priced SSD 2.5% slow, where its interleaved SSD rounds now measure it, model.interference); the same without the probe
          # 2.2% / 3.8% (10 draws: 2.2% / 8.8%); random halves within it 2.4% / 4.1% (10 draws: 2.2% / 8.0%)
          "xeon-fresh96-probe-fourth": (2.0, 5.0), "xeon-fresh96-fourth": (3.0, 3.5),
          "xeon-fresh96-fourth-halves": (3.0, 4.5),
          # the same grid on the Zen 4 host kind, right after a probe (traces/cpu-fp32-zen4-fresh96/README.md), its five
          # splits committed before the probe and the runs: random halves within it 3.0% / 9.2% on these draws (10
          # draws: 2.1% / 9.8%, both goals on the host kind of the 24-per-half pool splits); half A's acceptance and
          # the probe's latencies 4.1% / 11.6% (10 draws: 3.9% / 12.6%), the same with the Xeon's or the AVX2 EPYC's
          # half A of the grid 4.1% / 11.6% (the three host kinds decode the same text). With the probe's loops for
          # the interference (+9.9% on the draft where the interleaved SSD rounds measure +0.1%, model.interference)
          # 3.7% / 7.1% (10 draws: 3.4% / 12.7%): SSD's rounds then cost 7.2% (T = 0) and 3.3% (T = 1) more than
          # measured, now 0.4% and -3.2%, and SSD at T = 1 is predicted 6.8% fast in the median draw (0.2% before):
          # the first chunk of every T = 1 run ran 16-35% slow (an episode in minutes 2-5; the later chunks at T = 0's
          # speed), and half A predicts SSD's T = 1 acceptance 4% high in the median draw.
          # pool40i's half A, another
          # guest of the kind 58 h before, 27.6% / 32.0% (10 draws: 26.5% / 34.4%: this guest ran 26-30% faster),
          # pinned at the measured error
          "zen4-fresh96-halves": (3.0, 10.5), "zen4-fresh96-probe": (5.0, 12.0), "xeon-to-zen4-fresh96-probe": (5.0, 12.0),
          "epyc-to-zen4-fresh96-probe": (5.0, 12.0), "pool40i-to-zen4-fresh96": (28.5, 31.5),
          # pool40i's AR and SD runs repeated on that guest (traces/cpu-fp32-zen4-pool40r/README.md), committed before
          # the runs: from pool40i's half A 28.0% / 29.0% (10 draws: 26.7% / 29.0%), pinned; within it 0.5% / 1.1%
          # (10 draws: 0.5% / 3.5%)
          "pool40i-to-zen4-pool40r": (29.0, 30.0), "zen4-pool40r-halves": (0.5, 1.5),
          # the two repeated again 1.8 h later on the same guest (traces/cpu-fp32-zen4-pool40s/README.md), committed
          # before the runs: from pool40r's half A 0.9% / 1.6% on these draws (10 draws: 1.0% / 3.3%); within it
          # 0.5% / 2.0% (10 draws: 0.5% / 3.6%)
          "zen4-pool40r-to-pool40s": (1.5, 2.0), "zen4-pool40s-halves": (1.0, 2.5),
          # the fresh96 grid's T = 0 runs and SSD T = 1 run repeated 8.9 h later on the same Zen 4 guest
          # (traces/cpu-fp32-zen4-fresh96-later/README.md), committed before the runs: from the first session's half A
          # 10.6% / 18.5% on these draws (10 draws: 9.3% / 20.1%: the guest ran 5-10% slower, SSD 11%); within it
          # 2.3% / 9.7% (10 draws: 2.3% / 12.1%, SSD at T = 1 in a draw whose class floor misses by 12.7%)
          "zen4-fresh96-later": (11.5, 18.0), "zen4-fresh96-later-halves": (3.0, 10.0),
          # its three T = 0 runs a third time 1.3 h later (traces/cpu-fp32-zen4-fresh96-third/README.md), committed before
          # the runs: from the first session 1.9% / 7.5% on these draws (10 draws: 1.8% / 7.5%); from the slow second
          # session 4.3% / 9.5% (10 draws: 5.0% / 13.2%)
          "zen4-fresh96-third": (2.5, 7.5), "zen4-fresh96-later-to-third": (4.5, 10.0),
          # twice the requests per half at T = 1 on that guest (traces/cpu-fp32-zen4-mixed192/README.md: the 192 prompts
          # of fresh96 and the built-in pool96, 96 per half), committed before the runs: 0.7% / 4.4% on these draws (10
          # draws: 0.8% / 4.4%; the class floor 5.6%, where the 48-per-half T = 1 draws' had missed by 11.9-12.8%)
          "zen4-mixed192-t1-halves": (1.0, 4.0),
          # the same grid at T = 0 an hour later (traces/cpu-fp32-zen4-mixed192-t0/README.md), both splits committed
          # before the runs: within it 0.7% / 4.4% on these draws (10 draws: 1.0% / 4.4%, class floor 4.7%); the T = 1
          # runs' half A -> its half B (temperature and text held out) 2.0% / 6.0% (10 draws: 1.6% / 6.2%)
          "zen4-mixed192-t0-halves": (1.0, 5.5), "zen4-mixed192-t1-to-t0": (2.5, 6.5),
          # the same T = 1 grid on a Zen 5 guest (traces/cpu-fp32-zen5-mixed192/README.md), both splits committed before
          # the runs: within it 1.9% / 4.7% on these draws (10 draws: 1.6% / 5.6%, class floor 4.8%); the Zen 4 guest's
          # half A -> its half B (another host kind, 13 h later) 21.1% / 26.5% (10 draws: 21.6% / 27.1%), every mode
          # predicted 21-24% slow; what the limit holds is a regression guard, not a goal
          "zen5-mixed192-t1-halves": (2.5, 6.0), "zen4-to-zen5-mixed192-t1": (22.5, 28.0),
          # traces/cpu-fp32-epyc-avx512's calibration -> its profile check repeated on another Zen 5 guest 128 h later
          # (traces/cpu-fp32-zen5-check/README.md, committed before the runs): 23.9% / 32.8%, the guest 1.16-1.28x slower
          "avx512-odd-next-guest": (25.0, 34.0)}


def test_every_split_has_a_limit():
    assert set(LIMITS) == set(SPLITS)


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_held_out_runs_are_predicted_within_the_split_limits(name, reported):
    res = reported(name)
    median, worst = LIMITS[name]
    assert res["median_abs_err_pct"] <= median and res["worst_abs_err_pct"] <= worst, res
    for r in res["runs"]:  # hit rates: derived from logged distributions, or fitted to ranks (config)
        if r["measured_hit_rate"] is not None and name in ("config", "c1-to-c", "b2-to-b4"):
            # within 0.08, except C = 0.4 from C = 1 traces: derived 0.894 against 0.812 measured (the Saguaro response
            # at low C from the logged distributions runs high on this run; 0.888 before the truncation share)
            tol = 0.09 if r["saguaro_c"] < 0.5 else 0.08
            assert r["predicted_hit_rate"] == pytest.approx(r["measured_hit_rate"], abs=tol), r


def test_shipped_profile_is_the_calibration_of_the_manifest():
    manifest = json.loads((CPU / "manifest.json").read_text())
    fitted, _ = calibrate([CPU / f for f in manifest["calibrate"]], name="qwen-coder-cpu-calibrated")
    shipped = load_profile_file(CPU / "profile.json")
    assert shipped.latency.target(1, 3) == pytest.approx(fitted.latency.target(1, 3), rel=1e-6)
    assert shipped.acceptance.at(1.0).acceptance == pytest.approx(fitted.acceptance.at(1.0).acceptance)


def test_calibrated_plan_is_the_best_measured_configuration():
    prof = load_profile_file(CPU / "profile.json")
    plan = make_plan(prof).plan
    assert (plan.K, plan.fan_out) == (3, (0, 0, 0, 1))  # = ssd-k3-f0001-b1-t0, the fastest run at T = 0
    # T = 1: the fastest run, ssd-k2-f001-b1-t1, and K = 3 with one guess at the last position, which the grid never ran
    # at T = 1, are predicted 0.5% apart since the glue after a jit backup feeds one token (K = 3 misses more often and
    # saves more per miss); the planner takes K = 3 and K = 2 must stay within 1% of it
    hot = make_plan(prof, PlanRequest(temperature=1.0))
    assert (hot.plan.K, hot.plan.fan_out, hot.plan.saguaro_c) == (3, (0, 0, 0, 1), 1.0)
    measured_best = predict_ssd(prof, hot.plan.replace(num_speculative_tokens=2, fan_out=(0, 0, 1),
                                                       fan_out_miss=(0, 0, 1)))
    assert measured_best.per_seq_tok_s == pytest.approx(hot.ssd.per_seq_tok_s, rel=0.01)


def test_interval_coverage_counts_text_hold_outs_only(reported):
    # Across the configuration splits (which share text) the 90% intervals held 80-95% of the runs; what counts is
    # text the calibration never saw: prompts 8-15, the odd halves (AVX2 host), the odd prompts of the Zen 5 host,
    # the pool's random halves (Zen 4 host) and the odd code prompts predicted across the two hosts
    results = [reported(name) for name in sorted(SPLITS)]
    goal = {res["name"]: res for res in results if res["goal"]}
    assert set(goal) == {"prompts", "halves-t0", "halves-t1", "halves-probe", "avx512-odd", "pool-halves",
                         "pool-halves-configs", "pool-halves-ar-sd", "pool40-halves", "pool40i-halves",
                         "pool40-to-pool40i", "pool64i-halves", "pool-to-avx2", "avx2-to-pool", "avx2-to-pool40i",
                         "xeon-here", "pool-to-xeon", "avx2-to-xeon", "xeon-idle-here", "xeon-earlier",
                         "xeon-pool32i-halves", "xeon-pool32i-later", "xeon-pool32i-later-halves",
                         "epyc-pool96i-halves", "epyc-pool96i-later", "epyc-pool96i-later-halves",
                         "epyc-pool96t-halves", "epyc-pool96t-later", "epyc-fresh96-halves", "epyc-pool96-to-fresh96",
                         "xeon-fresh96-halves", "xeon-pool32i-to-fresh96", "xeon-pool32i-day2", "xeon-fresh96-later",
                         "xeon-fresh96-later-halves", "xeon-fresh96-third", "xeon-fresh96-slow-to-third",
                         "xeon-fresh96-third-halves", "xeon-fresh96-probe-fourth", "xeon-fresh96-fourth",
                         "xeon-fresh96-fourth-halves", "zen4-fresh96-halves", "zen4-fresh96-probe",
                         "xeon-to-zen4-fresh96-probe", "epyc-to-zen4-fresh96-probe", "pool40i-to-zen4-fresh96",
                         "pool40i-to-zen4-pool40r", "zen4-pool40r-halves", "zen4-pool40r-to-pool40s",
                         "zen4-pool40s-halves", "zen4-fresh96-later", "zen4-fresh96-later-halves",
                         "zen4-fresh96-third", "zen4-fresh96-later-to-third", "zen4-mixed192-t1-halves",
                         "zen4-mixed192-t0-halves", "zen4-mixed192-t1-to-t0", "avx512-odd-next-guest",
                         "zen5-mixed192-t1-halves", "zen4-to-zen5-mixed192-t1"}
    goal_runs = [r for res in goal.values() for r in res["runs"]]
    assert len(goal_runs) == 613 and all(r["shared_text"].startswith("0% shared") for r in goal_runs)
    # measured (3 draws per pool split) with the drift of each run's horizon as the next run's (model.drift: 4.5% within
    # the hour of the timed forwards, 10.1% later with each cluster of sessions counted once; each widened by Student's
    # t on its degrees of freedom, to 4.8% and 10.8%; 4.8% / 9.8% and 5.2% / 10.5% before the Zen 5 repeat across
    # guests, 10.2% and 11.0% before the Zen 4 fresh96 grid's third session,
    # 10.5% and 11.4% before its repeat 8.9 h later, 10.1% and 11.0%
    # before the Zen 4 repeat on one guest, 8.8% and 9.7% before the one across guests) and the runs' spread around
    # the latency fit (model.residual: the project's 4.7%, 4.8% before it, or a calibration's own with 3+ AR / SD runs moderated by it), both measured without the split's
    # predicted runs (held_out_drifts, held_out_residual), but none for runs timed chunk by chunk among their
    # calibration's (the interleaved grids' halves: 151 of 154 inside; before the fresh96 repeats 125 of 127, the same
    # as with the within-the-hour drift at these 3 draws; at 10, 400 of 414, 409 with it): 367 of 406 inside their 90%
    # intervals (90.4%; the goal is 85-95%). Each mode's latency is extrapolated only past the forwards it runs
    # (model.uncertainty.for_forwards): AR's intervals in the interleaved halves are 7-13% wide, 26-29% while they took
    # the SSD plan's K (the AR trace header's K = 4), which held one more AR draw of epyc-pool96t-halves (368). Within the hour everything holds but the AVX2 halves whose host drifted 12%
    # in 30 minutes (0 of 4), the cross-host acceptance (avx2-to-pool 5 of 8, into the Xeon 3 and 4 of 5), the Xeon's
    # first hour (4 of 5) and two configuration draws of the pool, the 96-prompt pool's SD K = 2 in the two draws
    # whose half B holds a 35-s host stall (10 of 12), and AR from the Xeon guest's slow session 59 minutes later, when
    # it was back to speed (0 of 3); later, xeon-earlier holds 1 of 6 (that host ran 21-30% faster 2.5 h later),
    # xeon-fresh96-later 2 of 9 (the same guest ran 15-27% slower 2.7 h later), xeon-fresh96-slow-to-third's SD and SSD
    # 1 of 6, pool40-to-pool40i 9 of 12 (16-19% slower 2.5 h later) and epyc-pool96i-later 11 of 12. The fourth fresh96
    # session's three splits hold 9 of 9 each; with the later drift of before them (9.1% on 9 degrees of freedom), 343
    # of 379 without them (xeon-fresh96-later 3 of 9, slow-to-third's SD and SSD 2 of 6). Before the fresh96
    # repeats, 311 of 334; before the Xeon pool's day-2 runs (the clustered drift 9.4% on 6 degrees of freedom), 306 of
    # 328; then with the later drift counting every setup (13.7%) and no t, 308 of 328 (the two fresh96 grids' four
    # splits hold 72 of 72 either way).
    # With the residual assumed 8% where a calibration had fewer than 3 AR / SD runs (and a calibration's own alone
    # where it had more) it was 168 of 184; with the drift measured on every run (its own pair included) 172; before
    # the 3.9 h repeat, 148 of 160; before the 96-prompt pool, 167 of 184; before its repeat 2.8 h later, 177 of 196;
    # before the pool with every mode at both temperatures, 201 of 220; before the grid on a new prompt file, 236 of
    # 256; before the same grid on the Xeon host kind, 272 of 292
    # The Zen 4 guest of 2026-12-05 (traces/cpu-fp32-zen4-fresh96, -pool40r) adds 102 runs: its within-session and
    # probed splits hold 77 of 78, the two predicted from pool40i, another guest of the kind 58-60 h before, 0 of 24
    # (the guest ran 26-30% faster; the later drift with its repeat, 10.1% on 11 degrees of freedom, 11.0% for the
    # next run, cannot hold a 27% shift). With that repeat's drift (8.8% -> 10.1%) and the residual with the new
    # grid's runs (4.8% -> 4.7%), xeon-earlier and xeon-fresh96-later hold one run more each and the other splits one fewer: 445
    # of 508 (87.6%), within the hour 150 of 165, later 123 of 165, interleaved 172 of 178; before them, 367 of 406.
    # Its two runs repeated 1.8 h later on the same guest (traces/cpu-fp32-zen4-pool40s, 1.00-1.01x the verify ms) add
    # 12, all inside; the later drift they move (10.1% -> 10.5%) moves no other run at these draws: 457 of 520 (87.9%),
    # later 129 of 171, interleaved 178 of 184. With the glue after a jit backup of every row at one token per row:
    # 458 (88.1%), within the hour 149 of 165, later 130 of 171 (epyc-pool96i-later 12 of 12), interleaved 179 of 184.
    # The Zen 4 fresh96 grid repeated 8.9 h later on the same guest (traces/cpu-fp32-zen4-fresh96-later) adds 24, all
    # inside; the later drift it moves (10.5% -> 10.2%) moves no other run at these draws: 482 of 544 (88.6%), within
    # the hour 149 of 165, later 142 of 183, interleaved 191 of 196. Its three T = 0 runs a third time 1.3 h later
    # (traces/cpu-fp32-zen4-fresh96-third, back at the first session's speed) add 18, all inside; the later drift they
    # lower (10.2% -> 9.8%) leaves 3 runs outside that were inside (pool40-to-pool40i 9 -> 8 of 12, xeon-fresh96-later
    # 3 -> 1 of 9): 497 of 562 (88.4%), later 157 of 201. Twice the requests per half at T = 1 on that guest
    # (traces/cpu-fp32-zen4-mixed192) adds 9, all inside, and moves no drift: 506 of 571 (88.6%); the same grid at
    # T = 0 (traces/cpu-fp32-zen4-mixed192-t0) 18, all inside: 524 of 589 (89.0%), later 166 of 210. With a request's
    # first SD round priced at its 1-token first draft step and each run's simulation seeded from its label
    # (fidelity.run_seed): 527 (89.5%), within the hour 150 of 165, later 168 of 210 (pool40-to-pool40i 9 of 12,
    # xeon-fresh96-later 3 of 9, xeon-earlier 1 of 6), interleaved 209 of 214. A Zen 5 guest (2026-12-06) adds 24:
    # the 192-request grid's halves (traces/cpu-fp32-zen5-mixed192) 9 of 9, the Zen 4 guest's half A predicting them
    # (another host kind, every mode 21-24% slow) 0 of 9, and traces/cpu-fp32-epyc-avx512's calibration predicting its
    # profile check repeated on this guest 128 h later (traces/cpu-fp32-zen5-check, 1.16-1.28x slower) 5 of 6; with the
    # drifts measured again (later 9.8% -> 10.1%, within the hour 4.8% -> 4.5%) pool-to-xeon holds one run fewer (2 of
    # 5) and nothing else moves at these draws: 540 of 613 (88.1%), within the hour 149 of 165, later 173 of 225,
    # interleaved 218 of 223.
    assert sum(r["inside"] for r in goal_runs) == 540
    assert sum(r["inside"] for r in goal["pool-halves"]["runs"]) == 24
    assert sum(r["inside"] for r in goal["pool40-to-pool40i"]["runs"]) == 9
    horizons = {name: {r["horizon"] for r in res["runs"]} for name, res in goal.items()}
    later = {"pool40-to-pool40i", "xeon-earlier", "halves-probe", "pool-to-avx2", "xeon-pool32i-later",
             "epyc-pool96i-later", "epyc-pool96t-later", "epyc-pool96-to-fresh96", "xeon-pool32i-to-fresh96",
             "xeon-pool32i-day2", "xeon-fresh96-later", "xeon-fresh96-third", "xeon-fresh96-fourth",
             "pool40i-to-zen4-fresh96", "pool40i-to-zen4-pool40r", "zen4-pool40r-to-pool40s", "zen4-fresh96-later",
             "zen4-fresh96-third", "zen4-fresh96-later-to-third", "zen4-mixed192-t1-to-t0", "avx512-odd-next-guest",
             "zen4-to-zen5-mixed192-t1"}
    # timed chunk by chunk among their calibration's runs (model.drift.interleaved_with)
    interleaved = {"pool40i-halves", "avx2-to-pool40i", "pool64i-halves", "xeon-pool32i-halves",
                   "xeon-pool32i-later-halves", "epyc-pool96i-halves", "epyc-pool96i-later-halves",
                   "epyc-pool96t-halves", "epyc-fresh96-halves", "xeon-fresh96-halves", "xeon-fresh96-later-halves",
                   "xeon-fresh96-third-halves", "xeon-fresh96-fourth-halves", "zen4-fresh96-halves",
                   "zen4-pool40r-halves", "zen4-pool40s-halves", "zen4-fresh96-later-halves",
                   "zen4-mixed192-t1-halves", "zen4-mixed192-t0-halves", "zen5-mixed192-t1-halves"}
    # the slow session's calibration predicts AR 59 minutes after its timed start (within the hour), SD and SSD after 60
    mixed = {"xeon-fresh96-slow-to-third": {"session", "later"}}
    assert all(horizons[n] == mixed.get(n, {"later"} if n in later else {"interleaved"} if n in interleaved
                                        else {"session"}) for n in goal), horizons
    assert [sum(not r["inside"] for r in goal[n]["runs"]) for n in sorted(later)] == [
        1, 0, 0, 0, 0, 0, 3, 18, 6, 5, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]  # epyc-pool96i-later 1 while the glue was priced at K + 1
    # the recommended run (the planner's rule: the highest mean over the draws) measured within 5% of the best
    picks = [c for res in goal.values() for c in res["choices"]]
    assert (len(picks), sum(c["recommended_ok"] for c in picks)) == (191, 190)


def test_the_shipped_residual_is_what_the_shipped_calibrations_measure():
    """model.residual's SHIPPED_RESIDUAL cites bench/drift.py over traces/ (every folder but superseded/): the same
    calibrations, runs, pooled SD and weight (fitted with the bench's cached fits, which the held-out residuals share);
    the calibrations differ (0.3% to 10.0% each), so the weight is about one run's."""
    paths, traces = zip(*BENCH.shipped_calibration_traces(), strict=True)
    parts = [d for _, _, d in calibration_residuals(calibration_groups(paths, traces), BENCH._shipped_fit)]
    d, shipped = pooled_residual(parts, ""), SHIPPED_RESIDUAL.spread
    assert (d.groups, d.runs, d.dof) == (shipped.groups, shipped.runs, 68)
    assert d.sd == pytest.approx(shipped.sd, abs=5e-4)
    assert prior_dof(parts) == pytest.approx(SHIPPED_RESIDUAL.weight, abs=0.05)
    assert min(p.sd for p in parts) < 0.01 < 0.09 < max(p.sd for p in parts)


def test_a_splits_residual_is_measured_without_its_predicted_runs():
    # the pool's random halves predict the runs of cpu-fp32-pool, one of the 14 calibrations that measure the runs'
    # spread around a fit: without it 13 calibrations, 75 runs; the Xeon pool grid's 2 AR / SD runs measure none, so
    # its halves keep the project's; predicting every shipped run leaves nothing: the project's, said to count them
    pool = BENCH.held_out_residual(SPLITS["pool-halves"]["predict"])
    assert (pool.spread.groups, pool.spread.runs) == (13, 75) and pool.spread.sd == pytest.approx(0.0480, abs=5e-4)
    assert "without the split's predicted runs" in pool.spread.source and 0 < pool.weight < 3
    assert BENCH.held_out_residual(SPLITS["xeon-pool32i-halves"]["predict"]) == SHIPPED_RESIDUAL
    every = BENCH.held_out_residual([p for p, _ in BENCH.shipped_traces()])
    assert every.spread.sd == SHIPPED_RESIDUAL.spread.sd and "counts them" in every.spread.source


def test_a_splits_drift_is_measured_without_its_predicted_runs():
    # the later drift counts each cluster of sessions once (model.drift.project_drift: 8 clusters, 23 sessions, 10.1%).
    # The Xeon pool grid 3.9 h later repeats its calibration's four runs, the middle of its cluster's three sessions:
    # without them the first and the day-2 session (35 h apart, two setups) keep the cluster, 8 clusters of 22
    # sessions measure 10.5%, while a split whose predicted runs repeat nothing keeps the project's
    later = BENCH.held_out_drifts(SPLITS["xeon-pool32i-later"]["predict"])
    assert (later["later"].groups, later["later"].runs) == (8, 22) and later["later"].sd == pytest.approx(0.1049, abs=5e-4)
    # the EPYC pool repeated 2.8 h later: its three T = 0 runs leave their cluster of three sessions, which the first
    # and the third session (12.4 h apart) keep as a pair: 8 clusters, 22 sessions, 10.4%
    epyc = BENCH.held_out_drifts(SPLITS["epyc-pool96i-later"]["predict"])["later"]
    assert (epyc.groups, epyc.runs) == (8, 22) and epyc.sd == pytest.approx(0.1043, abs=5e-4)
    assert later["session"] == SHIPPED_DRIFTS["session"]
    # prompts predicts one run of each of traces/cpu-fp32-splits' two repeat pairs within the hour (joined since a plan
    # field at its empty default no longer splits a setup): 11 setups, 25 runs, 4.6%; the later drift is the project's
    prompts = BENCH.held_out_drifts(SPLITS["prompts"]["predict"])
    assert prompts["later"] == SHIPPED_DRIFTS["later"]
    assert (prompts["session"].groups, prompts["session"].runs) == (11, 25)
    assert prompts["session"].sd == pytest.approx(0.0462, abs=5e-4)
    assert BENCH.held_out_drifts(SPLITS["epyc-pool96-to-fresh96"]["predict"]) == SHIPPED_DRIFTS  # repeats nothing
    # the day-2 runs are their setups' third session: without them the Xeon pool's cluster is the first pair again
    day2 = BENCH.held_out_drifts(SPLITS["xeon-pool32i-day2"]["predict"])["later"]
    assert (day2.groups, day2.runs) == (8, 22) and day2.sd == pytest.approx(0.1048, abs=5e-4)
    # xeon-earlier predicts the repeats of cpu-fp32-xeon's odd-prompt runs (0.70-0.87x): the Xeon pair's cluster keeps
    # its calibrate-here setups, and the later drift falls to 9.7%
    earlier = BENCH.held_out_drifts(SPLITS["xeon-earlier"]["predict"])["later"]
    assert (earlier.groups, earlier.runs) == (8, 23) and earlier.sd == pytest.approx(0.0965, abs=5e-4)
    assert "without the split's predicted runs" in earlier.source
    # the fresh96 grid's T = 0 runs on one Xeon guest, four sessions (12:52, 15:34 at 0.79-0.85x the speed, 16:34,
    # 17:47): without the slow one the other three (1-2% apart) keep the cluster, 9.7%; without the third, 10.3%;
    # without the fourth, 10.4%
    slow = BENCH.held_out_drifts(SPLITS["xeon-fresh96-later"]["predict"])["later"]
    assert (slow.groups, slow.runs) == (8, 22) and slow.sd == pytest.approx(0.0965, abs=5e-4)
    for name in ("xeon-fresh96-third", "xeon-fresh96-slow-to-third"):
        third = BENCH.held_out_drifts(SPLITS[name]["predict"])["later"]
        assert (third.groups, third.runs) == (8, 22) and third.sd == pytest.approx(0.1034, abs=5e-4)
    for name in ("xeon-fresh96-fourth", "xeon-fresh96-probe-fourth"):
        fourth = BENCH.held_out_drifts(SPLITS[name]["predict"])["later"]
        assert (fourth.groups, fourth.runs) == (8, 22) and fourth.sd == pytest.approx(0.1043, abs=5e-4)
    # without the first session the slow, third and fourth sessions (2.2 h from first to last) keep the cluster: 10.4%,
    # and nothing moves into the session drift (until the fourth session, the slow and the third, 59 minutes apart,
    # did: 7.2% over 13 setups)
    first = BENCH.held_out_drifts(SPLITS["xeon-pool32i-to-fresh96"]["predict"])
    assert (first["later"].groups, first["later"].runs) == (8, 22) and first["later"].sd == pytest.approx(0.1040, abs=5e-4)
    assert first["session"] == SHIPPED_DRIFTS["session"]
    # the Zen 4 repeat across guests (traces/cpu-fp32-zen4-pool40r, 60 h after pool40i at 0.73x its verify ms) is its
    # cluster's third session: predicting it leaves the first pair and the same guest's repeat 1.8 h later
    # (traces/cpu-fp32-zen4-pool40s, 0.74x pool40i's verify ms too): 9.7%; predicting that repeat leaves the three
    # sessions of before it: 9.8%
    zen4 = BENCH.held_out_drifts(SPLITS["pool40i-to-zen4-pool40r"]["predict"])["later"]
    assert (zen4.groups, zen4.runs) == (8, 22) and zen4.sd == pytest.approx(0.0971, abs=5e-4)
    same_guest = BENCH.held_out_drifts(SPLITS["zen4-pool40r-to-pool40s"]["predict"])["later"]
    assert (same_guest.groups, same_guest.runs) == (8, 22) and same_guest.sd == pytest.approx(0.0977, abs=5e-4)
    # the Zen 4 fresh96 grid on one guest, three sessions (21:36, 8.9 h later at 1.05-1.08x the verify ms, 1.3 h after
    # that at 1.01-1.03x the first's; traces/cpu-fp32-zen4-fresh96-later, -third): predicting any one leaves the other
    # two: without the first 10.5%, without the slow second 10.4%, without the third 10.5%
    for name, sd in (("pool40i-to-zen4-fresh96", 0.1045), ("zen4-fresh96-later", 0.1041), ("zen4-fresh96-third", 0.1047),
                     ("zen4-fresh96-later-to-third", 0.1047)):
        fresh = BENCH.held_out_drifts(SPLITS[name]["predict"])["later"]
        assert (fresh.groups, fresh.runs) == (8, 22) and fresh.sd == pytest.approx(sd, abs=5e-4), name
    # the Zen 5 check repeated on another guest 128 h later (traces/cpu-fp32-zen5-check) is its cluster's second
    # session: predicting it leaves the drifts of before it (later 9.8% on 7 clusters of 21 sessions) and puts the
    # 2026-12-01 check's three pairs, minutes apart, into the within-the-hour drift: 5.9% over 15 setups
    guest = BENCH.held_out_drifts(SPLITS["avx512-odd-next-guest"]["predict"])
    assert (guest["later"].groups, guest["later"].runs) == (7, 21) and guest["later"].sd == pytest.approx(0.0985, abs=5e-4)
    assert (guest["session"].groups, guest["session"].runs) == (15, 33)
    assert guest["session"].sd == pytest.approx(0.0592, abs=5e-4)
    assert BENCH.held_out_drifts(SPLITS["epyc-fresh96-halves"]["predict"]) == SHIPPED_DRIFTS  # repeats nothing
    for name in ("zen4-mixed192-t1-halves", "zen4-mixed192-t1-to-t0", "zen5-mixed192-t1-halves",
                 "zen4-to-zen5-mixed192-t1"):  # a new prompt file, new seeds: no repeats
        assert BENCH.held_out_drifts(SPLITS[name]["predict"]) == SHIPPED_DRIFTS
    # predicting every shipped run leaves no repeat to measure: the project's drift, said to count them
    every = BENCH.held_out_drifts([p for p, _ in BENCH.shipped_traces()])
    assert all(every[h].sd == SHIPPED_DRIFTS[h].sd and "counts them" in every[h].source for h in every)


def test_the_held_out_drift_sets_the_calibrated_profiles_later_spread():
    split = SPLITS["xeon-earlier"]
    traces = [read_trace(p) for p in split["calibrate"]]
    held = BENCH.held_out_drifts(split["predict"])
    own, _ = calibrate_traces(traces, split["calibrate"], drifts=held)
    shipped, _ = calibrate_traces(traces, split["calibrate"])
    # the same residual around the fit, with the next run's drift of 10.3% (held out: 9.7% x 1.07 by Student's t on 15
    # degrees of freedom) instead of the project's 10.8% (10.1% x 1.07)
    residual = math.sqrt(shipped.uncertainty.latency_run_sd ** 2 - SHIPPED_DRIFTS["later"].predictive_sd() ** 2)
    assert own.uncertainty.latency_run_sd == pytest.approx(math.hypot(residual, held["later"].predictive_sd()), rel=1e-9)
    assert own.uncertainty.latency_run_sd < shipped.uncertainty.latency_run_sd - 0.004  # 10.8% against 11.3%
    assert "without the split's predicted runs" in own.uncertainty.sources["latency_run_sd"]
    assert own.uncertainty.latency_session_sd == shipped.uncertainty.latency_session_sd


def test_the_round_time_error_is_the_latency_side_of_a_tok_s_error(reported):
    res = reported("zen4-fresh96-probe")
    for r in res["runs"]:
        pred = r["predicted_mean_accept_len"] / r["predicted_tok_s"]
        meas = r["measured_mean_accept_len"] / r["measured_tok_s"]
        assert r["round_ms_err_pct"] == pytest.approx(100 * (pred - meas) / meas)
    ssd = res["per_run"]["zf96-ssd-k2-f112-t0.jsonl"]  # the interleaved SSD rounds price SSD's T = 0 round within 1%
    assert abs(ssd["median_round_ms_err_pct"]) < 1.0 < ssd["median_abs_err_pct"]


def test_the_probed_split_takes_its_latencies_from_the_probe(reported):
    res = reported("halves-probe")
    assert res["probe"].endswith("probe.json")
    traces = BENCH.run_split("halves-probe", SPLITS["halves-probe"], use_probe=False)
    assert traces["probe"] is None
    with_probe = {r["trace"]: r["predicted_tok_s"] for r in res["runs"]}
    without = {r["trace"]: r["predicted_tok_s"] for r in traces["runs"]}
    # the same acceptance, other latencies: AR 1.560 tok/s from the probe's table, 1.325 from the 2.5 h older runs
    assert with_probe["now-ar-t0.jsonl"] == pytest.approx(1.560, abs=0.005)
    assert without["now-ar-t0.jsonl"] < 0.95 * with_probe["now-ar-t0.jsonl"]


HALVES = ROOT / "traces" / "cpu-fp32-halves"


def _even_pool_split(draws: int = 2) -> dict:
    """A halves split over the shipped even-prompt runs (12 requests each): AR + SD K = 2 + SSD calibrate, SD K = 4
    is predicted (the machinery of the pool splits on traces CI has)."""
    return {"what": "test", "goal": True, "acceptance_from": None, "probe": None, "halves": {"draws": draws, "seed": 0},
            "calibrate": [HALVES / f for f in ("cal-ar-t0.jsonl", "cal-sd-k2-t0.jsonl", "cal-ssd-k2-f112-t0.jsonl")],
            "predict": [HALVES / "cal-sd-k4-t0.jsonl"]}


def test_a_halves_split_predicts_each_run_once_per_draw_on_text_it_never_saw():
    res = BENCH.run_split("even-pool", _even_pool_split(draws=2))
    assert res["draws"] == 2 and res["pool"] == 12 and len(res["runs"]) == 2 and res["goal"]
    assert all(r["shared_text"].startswith("0% shared") for r in res["runs"])  # A and B share no prompt or context
    assert [r["draw"] for r in res["runs"]] == [0, 1] and {r["run"] for r in res["runs"]} == {"cal-sd-k4-t0.jsonl"}
    assert len(res["runs"][0]["workload"][0]) == 6  # the prediction is of the B half's six prompts only
    per = res["per_run"]["cal-sd-k4-t0.jsonl"]
    assert per["draws"] == 2 and per["worst_abs_err_pct"] == res["worst_abs_err_pct"]
    # the B half's measured tok/s is its own rounds' (not the whole run's)
    whole = summarize(read_trace(HALVES / "cal-sd-k4-t0.jsonl")).tok_s
    assert {round(r["measured_tok_s"], 6) for r in res["runs"]} != {round(whole, 6)}


def test_the_floor_is_each_runs_own_half_a_taken_as_the_prediction_of_its_half_b():
    res = BENCH.run_split("even-pool", _even_pool_split(draws=2))
    trace = read_trace(HALVES / "cal-sd-k4-t0.jsonl")
    seqs = BENCH.pool_requests({"x": trace}, {"x": trace})[0]
    for r in res["runs"]:
        a, b = BENCH.halves(seqs, r["draw"])
        half = {h: summarize(trace.only_requests(q, h)).tok_s for h, q in (("A", a), ("B", b))}
        assert r["floor_err_pct"] == pytest.approx(100 * (half["A"] / half["B"] - 1))
        assert r["measured_tok_s"] == pytest.approx(half["B"])
    assert res["floor_worst_abs_err_pct"] == max(abs(r["floor_err_pct"]) for r in res["runs"])


def test_a_halves_split_needs_runs_over_one_pool():
    split = {**_even_pool_split(), "predict": [HALVES / "pred-sd-k3-t0.jsonl"]}  # the odd prompts: another pool
    with pytest.raises(ValueError, match="runs over one prompt pool"):
        BENCH.run_split("mixed", split)


def test_a_halves_split_across_two_pools_says_so_and_calibrates_on_one_to_predict_the_other():
    split = {**_even_pool_split(draws=1), "predict": [HALVES / "pred-sd-k3-t0.jsonl"]}
    split["halves"]["across_pools"] = True  # the even prompts' half A -> the odd prompts' half B
    res = BENCH.run_split("across", split)
    even, odd = (read_trace(HALVES / f).header.prompt_source for f in ("cal-sd-k4-t0.jsonl", "pred-sd-k3-t0.jsonl"))
    assert res["pools"] == [even, odd] and even != odd and res["pool"] == 12
    assert [r["shared_text"][:9] for r in res["runs"]] == ["0% shared"] and len(res["runs"][0]["workload"][0]) == 6
    mixed = {**split, "calibrate": split["calibrate"] + [HALVES / "pred-sd-k3-t0.jsonl"]}  # one side, two pools
    with pytest.raises(ValueError, match="runs over one prompt pool"):
        BENCH.run_split("mixed", mixed)


def test_pools_across_a_split_may_differ_in_size_where_the_split_says_so():
    even, odd = (read_trace(HALVES / f) for f in ("cal-sd-k4-t0.jsonl", "pred-sd-k3-t0.jsonl"))
    odd_seqs = BENCH.pool_requests({"y": odd}, {"y": odd})[1]
    fewer = odd.only_requests(odd_seqs[:8], "eight")  # a predicted pool of 8 requests against a calibration of 12
    cal_seqs, pred_seqs, pools = BENCH.pool_requests({"x": even}, {"y": fewer}, across=True)
    assert (len(cal_seqs), pred_seqs, len(pools)) == (12, odd_seqs[:8], 2)
    with pytest.raises(ValueError, match="runs over one prompt pool"):
        BENCH.pool_requests({"x": even}, {"y": fewer})  # unannounced
    with pytest.raises(ValueError, match="runs over one prompt pool"):
        BENCH.pool_requests({"x": even}, {"y": fewer, "z": odd}, across=True)  # a side's runs differ


def test_a_halves_split_may_take_acceptance_from_another_hosts_runs_of_the_pool(monkeypatch):
    # per draw the workload runs are cut to half A, as the calibration is, and replace its acceptance and hits; the
    # predicted half B shares no request with either
    split = {**_even_pool_split(draws=1), "workload_from": [HALVES / "cal-sd-k3-t1.jsonl"]}
    seen = []
    real = BENCH.evaluate

    def spy(name, split, cal, pred, acc, allow_leaks, use_probe, mix=None, workload=None):
        seen.append((cal, pred, workload))
        return real(name, split, cal, pred, acc, allow_leaks, use_probe, mix, workload)

    monkeypatch.setattr(BENCH, "evaluate", spy)
    res = BENCH.run_split("even-pool-workload", split)
    (cal, pred, workload), = seen
    a, b = BENCH.halves(list(range(12)), 0)
    assert list(workload) == ["cpu-fp32-halves/cal-sd-k3-t1.jsonl[A0]"] and res["workload_from"] == [
        "cpu-fp32-halves/cal-sd-k3-t1.jsonl"]
    assert all(t.sequences() == a for t in [*cal.values(), *workload.values()])
    assert all(t.sequences() == b for t in pred.values()) and res["runs"][0]["shared_text"].startswith("0% shared")
    own = BENCH.run_split("even-pool", _even_pool_split(draws=1))  # acceptance from the calibration's own half A
    assert res["runs"][0]["predicted_mean_accept_len"] != pytest.approx(own["runs"][0]["predicted_mean_accept_len"],
                                                                       abs=0.01)


def test_manifest_classes_name_each_sequence():
    assert BENCH.manifest_tags({"code": [0, 2], "chat": [3, 4]}) == ["code"] * 3 + ["chat"] * 2
    assert SPLITS["pool40-halves"]["request_tags"] == ["code"] * 24 + ["chat"] * 24
    assert "request_tags" not in SPLITS["halves-t0"]  # 12 code prompts: one class, nothing to weigh


def test_a_halves_split_with_classes_calibrates_each_draw_for_its_half_b():
    split = {**_even_pool_split(draws=2), "request_tags": ["x", "y"] * 6}
    weighed = BENCH.run_split("even-pool", split)
    plain = BENCH.run_split("even-pool", split, use_mix=False)
    assert weighed["mix"] and not plain["mix"] and "mixed_floor_worst_abs_err_pct" in weighed
    assert all(r["mixed_floor_err_pct"] is not None for r in weighed["runs"])
    # the same draws and measured runs, another calibration: the predictions move
    assert [r["measured_tok_s"] for r in weighed["runs"]] == [r["measured_tok_s"] for r in plain["runs"]]
    assert [r["predicted_tok_s"] for r in weighed["runs"]] != [r["predicted_tok_s"] for r in plain["runs"]]


def test_a_workload_split_calibrates_on_prompts_its_predictions_never_used():
    cal, workload, pred, mix = BENCH.workload_sides("avx2-to-pool", SPLITS["avx2-to-pool"])
    odd = {f"code:{i}" for i in range(1, 24, 2)}
    assert all(BENCH.prompt_ids(t) == odd for t in pred.values()) and len(pred) == 8
    assert all(len(t.sequences()) == 36 and not BENCH.prompt_ids(t) & odd for t in cal.values())
    assert all(BENCH.prompt_ids(t) == {f"code:{i}" for i in range(0, 24, 2)} for t in workload.values())
    assert mix.describe() == "code 100%"
    # the Zen 4 pool holds the AVX2 host's predicted prompts (pool:1 is code:1): uncut, it would leak
    cal, workload, pred, _ = BENCH.workload_sides("pool-to-avx2", SPLITS["pool-to-avx2"])
    assert all(len(t.sequences()) == 45 for t in workload.values())
    whole = [read_trace(p) for p in SPLITS["pool-to-avx2"]["workload_from"]]
    with pytest.raises(BENCH.LeakingSplit):
        BENCH.check_holdout("pool-to-avx2", whole, pred)


def test_a_workload_split_predicts_with_the_workloads_acceptance_on_its_own_latencies(reported):
    res = reported("avx2-to-pool")
    split = SPLITS["avx2-to-pool"]
    two = [p for p in split["predict"] if p.name in ("pool-ar-t0.jsonl", "pool-sd-k2-t0.jsonl")]
    own = BENCH.run_split("avx2-to-pool", {**split, "workload_from": split["calibrate"], "predict": two})
    by = {r["trace"]: r for r in res["runs"]}
    mine = {r["trace"]: r for r in own["runs"]}
    ar = "pool-ar-t0.jsonl[avx2-to-pool]"
    assert by[ar]["predicted_tok_s"] == pytest.approx(mine[ar]["predicted_tok_s"], rel=0.01)  # AR: latency only
    sd = "pool-sd-k2-t0.jsonl[avx2-to-pool]"
    # SD K = 2 accepts 2.76 per round from the AVX2 host's even code prompts, 2.79 from the pool's own runs on the
    # other 36 prompts (chat weighs 0 under the code mix); measured on the odd ones: 2.65
    assert by[sd]["predicted_mean_accept_len"] == pytest.approx(2.76, abs=0.01)
    assert by[sd]["predicted_mean_accept_len"] != pytest.approx(mine[sd]["predicted_mean_accept_len"], abs=0.02)
