"""Calibration recovers known latency and acceptance parameters from traces written in the runtime schema."""


from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import (
    calibrate,
    fit_hit_curve,
    latency_samples,
    ssd_transfer_samples,
    wilson,
)
from ssd_sim.model.interference import glue_tokens
from ssd_sim.model.profile import Profile
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import DRAFT, OVERHEAD, TARGET, sample_rank, write_trace

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    plans = [
        Plan(mode="ar", batch_size=1), Plan(mode="ar", batch_size=4),
        Plan(mode="sd", num_speculative_tokens=3, batch_size=1),
        Plan(mode="sd", num_speculative_tokens=2, batch_size=2),
        Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=1, backup="jit"),
        Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 3), fan_out_miss=(8, 0, 0, 0), batch_size=3, backup="fast"),
        Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=2, backup="jit", jit_redraft="batch"),
    ]
    return [write_trace(d / f"t{i}.jsonl", p, rounds=300, seed=i) for i, p in enumerate(plans)]


def test_latency_fits_recover_the_generating_functions(traces):
    prof, rep = calibrate(traces)
    for model, truth in ((prof.latency.target, TARGET), (prof.latency.draft, DRAFT)):
        for rows, tokens in ((1, 1), (4, 1), (1, 4), (12, 1), (3, 4)):
            assert model(rows, tokens) == pytest.approx(truth(rows, tokens), rel=0.03)
    assert rep.latency["target"]["r2"] > 0.99 and rep.latency["draft"]["r2"] > 0.99


def test_sd_drafting_after_an_all_accepted_round_is_timed_as_a_two_token_first_step(tmp_path):
    trace = read_trace(write_trace(tmp_path / "sd.jsonl", Plan(mode="sd", num_speculative_tokens=3, batch_size=2),
                                   rounds=60, seed=4))
    work = latency_samples([trace]).draft_work
    assert work[0] == [(2, 1, 1), (2, 1, 2)]  # the first round: only the prefill's token is unfed
    carried = [any(s.accepted == 3 for s in r.seqs) for r in trace.rounds]
    assert 5 < sum(carried) < 55
    assert [w[0] for w in work[1:]] == [(2, 2 if c else 1, 1) for c in carried[:-1]]


def test_ssd_glue_after_a_jit_backup_of_every_row_is_timed_as_one_token_per_row(tmp_path):
    plan = Plan(num_speculative_tokens=2, fan_out=(1, 1, 2), batch_size=2)
    trace = read_trace(write_trace(tmp_path / "ssd.jsonl", plan, rounds=80, seed=3))
    samples = latency_samples([trace])
    # beside the verify: the glue over both rows once, and K = 2 branch steps of 8 rows
    glue = [w[0] for w, beside in zip(samples.draft_work, samples.draft_concurrent, strict=True) if beside and w[0][0] == 2]
    every = [all(s.hit is False for s in r.seqs) for r in trace.rounds]
    assert 5 < sum(every) < 75 and len(glue) == 80
    assert glue == [(2, 1 if e else 3, 1) for e in every]


def test_overheads_are_recovered(traces):
    prof, _ = calibrate(traces)
    lat = prof.latency
    assert lat.round_overhead_ms == pytest.approx(OVERHEAD["commit"], rel=0.05)
    assert lat.lookup_ms == pytest.approx(OVERHEAD["lookup"], rel=0.05)
    assert lat.fast_backup_ms == pytest.approx(OVERHEAD["fast"], rel=0.05)
    assert lat.transfer_ms == pytest.approx(OVERHEAD["transfer"], abs=0.3)
    assert lat.sd_transfer
    # every SSD round here whose glue re-read K + 1 tokens has the draft outlast its verify (by 60-400 ms), and the
    # target waits for it in the next round: a low quantile of the wait alone would read that overrun as transfer
    ssd = [t for t in map(read_trace, traces) if t.mode == "ssd"]
    waits = [r.timings_ms["target_wait"] for t in ssd for p, r in zip(t.rounds, t.rounds[1:], strict=False)
             if glue_tokens(t, p) > 1]
    assert len(waits) > 300 and np.percentile(waits, 25) > 50 * OVERHEAD["transfer"]


