"""model.drift: repeat runs of one setup are grouped, their verify times' pooled log-SD is the drift, per horizon
(within the hour of the timed forwards, or later)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from ssd_sim.io.trace import read_trace
from ssd_sim.model.drift import (
    HORIZONS,
    NO_DRIFT,
    SHIPPED_DRIFTS,
    Drift,
    calibration_drift,
    clustered_drift,
    guest_of,
    horizon_of,
    interleaved_with,
    measured_drift,
    median_draft_ms,
    median_verify_ms,
    minutes_from,
    pooled_log_sd,
    project_drift,
    repeat_groups,
    repeat_pairs,
    session_clusters,
    shipped_trace_paths,
    span_minutes,
    started,
    timed_span,
)
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import write_trace


def test_pooled_log_sd_is_the_within_group_sd_of_logs():
    e = math.e
    # group 1: ln = 0, 2 (mean 1, ss 2); group 2: ln = 1, 1, 4 (mean 2, ss 6); dof = 5 - 2
    assert pooled_log_sd([[1.0, e ** 2], [e, e, e ** 4]]) == pytest.approx(math.sqrt(8 / 3))
    with pytest.raises(ValueError, match="two runs"):
        pooled_log_sd([[5.0]])


def _repeats(tmp_path, minutes=(0, 20, 40), name="a", k=3):
    """Repeat SD traces of one setup started `minutes` after 12:00 UTC."""
    sd = Plan(mode="sd", num_speculative_tokens=k)
    return [read_trace(write_trace(tmp_path / f"{name}{i}.jsonl", sd, rounds=40, seed=i, noise=0.2,
                                   header={"started_at": f"2026-12-03T{12 + m // 60:02d}:{m % 60:02d}:00Z"}))
            for i, m in enumerate(minutes)]


def _in_sessions(tmp_path, k: int, sessions: list[str]) -> list:
    """SD K = k traces of one setup, one per session folder (each its own noise)."""
    sd = Plan(mode="sd", num_speculative_tokens=k)
    out = []
    for i, name in enumerate(sessions):
        (tmp_path / name).mkdir(exist_ok=True)
        out.append(read_trace(write_trace(tmp_path / name / f"k{k}.jsonl", sd, rounds=40, seed=10 * k + i,
                                          noise=0.3)))
    return out


def test_setups_repeated_in_the_same_sessions_count_once_in_the_clustered_drift(tmp_path):
    pair = [t for k in (2, 3) for t in _in_sessions(tmp_path, k, ["a1", "a2"])]
    trio = _in_sessions(tmp_path, 4, ["b1", "b2", "b3"])
    groups = repeat_groups(pair + trio)
    clusters = session_clusters(groups)
    assert list(clusters) == [("a1", "a2"), ("b1", "b2", "b3")]
    assert [[g[0].header.plan["num_speculative_tokens"] for g in c] for c in clusters.values()] == [[2, 3], [4]]
    ms = [[[median_verify_ms(t) for t in g] for g in c] for c in clusters.values()]
    v_pair, v_trio = pooled_log_sd(ms[0]), pooled_log_sd(ms[1])
    d = clustered_drift(groups)
    # the pair's two setups are one contrast (weight 1), the trio's two contrasts (weight 2): 3 degrees of freedom,
    # where counting every setup gives 2 + 2 = 4
    assert (d.groups, d.runs, d.dof) == (2, 5, 3) and measured_drift(pair + trio).dof == 4
    assert d.sd == pytest.approx(math.sqrt((v_pair ** 2 + 2 * v_trio ** 2) / 3))
    assert clustered_drift(repeat_groups(_in_sessions(tmp_path, 5, ["c1"]) * 2)) is None  # one session: no contrast
    # the project's later drift is this clustered one; within the hour every setup counts (no starts: all later)
    assert project_drift(pair + trio, "later") == d and project_drift(pair + trio, "session") is None


def test_setups_that_share_a_session_fall_in_one_cluster(tmp_path):
    # one setup repeated in sessions a1, a2; another in a1, a2 and a third session a3 (a later repeat of only some
    # setups): they share a1 and a2's shift, so they are one cluster of three sessions, two contrasts
    pair = _in_sessions(tmp_path, 2, ["a1", "a2"])
    trio = _in_sessions(tmp_path, 3, ["a1", "a2", "a3"])
    apart = _in_sessions(tmp_path, 4, ["b1", "b2"])
    groups = repeat_groups(pair + trio + apart)
    clusters = session_clusters(groups)
    assert list(clusters) == [("a1", "a2", "a3"), ("b1", "b2")]
    assert [[g[0].header.plan["num_speculative_tokens"] for g in c] for c in clusters.values()] == [[2, 3], [4]]
    d = clustered_drift(groups)
    assert (d.groups, d.runs, d.dof) == (2, 5, 3)


def test_the_next_runs_drift_is_wider_than_its_estimate_by_students_t_on_its_degrees_of_freedom():
    # t quantiles at 95%: 1.943 on 6 degrees of freedom, 1.771 on 13, 1.658 on 120; the normal's 1.645
    assert Drift(0.1, 5, 11, "").predictive_sd() == pytest.approx(0.1 * 1.9432 / 1.6449, rel=1e-3)
    assert Drift(0.1, 10, 23, "").predictive_sd() == pytest.approx(0.1 * 1.7709 / 1.6449, rel=1e-3)
    assert Drift(0.1, 10, 130, "").predictive_sd() == pytest.approx(0.1 * 1.6577 / 1.6449, rel=1e-3)
    assert Drift(0.1, 5, 11, "").predictive_sd(level=0.5) == pytest.approx(0.1 * 0.7176 / 0.6745, rel=1e-3)
    assert Drift(0.1, 2, 2, "").predictive_sd() == 0.1  # no degrees of freedom: nothing to widen by


def _grid_run(tmp_path, folder: str, k: int, minute: int, interleave: int | None = 12):
    """An SD K = k run of a grid recorded in `folder`, started `minute` after 12:00 UTC, cut into `interleave`
    chunks run among the grid's other runs (bench/trace_grid.py writes "interleave" into the header; None: not)."""
    (tmp_path / folder).mkdir(exist_ok=True)
    header = {"started_at": f"2026-12-03T{12 + minute // 60:02d}:{minute % 60:02d}:00Z",
              **({"interleave": interleave} if interleave is not None else {})}
    return read_trace(write_trace(tmp_path / folder / f"k{k}-{minute}.jsonl", Plan(mode="sd", num_speculative_tokens=k),
                                  rounds=12, seed=k, header=header))


