"""io.sanity: arrival times past the float clock refused; arrivals over hours of idling, traces given twice and
stalled rounds warned and left out of latency."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.limits import MAX_ARRIVAL_MS
from ssd_sim.io.sanity import (
    STALL_FACTOR,
    arrivals_warning,
    check_arrival_ms,
    check_rate,
    distinct_traces,
    duration,
    rate_warning,
    stall_warning,
    stalled_rounds,
    steady,
    warmup_rounds,
)
from ssd_sim.io.trace import read_trace
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import stalled_trace, write_trace


def test_the_arrival_bound_is_2_42_ms_where_the_clock_still_resolves_a_microsecond():
    assert MAX_ARRIVAL_MS == 2.0**42
    assert (MAX_ARRIVAL_MS + 2**-10) - MAX_ARRIVAL_MS == 2**-10  # a 1 us step still moves the clock
    assert 1e308 + 5.0 == 1e308  # at 1e308 a 5 ms round does not


@pytest.mark.parametrize("ms,text", [(450, "0.45 s"), (45e3, "45 s"), (12 * 60e3, "12 min"), (1e7, "2.8 hours"),
                                     (8e9, "93 days"), (1.7e12, "54 years"), (1e17, "3.17e+06 years")])
def test_durations_read_in_the_unit_people_use(ms, text):
    assert duration(ms) == text


def test_arrival_times_past_2_42_ms_are_refused_naming_the_entry_and_the_fix():
    check_arrival_ms(MAX_ARRIVAL_MS, "arrival_ms[3]")
    with pytest.raises(ConfigError, match=r"^arrival_ms: arrival_ms\[3\] = 1e\+308 ms is past 2\*\*42 ms .*give "
                                          r"arrival times in ms from the start of the log$"):
        check_arrival_ms(1e308, "arrival_ms[3]")
    with pytest.raises(ConfigError, match="must be finite ms >= 0"):
        check_arrival_ms(float("inf"), "arrival_ms[0]")


def test_a_rate_spacing_requests_past_the_bound_is_refused():
    check_rate(1e-6, 8, 8)  # 93 days: within the bound (it warns instead)
    with pytest.raises(ConfigError, match=r"^rate: --rate 1e-06 requests/s spaces 1000000 requests over ~3.17e\+04 "
                                          "years, past the 139 years"):
        check_rate(1e-6, 10**6, 10**6)


def test_a_rate_of_days_warns_with_the_span_and_the_decoding_it_brings():
    assert rate_warning(1e-6, 8, 8) == ("--rate 1e-06 requests/s spaces 8 requests over ~93 days of waiting; --rate "
                                        "is in requests per second")
    line = rate_warning(0.01, 100, 100, busy_ms=5600.0, waiting="simulated waiting")
    assert line == ("--rate 0.01 requests/s spaces 100 requests over ~2.8 hours of simulated waiting, against ~5.6 s "
                    "of decoding them one after another; --rate is in requests per second")


@pytest.mark.parametrize("rate,n,busy_ms", [(1.0, 100, None),  # 100 s: under an hour
                                           (0.01, 100, 1.5e6),  # 2.8 hours of which 25 min decode: not idle enough
                                           (1e-6, 1, None)])  # ssd-run: one request, no gap, no waiting
def test_no_warning_under_an_hour_or_when_decoding_fills_a_tenth(rate, n, busy_ms):
    assert rate_warning(rate, n, n - 1 if busy_ms is None else n, busy_ms) is None


def test_arrivals_in_epoch_ms_warn_but_a_busy_day_does_not():
    line = arrivals_warning("a.json", [0.0, 1.7e12], busy_ms=170.0)
    assert line == ("a.json: arrival_ms spans ~54 years of simulated waiting for 2 requests, against ~0.17 s of "
                    "decoding them one after another; arrival_ms is ms from the start (not us, ns or an epoch time)")
    assert arrivals_warning("a.json", [0.0, 86.4e6], busy_ms=20e6) is None  # a day, 23% busy


def test_the_same_trace_twice_a_copy_and_links_are_counted_once(tmp_path):
    t = write_trace(tmp_path / "t.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=20, seed=1)
    other = write_trace(tmp_path / "u.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=20, seed=2)
    shutil.copy(t, tmp_path / "copy.jsonl")
    os.symlink(t, tmp_path / "sym.jsonl")
    os.link(t, tmp_path / "hard.jsonl")
    names = [str(t), str(other), str(t), str(tmp_path / "copy.jsonl"), str(tmp_path / "sym.jsonl"),
             str(tmp_path / "hard.jsonl")]
    kept, twin, lines = distinct_traces([read_trace(n) for n in names], names)
    assert kept == [0, 1] and twin == {2: 0, 3: 0, 4: 0, 5: 0}
    assert lines[0] == (f"trace {t} is given twice: counted once (a second copy would double its samples and narrow "
                        "the intervals)")
    assert lines[1].startswith(f"trace {tmp_path / 'copy.jsonl'} has the same records as {t}: counted once")


def test_a_round_over_five_times_the_median_warns_with_its_extra_time_and_share(tmp_path):
    t = stalled_trace(tmp_path / "t.jsonl", 20.0)
    ms = sorted(r.timings_ms["round"] for r in t.rounds)
    median, total = ms[len(ms) // 2], sum(ms)
    line = stall_warning(t.rounds, "t.jsonl")
    extra = max(ms) - median
    assert line.startswith(f"t.jsonl: 1 of 40 rounds stalled (over {STALL_FACTOR:g}x the median round of their rows ")
    assert f"{extra / total:.1%} of the run's time" in line and "leaves them out of the latency fit" in line


def test_rounds_under_five_times_the_median_do_not_warn(tmp_path):
    assert stall_warning(stalled_trace(tmp_path / "t.jsonl", 4.5).rounds, "t.jsonl") is None


def test_calibration_reports_the_stalled_trace(tmp_path):
    from ssd_sim.model.calibrate import calibrate

    stalled_trace(tmp_path / "sd.jsonl", 20.0)
    write_trace(tmp_path / "ar.jsonl", Plan(mode="ar"), rounds=40, seed=4)
    _, report = calibrate([tmp_path / "sd.jsonl", tmp_path / "ar.jsonl"])
    stalls = [w for w in report.warnings if "stalled" in w]
    assert len(stalls) == 1 and stalls[0].startswith(f"{tmp_path / 'sd.jsonl'}: 1 of 40 rounds stalled")


def test_steady_drops_exactly_the_stalled_round_and_keeps_a_clean_trace_as_it_is(tmp_path):
    t = stalled_trace(tmp_path / "t.jsonl", 20.0)
    stalled = stalled_rounds(t.rounds)
    assert [t.rounds[i].round for i in stalled] == [7] and stalled[next(iter(stalled))] > 0
    kept = steady(t)
    assert len(kept.rounds) == 39 and 7 not in {r.round for r in kept.rounds} and len(t.rounds) == 40
    clean = stalled_trace(tmp_path / "c.jsonl", 4.5)
    assert stalled_rounds(clean.rounds) == {} and steady(clean) is clean


def test_a_graph_warmup_round_is_no_stall_and_steady_drops_it_at_any_length(tmp_path):
    for factor in (20.0, 2.5):  # a capture (far over the stall factor) and a first eager sighting (under it)
        t = stalled_trace(tmp_path / f"w{factor}.jsonl", factor, warmup=True)
        assert warmup_rounds(t.rounds) == [7]
        assert stalled_rounds(t.rounds) == {} and stall_warning(t.rounds, "w.jsonl") is None
        kept = steady(t)
        assert len(kept.rounds) == 39 and 7 not in {r.round for r in kept.rounds}


def test_calibration_times_latency_without_the_warmup_rounds_it_would_otherwise_keep(tmp_path):
    from ssd_sim.model.calibrate import calibrate

    ar = write_trace(tmp_path / "ar.jsonl", Plan(mode="ar"), rounds=40, seed=4)
    write_trace(tmp_path / "clean.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=40, seed=3, noise=0.0)
    clean, _ = calibrate([tmp_path / "clean.jsonl", ar])
    fits = {}
    reports = {}
    for warmup in (False, True):  # one round at 4x: under the stall factor, so only the runtime's mark removes it
        stalled_trace(tmp_path / f"sd{warmup}.jsonl", 4.0, warmup=warmup)
        fits[warmup], reports[warmup] = calibrate([tmp_path / f"sd{warmup}.jsonl", ar])
        assert not [w for w in reports[warmup].warnings if "stalled" in w]
    assert reports[False].unsteady == {} and reports[False].unsteady_line() is None
    assert reports[True].to_dict()["unsteady_rounds"] == {"rounds": 80, "stalled": 0, "warmup": 1}
    assert reports[True].unsteady_line() == ("latency timed on 79 of 80 rounds: 0 stalled and 1 CUDA graph warm-up "
                                             "rounds left out (io.sanity.steady)")
    assert fits[True].latency.target(1, 3) == pytest.approx(clean.latency.target(1, 3), rel=0.005)
    assert fits[False].latency.target(1, 3) > 1.03 * clean.latency.target(1, 3)


def test_calibration_times_latency_without_the_stalled_round_and_reads_acceptance_from_all(tmp_path):
    from ssd_sim.model.calibrate import calibrate

    stalled_trace(tmp_path / "sd.jsonl", 20.0)
    write_trace(tmp_path / "clean.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=40, seed=3, noise=0.0)
    write_trace(tmp_path / "ar.jsonl", Plan(mode="ar"), rounds=40, seed=4)
    stalled, _ = calibrate([tmp_path / "sd.jsonl", tmp_path / "ar.jsonl"])
    clean, _ = calibrate([tmp_path / "clean.jsonl", tmp_path / "ar.jsonl"])
    for rows, tokens in ((1, 1), (1, 3)):  # the stall (19 verifies' worth in one round) would lift them by ~50%
        assert stalled.latency.target(rows, tokens) == pytest.approx(clean.latency.target(rows, tokens), rel=0.005)
    assert stalled.latency.draft(1, 1) == pytest.approx(clean.latency.draft(1, 1), rel=0.005)
    assert stalled.acceptance.at(0.0) == clean.acceptance.at(0.0)


def test_a_burst_of_wide_rounds_in_a_mostly_narrow_run_is_not_a_stall(tmp_path):
    path = tmp_path / "mixed.jsonl"
    write_trace(path, Plan(mode="ar", batch_size=4), rounds=40, seed=5, noise=0.0)
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    recs = [r for r in recs if r.get("type") != "summary"]
    for r in recs:
        if r.get("type") == "round" and r["round"] < 30:  # 30 one-row rounds at 1/8 the time, then 10 of four rows
            r["seqs"] = r["seqs"][:1]
            r["timings_ms"] = {k: v / 8 for k, v in r["timings_ms"].items()}
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    t = read_trace(path)
    assert sorted({len(r.seqs) for r in t.rounds}) == [1, 4]
    assert stalled_rounds(t.rounds) == {} and stall_warning(t.rounds, "mixed.jsonl") is None