def test_the_ssd_transfer_of_real_runs_is_the_probes_round_trip_not_the_drafts_overrun():
    # pool40i: the draft's glue + branch (~860 ms) outlast the verify (~730 ms) in most rounds; the target's wait
    # beyond the lookup and backup then holds that overrun (p25 49 ms), the link itself ~1 ms (the probe of the same
    # host kind times a request + reply at 0.6-1.1 ms: traces/cpu-fp32-pool/probe.json)
    paths = sorted((ROOT / "traces" / "cpu-fp32-pool40i").glob("*ssd*.jsonl"))
    samples = [x for p in paths for x in ssd_transfer_samples(read_trace(p))]
    assert len(samples) == 1516 and 0.5 < np.median(samples) < 3.0
    overruns = [max(r.timings_ms["draft_glue"] + r.timings_ms["draft_branch"] - r.timings_ms["verify"], 0.0)
                for p in paths for r in read_trace(p).rounds]
    assert np.median(overruns) > 100


def test_acceptance_and_hit_curves_are_recovered(traces):
    prof, rep = calibrate(traces)
    pt = prof.acceptance.at(0.0, 1.0)
    assert pt.source == "measured" and pt.hit_source == "measured"
    assert pt.acceptance[0] == pytest.approx(0.7, abs=0.03)
    assert pt.primary_hit.miss_at_one == pytest.approx(0.4, abs=0.05)
    assert pt.primary_hit.r == pytest.approx(0.8, abs=0.15)
    assert pt.backup_hit.miss_at_one == pytest.approx(0.3, abs=0.07)
    lo, hi = rep.acceptance[0]["per_position"][0]["ci95"]
    assert lo < 0.7 < hi


def test_hit_curve_fit_on_many_ranks():
    import numpy as np

    rng = np.random.default_rng(0)
    ranks = [sample_rank(rng, 0.35, 0.6) for _ in range(20_000)]
    curve, info = fit_hit_curve(ranks)
    assert curve.miss_at_one == pytest.approx(0.35, abs=0.01)
    assert curve.r == pytest.approx(0.6, abs=0.03)
    assert info["r_ci95"][0] < 0.6 < info["r_ci95"][1] + 0.03


def test_wilson_interval():
    lo, hi = wilson(70, 100)
    assert lo == pytest.approx(0.604, abs=0.002) and hi == pytest.approx(0.781, abs=0.002)


def test_mixed_setups_are_refused(traces, tmp_path):
    other = tmp_path / "other.jsonl"
    text = traces[0].read_text().replace("tiny-target", "other-target")
    other.write_text(text)
    with pytest.raises(ConfigError, match="models"):
        calibrate([traces[0], other])


def test_ar_traces_without_a_draft_mix_with_sd_and_ssd_traces(traces, tmp_path):
    ar = tmp_path / "ar.jsonl"
    ar.write_text(traces[0].read_text().replace('"draft":"tiny-draft"', '"draft":null')
                  .replace('"draft":"float32"', '"draft":null').replace('"draft":"cpu:1"', '"draft":null'))
    prof, rep = calibrate([ar, *traces[2:]])
    assert rep.latency["target"]["samples"] > 300


def test_ar_only_traces_cannot_fit_acceptance(traces):
    with pytest.raises(ConfigError, match="draft"):
        calibrate(traces[:2])


# ---- the host the traces were measured on --------------------------------------------------------------
ZEN5 = Host(cpu="AMD EPYC", cpu_id="AuthenticAMD family 26 model 2 stepping 1", isa=("avx2", "avx512f"), cores=2,
            memory_gib=23.5, torch="2.13.0+cpu")


def hosted(tmp_path, name: str, plan: Plan, host: Host) -> str:
    return str(write_trace(tmp_path / f"{name}.jsonl", plan, rounds=60, header={"host": host.to_dict()}))


def test_the_profile_records_the_traces_host_with_every_role_s_kernels(tmp_path):
    ar = hosted(tmp_path, "ar", Plan(mode="ar"), replace(ZEN5, kernels={"target": "onednn-prepacked"}))
    sd = hosted(tmp_path, "sd", Plan(mode="sd", num_speculative_tokens=2),
                replace(ZEN5, kernels={"target": "onednn-prepacked", "draft": "onednn-prepacked"}))
    prof, _ = calibrate([ar, sd])
    assert prof.host == replace(ZEN5, kernels={"target": "onednn-prepacked", "draft": "onednn-prepacked"})
    assert prof.provenance["host"].startswith("recorded in the traces: AMD EPYC [AuthenticAMD family 26")
    assert Profile.from_dict(prof.to_dict()).host == prof.host