def test_a_run_is_interleaved_with_runs_of_its_own_interleaved_grid_only(tmp_path):
    grid = [_grid_run(tmp_path, "g", k, minute) for k, minute in ((1, 0), (2, 1), (3, 2))]
    assert interleaved_with(grid[2], grid[:2])
    assert interleaved_with(grid[0], grid)  # a run cut to other requests is still timed among them
    assert not interleaved_with(grid[2], [])  # among nothing
    assert not interleaved_with(dataclasses.replace(grid[2], path=None), grid[:2])  # from no file: no session known
    assert not interleaved_with(grid[2], [*grid[:2], _grid_run(tmp_path, "other-session", 4, 3)])
    assert not interleaved_with(grid[2], [_grid_run(tmp_path, "g", 4, 90)])  # 90 min apart: another grid's
    assert not interleaved_with(grid[2], [_grid_run(tmp_path, "g", 5, 3, interleave=4)])  # other chunks
    plain = [_grid_run(tmp_path, "p", k, minute, interleave=None) for k, minute in ((1, 0), (2, 1))]
    assert not interleaved_with(plain[1], plain[:1])  # runs one after another: drift lies between them
    assert NO_DRIFT.sd == 0 and NO_DRIFT.predictive_sd() == 0
    assert calibration_drift(grid, "session", {**SHIPPED_DRIFTS, "session": NO_DRIFT}).sd == 0


def test_repeats_of_one_setup_are_grouped_and_others_are_not(tmp_path):
    traces = _repeats(tmp_path)
    traces.append(read_trace(write_trace(tmp_path / "other.jsonl", Plan(mode="sd", num_speculative_tokens=2),
                                         rounds=40)))
    groups = repeat_groups(traces)
    assert [[t.path for t in g] for g in groups] == [[t.path for t in traces[:3]]]
    drift = measured_drift(traces)
    assert (drift.groups, drift.runs, drift.dof) == (1, 3, 2) and 0 < drift.sd < 0.2
    assert measured_drift(traces[2:]) is None
    assert all(calibration_drift(traces[2:], h) == SHIPPED_DRIFTS[h] for h in HORIZONS)