def test_traces_of_two_hosts_are_refused(tmp_path):
    avx2 = replace(ZEN5, cpu_id="AuthenticAMD family 25 model 1 stepping 1", isa=("avx2",))
    a = hosted(tmp_path, "a", Plan(mode="sd", num_speculative_tokens=2), ZEN5)
    b = hosted(tmp_path, "b", Plan(mode="sd", num_speculative_tokens=3), avx2)
    with pytest.raises(ConfigError, match=r"^host: .*b\.jsonl was measured on another host .* ISA no avx512f here"):
        calibrate([a, b])


def test_the_profile_keeps_the_traces_guest_only_when_they_all_ran_on_it(tmp_path):
    one = replace(ZEN5, boot_id="guest-a", booted_at="2026-12-05T21:23Z")
    ar = hosted(tmp_path, "ar", Plan(mode="ar"), one)
    sd = hosted(tmp_path, "sd", Plan(mode="sd", num_speculative_tokens=2), one)
    prof, _ = calibrate([ar, sd])
    assert prof.host.boot_id == "guest-a" and prof.provenance["host"].endswith("; the guest booted 2026-12-05 21:23 UTC")
    other = hosted(tmp_path, "sd3", Plan(mode="sd", num_speculative_tokens=3), replace(one, boot_id="guest-b"))
    pooled, rep = calibrate([ar, sd, other])  # one host kind on two guests: calibrated, but no one guest's latency
    assert (pooled.host.boot_id, pooled.host.booted_at) == ("", "") and pooled.host.cpu_id == ZEN5.cpu_id
    assert pooled.provenance["host"].endswith("; 2 guests")
    assert [w for w in rep.warnings if "guests" in w] == [
        "the traces ran on 2 guests of one host kind (their hosts' boot_id): the latencies are fitted over all of them, "
        "and one kind's guests ran the same runs up to 27% apart; calibrate one guest's traces, or add a probe of the "
        "guest you will run on (--probe)"]
    assert not [w for w in calibrate([ar, sd])[1].warnings if "guests" in w]
    unknown = hosted(tmp_path, "sd4", Plan(mode="sd", num_speculative_tokens=4), ZEN5)  # a record from before guests
    assert calibrate([ar, sd, unknown])[0].host.boot_id == ""


def test_traces_without_a_host_record_give_a_profile_without_one(traces):
    prof, _ = calibrate(traces[2:4])
    assert prof.host is None
    assert prof.provenance["host"] == "not recorded in the traces (made before ssd-run recorded hosts)"


# ---- interference: the target's verify while the draft speculates ------------------------------------------
def test_interference_is_recovered_per_kind_of_draft_step(tmp_path):
    plans = [Plan(mode="ar"), Plan(mode="sd", num_speculative_tokens=2), Plan(mode="sd", num_speculative_tokens=3),
             Plan(num_speculative_tokens=2, fan_out=(0, 0, 1)), Plan(num_speculative_tokens=2, fan_out=(1, 1, 2))]
    paths = [write_trace(tmp_path / f"i{i}.jsonl", p, rounds=150, seed=i, interference=(0.40, 0.10))
             for i, p in enumerate(plans)]
    prof, rep = calibrate(paths)
    lat = prof.latency
    assert lat.verify_slowdown_one_row == pytest.approx(0.40, abs=0.03)
    assert lat.verify_slowdown_rows == pytest.approx(0.10, abs=0.03)
    assert rep.latency["interference"]["samples"] == 300
    assert prof.provenance["latency.interference"].startswith("measured on 300 SSD rounds: verify +4")
    for r, t in ((1, 1), (1, 3), (2, 4)):  # the target fit is the idle one, not biased by the SSD verifies
        assert float(lat.target(r, t)) == pytest.approx(float(TARGET(r, t)), rel=0.02)


def test_interference_without_idle_verifies_is_assumed_zero(tmp_path):
    paths = [write_trace(tmp_path / f"s{i}.jsonl", Plan(num_speculative_tokens=2, fan_out=f), rounds=80, seed=i,
                         interference=(0.4, 0.1)) for i, f in enumerate([(0, 0, 1), (1, 1, 2)])]
    prof, rep = calibrate(paths)
    assert prof.latency.verify_slowdown_one_row == prof.latency.verify_slowdown_rows == 0.0
    assert rep.latency["interference"]["source"].startswith("assumed 0: no AR / SD traces to compare the SSD verifies with")