def test_a_group_counts_in_the_horizon_of_its_span(tmp_path):
    within, apart = _repeats(tmp_path, (0, 59), "w"), _repeats(tmp_path, (0, 61), "x", k=4)
    assert span_minutes(within) == 59 and span_minutes(apart) == 61
    assert [len(repeat_groups(within + apart, h)) for h in HORIZONS] == [1, 1]
    assert repeat_groups(within + apart, "session")[0] == within and repeat_groups(within + apart, "later")[0] == apart
    assert measured_drift(within, "later") is None and measured_drift(within, "session").runs == 2


def test_repeat_pairs_take_the_horizon_of_their_own_two_runs(tmp_path):
    # a setup run at 0, 160 and 219 minutes: its group spans 219 minutes (later), but its last two runs are 59 apart
    runs = _repeats(tmp_path, (0, 160, 219), "p")
    pairs = repeat_pairs(repeat_groups(runs))
    assert [round(p.minutes) for p in pairs] == [160, 219, 59]
    ms = [median_verify_ms(t) for t in runs]
    assert pairs[2].log_ratio == pytest.approx(math.log(ms[2] / ms[1]))
    assert pairs[0].sessions == (Path(runs[0].path).parent.name,) * 2  # one folder: one session
    assert repeat_groups(runs, "later") == [runs]  # the estimate still counts the group by its span


def test_repeat_pairs_say_whether_their_runs_shared_a_guest(tmp_path):
    sd = Plan(mode="sd", num_speculative_tokens=3)
    boots = ("guest-a", "guest-a", "guest-b", "")  # the last: a host record from before guests were recorded
    runs = [read_trace(write_trace(tmp_path / f"g{i}.jsonl", sd, rounds=40, seed=i, header={
        "started_at": f"2026-12-03T1{i}:00:00Z", "host": {"cpu_id": "x", **({"boot_id": b} if b else {})}}))
        for i, b in enumerate(boots)]
    assert [guest_of(t) for t in runs] == list(boots)
    pairs = {(round(p.minutes), p.same_guest) for p in repeat_pairs(repeat_groups(runs))}
    assert pairs == {(60, True), (120, False), (60, False), (180, None), (120, None), (60, None)}


def test_an_unknown_time_is_later(tmp_path):
    undated = [read_trace(write_trace(tmp_path / f"u{i}.jsonl", Plan(mode="sd", num_speculative_tokens=3), rounds=40,
                                      seed=i)) for i in range(2)]
    assert started(undated[0]) is None and span_minutes(undated) is None and timed_span(undated) == ()
    assert horizon_of(None) == "later" and horizon_of(60.0) == "session" and horizon_of(60.5) == "later"
    assert repeat_groups(undated, "later") and not repeat_groups(undated, "session")


def test_minutes_from_a_timed_span_is_the_farther_end(tmp_path):
    traces = _repeats(tmp_path, (0, 30))
    span = timed_span(traces)
    assert span == ("2026-12-03T12:00:00Z", "2026-12-03T12:30:00Z")
    assert minutes_from(span, started(traces[1])) == 30  # the fit spans both: the run may sit at its far end
    assert minutes_from(span, started(_repeats(tmp_path, (75,), "late")[0])) == 75
    assert minutes_from((), started(traces[0])) is None and minutes_from(span, None) is None


def test_a_calibrations_own_repeats_are_pooled_with_the_projects_by_degrees_of_freedom(tmp_path):
    traces = _repeats(tmp_path)
    own, pooled = measured_drift(traces, "session"), calibration_drift(traces, "session")
    base = SHIPPED_DRIFTS["session"]
    want = math.sqrt((2 * own.sd ** 2 + base.dof * base.sd ** 2) / (2 + base.dof))
    assert pooled.sd == pytest.approx(want) and "pooled with the project's 4.5%" in pooled.source
    assert calibration_drift(traces, "later") == SHIPPED_DRIFTS["later"]  # no repeats an hour apart
    with pytest.raises(ValueError, match="horizon"):
        calibration_drift(traces, "tomorrow")