def test_acceptance_can_come_from_a_subset_of_the_traces(tmp_path):
    easy = write_trace(tmp_path / "easy.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=300, acceptance=0.95)
    usual = write_trace(tmp_path / "usual.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=300, seed=1)
    both, _ = calibrate([easy, usual])
    only, _ = calibrate([easy, usual], acceptance_from=[usual])
    assert only.acceptance.at(0.0).acceptance[0] == pytest.approx(0.7, abs=0.04)
    assert both.acceptance.at(0.0).acceptance[0] > only.acceptance.at(0.0).acceptance[0] + 0.05
    assert only.latency == both.latency  # latencies still come from every trace
    with pytest.raises(ConfigError, match="acceptance_from: .*nope.jsonl is not one of the calibrated traces"):
        calibrate([easy, usual], acceptance_from=[tmp_path / "nope.jsonl"])


@pytest.fixture(scope="module")
def ar_sd_traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("arsd")
    return [write_trace(d / "ar.jsonl", Plan(mode="ar", batch_size=1), rounds=100, seed=1),
            write_trace(d / "sd3.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=300, seed=2),
            write_trace(d / "sd2.jsonl", Plan(mode="sd", num_speculative_tokens=2), rounds=300, seed=3)]


def test_sd_traces_without_ranks_or_distributions_warn_that_the_hit_curve_is_assumed(ar_sd_traces):
    prof, rep = calibrate(ar_sd_traces)
    assert prof.acceptance.response == "synthetic" and prof.acceptance.at(0.0).hit_source == "assumed"
    assert any("primary hit curve assumed" in w for w in rep.warnings)
    assert any("measured at T = 0 only" in w for w in rep.warnings)
    assert prof.provenance["acceptance.hit"].startswith("assumed")
    lat, u = prof.latency, prof.uncertainty  # no SSD trace: interference at the middle of its stated range
    assert lat.verify_slowdown_one_row == lat.verify_slowdown_rows == 0.25 and lat.draft_slowdown == pytest.approx(0.1)
    assert prof.provenance["latency.interference"].startswith("assumed 25%: the middle of 0%..50% (CPU")
    assert u.interference == (0.0, 0.5) and u.hit_assumed and u.sources["hit"].startswith("assumed")


def test_logged_distributions_make_a_derived_model_that_agrees_with_the_counts(ar_sd_traces, tmp_path):
    import shutil

    from tests.helpers.synthetic_traces import add_greedy_dists

    paths = [shutil.copy(p, tmp_path / p.name) for p in ar_sd_traces]
    for p in paths[1:]:
        add_greedy_dists(Path(p), seed=int(Path(p).stem[-1]))
    prof, rep = calibrate(paths)
    acc = prof.acceptance
    assert acc.response == "logged" and rep.logged["contexts"] > 1000 and rep.logged["top_n"] == 8
    for entry in rep.acceptance:  # position 0 is reached by every round and is never the all-accepted one
        assert entry["derived_acceptance"][0] == pytest.approx(entry["per_position"][0]["acceptance"], abs=1e-9)
    pt = acc.at(0.0)
    assert pt.source == "derived" and pt.hit_source == "derived"
    assert 0.0 < pt.primary_hit.hit([1, 1, 1])[0] < pt.primary_hit.hit([4, 4, 4])[0] < 1.0
    hot = acc.at(1.0, 0.5)  # another temperature and C: from the distributions, not a clamp
    assert hot.source == "derived" and hot.acceptance[0] != pytest.approx(pt.acceptance[0], abs=0.01)
    assert any("contexts of T = 0 runs" in w for w in rep.warnings)
    assert prof.provenance["acceptance"].startswith("derived")


def rewritten(src: Path, dst: Path, edit) -> Path:
    import json

    lines = [json.loads(x) for x in src.read_text().splitlines()]
    edit([x for x in lines if x["type"] == "round"], lines[0])
    dst.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return dst


def test_accepted_above_k_is_refused_not_clipped_to_all_accepted(traces, tmp_path):
    # Round 7 of the SD K = 3 trace claims 5 accepted: counted, it used to read as "all 3 accepted".
    bad = rewritten(traces[2], tmp_path / "sd.jsonl", lambda rounds, h: rounds[7]["seqs"][0].update(accepted=5))
    with pytest.raises(ConfigError) as e:
        calibrate([*traces[:2], bad, *traces[3:]])
    assert e.value.field == "accepted"
    assert str(e.value) == (f"accepted: {bad} line 9: seqs[0].accepted = 5 must be an integer in 0..K = 0..3 (draft "
                            "tokens accepted); the trace is corrupt or not from ssd-run")


@pytest.mark.parametrize("value, shown", [(-0.5, "-0.5"), (1e999, "inf"), (1e-9, "1e-09"), (4e6, "4000000.0"),
                                          (True, "True"), (None, "None")])
def test_impossible_timings_are_refused_with_file_line_field_and_value(traces, tmp_path, value, shown):
    bad = rewritten(traces[0], tmp_path / "ar.jsonl", lambda rounds, h: rounds[0]["timings_ms"].update(commit=value))
    with pytest.raises(ConfigError) as e:
        calibrate([bad, *traces[1:]])
    assert str(e.value) == (f"timings_ms.commit: {bad} line 2: timings_ms.commit = {shown} must be 0 (did not run) or "
                            "a number of ms in 1e-06..3.6e+06; the trace is corrupt or not from ssd-run")


def test_ssd_verifies_far_off_the_other_traces_are_refused(traces, tmp_path):
    # Every SSD verify 5 ms while the AR / SD traces put it at 450+ ms: no slowdown >= 0 explains that.
    fast = [rewritten(t, tmp_path / t.name, lambda rounds, h: [r["timings_ms"].update(verify=5.0) for r in rounds])
            if "ssd" == _mode(t) else t for t in traces]
    with pytest.raises(ConfigError, match=r"the SSD traces' verify timings are \d+% \(median\) off"):
        calibrate(fast)


def _mode(path: Path) -> str:
    import json

    return json.loads(path.read_text().splitlines()[0])["mode"]


def test_a_numerical_failure_of_a_fit_is_one_config_error(traces, monkeypatch):
    import numpy as np

    import ssd_sim.model.calibrate as cal

    def singular(*a, **k):
        raise np.linalg.LinAlgError("SVD did not converge")

    monkeypatch.setattr(cal, "fit_latency", singular)
    with pytest.raises(ConfigError) as e:
        calibrate(traces)
    assert str(e.value) == ("traces: the latency fit failed on these traces (LinAlgError: SVD did not converge); are "
                            "they from real runs?")


def test_a_trace_given_twice_or_copied_counts_once_and_only_kept_traces_are_sources(tmp_path):
    import shutil

    t = write_trace(tmp_path / "t.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=200, seed=4)
    u = write_trace(tmp_path / "u.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=200, seed=5)
    shutil.copy(t, tmp_path / "copy.jsonl")
    once, rep1 = calibrate([t, u])
    twice, rep2 = calibrate([t, u, t, tmp_path / "copy.jsonl"], acceptance_from=[tmp_path / "copy.jsonl", u])
    assert twice.sources == once.sources == (str(t), str(u)) and rep2.traces == rep1.traces
    assert twice.latency == once.latency and twice.acceptance == once.acceptance
    assert twice.uncertainty == once.uncertainty  # the intervals do not narrow
    assert rep1.duplicates == [] and "duplicates" not in rep1.to_dict()
    assert rep2.duplicates == [
        f"trace {t} is given twice: counted once (a second copy would double its samples and narrow the intervals)",
        f"trace {tmp_path / 'copy.jsonl'} has the same records as {t}: counted once (a second copy would double its "
        "samples and narrow the intervals)"]


def test_traces_sampled_with_top_p_warn_that_no_truncation_is_modelled(traces, tmp_path):
    plan = Plan(mode="sd", num_speculative_tokens=3, batch_size=1, temperature=1.0)
    nucleus = str(write_trace(tmp_path / "topp.jsonl", plan, rounds=200, header={"top_k": 0, "top_p": 0.9}))
    _, report = calibrate([*traces[:2], nucleus])
    assert [w for w in report.warnings if "top_k=0 top_p=0.9" in w and "no truncation is modelled" in w]
    _, plain = calibrate(traces)
    assert not [w for w in plain.warnings if "top_p" in w]