def test_a_calibration_pools_with_the_project_drift_it_is_given(tmp_path):
    traces = _repeats(tmp_path)
    given = {"session": Drift(0.02, 3, 9, "given"), "later": Drift(0.3, 2, 4, "given")}
    own = measured_drift(traces, "session")
    want = math.sqrt((2 * own.sd ** 2 + 6 * 0.02 ** 2) / (2 + 6))
    assert calibration_drift(traces, "session", given).sd == pytest.approx(want)
    assert calibration_drift(traces, "later", given) == given["later"]  # no repeats an hour apart: the given one


def test_the_shipped_drifts_are_what_the_shipped_repeats_measure():
    """SHIPPED_DRIFTS cite bench/drift.py over traces/ (every folder but superseded/): per horizon the same groups,
    runs and SD as project_drift measures (within the hour every setup; later each cluster of sessions once)."""
    traces = [read_trace(p) for p in shipped_trace_paths(Path(__file__).resolve().parents[2] / "traces")]
    for horizon in HORIZONS:
        d, shipped = project_drift(traces, horizon), SHIPPED_DRIFTS[horizon]
        assert (d.groups, d.runs) == (shipped.groups, shipped.runs), horizon
        assert d.sd == pytest.approx(shipped.sd, abs=5e-4), horizon
    assert SHIPPED_DRIFTS["later"].sd > 1.5 * SHIPPED_DRIFTS["session"].sd


def test_the_drafts_drift_is_read_from_its_main_step(tmp_path):
    """SD's sequential draft step, SSD's branch decode; AR has no draft: what bench/drift.py compares with the verify."""
    def median(trace, phase):
        return sorted(r.timings_ms[phase] for r in trace.rounds)[len(trace.rounds) // 2]

    runs = {m: read_trace(write_trace(tmp_path / f"{m}.jsonl", Plan(mode=m, num_speculative_tokens=2), rounds=41,
                                      noise=0.1)) for m in ("ar", "sd", "ssd")}
    assert median_draft_ms(runs["ar"]) is None
    assert median_draft_ms(runs["sd"]) == pytest.approx(median(runs["sd"], "draft_sd"))
    assert median_draft_ms(runs["ssd"]) == pytest.approx(median(runs["ssd"], "draft_branch"))
    assert median_draft_ms(runs["ssd"]) != median_verify_ms(runs["ssd"])


def test_a_session_is_its_folder_named_from_below_traces_so_two_check_folders_are_two():
    from types import SimpleNamespace as T

    from ssd_sim.model.drift import session_of

    assert session_of(T(path="traces/cpu-fp32-pool/ar.jsonl")) == "cpu-fp32-pool"
    assert session_of(T(path="/r/traces/cpu-fp32-zen5-check/check/ar-r0.jsonl")) == "cpu-fp32-zen5-check/check"
    assert session_of(T(path="/r/traces/cpu-fp32-epyc-avx512/check/ar-r0.jsonl[A0]")) == "cpu-fp32-epyc-avx512/check"
    assert session_of(T(path="/tmp/run/ar.jsonl")) == "run" and session_of(T(path="/x/traces/a.jsonl")) == "traces"
    assert session_of(T(path="")) == "?"


def test_a_plan_field_at_its_empty_default_does_not_split_a_setup(tmp_path):
    """Headers written since 2026-12-02 carry saguaro_c_list: [] where older ones leave it out: the same run."""
    a, b = _repeats(tmp_path, minutes=(0, 20))
    old_plan = {k: v for k, v in a.header.plan.items() if k != "saguaro_c_list"}
    a = dataclasses.replace(a, header=dataclasses.replace(a.header, plan=old_plan))
    b = dataclasses.replace(b, header=dataclasses.replace(b.header, plan={**old_plan, "saguaro_c_list": []}))
    assert len(repeat_groups([a, b])) == 1
    c = dataclasses.replace(b, header=dataclasses.replace(b.header, plan={**b.header.plan, "saguaro_c_list": [0.5] * 3}))
    assert repeat_groups([a, c]) == []  # a real difference still splits
