"""A calibration with a probe takes its latencies from the probe's tables, and the planner plans with them."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.probe import load_probe
from ssd_sim.io.trace import read_trace
from ssd_sim.model.calibrate import calibrate, calibrate_traces
from ssd_sim.model.table import MeasuredForward
from ssd_sim.plan.plan import Plan
from ssd_sim.plan.planner import PlanRequest, make_plan
from ssd_sim.plan.predict import predict_ar, predict_sd
from tests.helpers.synthetic_traces import DRAFT, SETUP, TARGET, write_trace

BATCH, TOKENS, BRANCH = (1, 2, 4), range(1, 10), (1, 2, 4, 8, 16, 32)


def probe_dict(target=TARGET, draft=DRAFT, bump: dict | None = None, **over) -> dict:
    """A probe file whose medians are the generating curves (x bump[(rows, tokens)] where given)."""
    bump = bump or {}

    def row(kind, model, r, t):
        ms = float(model(r if kind == "append" else r, t)) * bump.get((r, t), 1.0)
        return [kind, r, t, ms, [ms * 0.99, ms, ms * 1.01]]

    models = {role: {"source": SETUP["models"][role], "dtype": "float32", "device": SETUP["devices"][role]}
              for role in ("target", "draft")}
    return {"schema": "ssd-probe/1", "grid": {"context": 256, "temperature": 0.0}, "models": models, "host": None,
            "target": [row("append", target, b, t) for b in BATCH for t in TOKENS],
            "draft": [row("append", draft, b, t) for b in BATCH for t in TOKENS]
            + [row("tree", draft, r, 1) for r in BRANCH],
            "interference": {"one_row": 0.3, "rows": 0.1, "draft": 0.05},
            "transfer": [[1, 4, 2.5, [2.5]], [2, 4, 3.0, [3.0]]], **over}


def write_probe(path, **kw):
    path.write_text(json.dumps(probe_dict(**kw)))
    return load_probe(path)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("probed")
    plans = [Plan(mode="ar", batch_size=1), Plan(mode="sd", num_speculative_tokens=3, batch_size=1)]
    return [write_trace(d / f"t{i}.jsonl", p, rounds=120, seed=i) for i, p in enumerate(plans)], d


def test_the_probe_replaces_the_fitted_latencies_slowdowns_and_transfer(traces):
    paths, d = traces
    probe = write_probe(d / "probe.json")
    prof, rep = calibrate(paths, probe=probe)
    lat = prof.latency
    assert isinstance(lat.target, MeasuredForward) and isinstance(lat.draft, MeasuredForward)
    assert lat.target(2, 5) == pytest.approx(float(TARGET(2, 5)))
    assert lat.draft(16, 1) == pytest.approx(float(DRAFT(16, 1)))
    assert (lat.verify_slowdown_one_row, lat.verify_slowdown_rows, lat.draft_slowdown) == (0.3, 0.1, 0.05)
    assert lat.transfer_ms == 2.5
    assert prof.provenance["latency"].startswith("measured: probe") and "probe" in prof.provenance["latency.interference"]
    assert prof.uncertainty.timed_rows_tokens == (4 * 9, 4 * 9) and prof.uncertainty.interference == ()
    # the traces ran on the generating curves, so each run's verifies sit on the table (drift ~ 0)
    assert all(r == pytest.approx(1.0, abs=0.03) for r in rep.latency["probe"]["runs_vs_table"].values())


def test_ssd_rounds_timed_among_ar_runs_measure_the_interference_against_the_tables(tmp_path):
    # the probe's loops say +30% / +10% / +5%; an interleaved grid's SSD run (4 branch rows per step) ran +12% / +4%
    plans = {"ar": Plan(mode="ar"), "sd": Plan(mode="sd", num_speculative_tokens=3),
             "ssd": Plan(num_speculative_tokens=2, fan_out=(1, 1, 2))}

    def runs(prefix: str, header: dict | None) -> list:
        return [write_trace(tmp_path / f"{prefix}{m}.jsonl", p, rounds=150, seed=i, header=header,
                            interference=(0.0, 0.12), draft_slowdown=0.04) for i, (m, p) in enumerate(plans.items())]

    prof, rep = calibrate(runs("", {"started_at": "2026-12-03T12:00:00Z", "interleave": 12}),
                          probe=write_probe(tmp_path / "p.json"))
    lat = prof.latency
    assert lat.verify_slowdown_rows == pytest.approx(0.12, abs=0.01)
    assert lat.draft_slowdown == pytest.approx(0.04, abs=0.005)
    assert lat.verify_slowdown_one_row == 0.3  # no one-row steps in the rounds: the loops' value
    assert rep.latency["interference"]["from"] == "traces"
    line = prof.provenance["latency.interference"]
    assert line.startswith("measured on 150 SSD rounds") and "(the probe's loops: verify +30.0%" in line
    assert prof.provenance["latency.draft_slowdown"].startswith("measured on 150 SSD rounds: glue and branch decode")
    # the same runs timed one after another: a drift between them would read as interference, so the loops serve
    lat = calibrate(runs("seq-", None), probe=write_probe(tmp_path / "q.json"))[0].latency
    assert (lat.verify_slowdown_one_row, lat.verify_slowdown_rows, lat.draft_slowdown) == (0.3, 0.1, 0.05)


def test_the_planner_plans_with_the_probed_table(traces):
    paths, d = traces
    flat = calibrate(paths, probe=write_probe(d / "flat.json"))[0]
    cheap4 = calibrate(paths, probe=write_probe(d / "cheap.json", bump={(1, 5): 0.5}))[0]
    assert predict_ar(flat, 1).round_ms == pytest.approx(float(TARGET(1, 1)) + flat.latency.round_overhead_ms)
    assert predict_sd(cheap4, 1, 4, 0.0).verify_ms == pytest.approx(0.5 * float(TARGET(1, 5))
                                                                    + cheap4.latency.round_overhead_ms)
    k_flat = make_plan(flat, PlanRequest()).sd.num_speculative_tokens
    k_cheap = make_plan(cheap4, PlanRequest()).sd.num_speculative_tokens
    assert k_flat != 4 and k_cheap == 4  # a verify of 5 tokens at half price makes K = 4 SD's best


def test_a_probe_of_other_models_or_another_host_is_refused(traces, tmp_path):
    paths, _ = traces
    other = probe_dict()
    other["models"]["draft"]["source"] = "another-draft"
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(ConfigError, match="probe.models"):
        calibrate(paths, probe=load_probe(tmp_path / "other.json"))


def test_a_probed_profile_is_on_the_probes_guest(tmp_path):
    there = Host(cpu="AMD EPYC", cpu_id="AuthenticAMD family 25 model 17 stepping 1", cores=2, boot_id="runs-guest",
                 booted_at="2026-12-03T07:40Z")
    plans = [Plan(mode="ar"), Plan(mode="sd", num_speculative_tokens=3)]
    paths = [write_trace(tmp_path / f"g{i}.jsonl", p, rounds=120, seed=i, header={"host": there.to_dict()})
             for i, p in enumerate(plans)]
    here = replace(there, boot_id="probe-guest", booted_at="2026-12-05T21:23Z")
    prof = calibrate(paths, probe=write_probe(tmp_path / "p.json", host=here.to_dict()))[0]
    assert prof.host == here  # the latencies are the probe's: timed on its guest, not the runs'
    assert calibrate(paths)[0].host == there
    assert calibrate(paths, probe=write_probe(tmp_path / "q.json"))[0].host == replace(there, boot_id="", booted_at="")


def idle_section(target_extra: float, draft_extra: float, gaps=(5.0, 500.0)) -> dict:
    """A probe's after_idle: two shapes per role; after each sleep every shape takes `extra` ms more on average."""
    def rows(shapes, extra):
        return [["append", 1, t, 100.0 + extra, [99.0 + extra, 101.0 + extra]] for t in shapes]

    return {role: {"back_to_back": rows(shapes, 0.0), "after_sleep": [[g, rows(shapes, extra)] for g in gaps]}
            for role, shapes, extra in (("target", (2, 4), target_extra), ("draft", (1, 2), draft_extra))}


@pytest.mark.parametrize("change,field", [
    ({"schema": "ssd-probe/0"}, "probe.schema"),
    ({"target": [["append", 1, 1, 3.0, [3.0]]]}, "probe.target"),
    ({"draft": [["scan", 1, 1, 3.0, [3.0]]] * 3}, "probe.draft[0]"),
    ({"interference": {"one_row": -1, "rows": 0, "draft": 0}}, "probe.interference.one_row"),
    ({"interference": {"one_row": 0.1, "rows": 10.5, "draft": 0}}, "probe.interference.rows"),
    ({"transfer": [[1, 4, "fast", []]]}, "probe.transfer[0]"),
    ({"after_idle": {"target": {}}}, "probe.after_idle"),
    ({"after_idle": {**idle_section(1, 1), "draft": {"back_to_back": [], "after_sleep": [[5.0, []]]}}},
     "probe.after_idle.draft.back_to_back"),
    ({"after_idle": idle_section(1, 1, gaps=(500.0, 5.0))}, "probe.after_idle.target.after_sleep"),
    ({"after_idle": idle_section(1, 1, gaps=(0.0, 5.0))}, "probe.after_idle.target.after_sleep"),
    ({"after_idle": {**idle_section(1, 1), "target": {"back_to_back": idle_section(1, 1)["draft"]["back_to_back"],
                                                      "after_sleep": idle_section(1, 1)["target"]["after_sleep"]}}},
     "probe.after_idle.target.after_sleep"),  # other shapes after the sleeps than back to back
    ({"started_at": "yesterday"}, "probe.started_at"),
    ({"wall_s": -3}, "probe.wall_s"),
])
def test_a_malformed_probe_file_is_one_line_naming_the_field(tmp_path, change, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**probe_dict(), **change}))
    with pytest.raises(ConfigError) as e:
        load_probe(path)
    assert e.value.field == field and "\n" not in str(e.value)


def test_a_probe_with_a_start_time_sets_when_the_profiles_latencies_were_timed(traces, tmp_path):
    paths, d = traces
    timed = calibrate(paths, probe=write_probe(tmp_path / "t.json", started_at="2026-12-03T19:00:00Z", wall_s=360.0))[0]
    assert timed.uncertainty.timed_at == ("2026-12-03T19:00:00Z", "2026-12-03T19:06:00Z")
    assert timed.uncertainty.sources["timed_at"] == "measured: the probe ran 2026-12-03T19:00:00Z .. 2026-12-03T19:06:00Z"
    # an older probe: the runs' times stand for it (these synthetic runs record none: unknown, a run counts as later)
    old = calibrate(paths, probe=write_probe(tmp_path / "o.json"))[0]
    assert old.uncertainty.timed_at == () and "records no start time" in old.uncertainty.sources["timed_at"]


def test_tree_steps_are_pooled_with_one_token_appends_of_as_many_rows(tmp_path):
    probe = write_probe(tmp_path / "p.json")
    assert (8, 1) in probe.draft and (32, 1) in probe.draft and probe.draft[(2, 1)] == pytest.approx(float(DRAFT(2, 1)))


def test_the_plan_report_names_the_forwards_outside_the_probed_table(traces):
    from ssd_sim.plan.report import build_report

    paths, d = traces
    prof = calibrate(paths, probe=write_probe(d / "range.json"))[0]
    inside = build_report(prof, make_plan(prof, PlanRequest()))["latency_tables"]
    assert inside["target"] == "rows 1..4 x tokens 1..9" and inside["outside"] == [] and inside["warning"] is None
    big = build_report(prof, make_plan(prof, PlanRequest(batch_size=8)))["latency_tables"]
    assert "AR step (8 rows x 1 tokens)" in big["outside"] and "probe these shapes" in big["warning"]


def test_a_probe_of_a_busy_host_loads_up_to_the_slowdown_the_probe_writes(tmp_path):
    from ssd_sim.io.probe import MAX_SLOWDOWN

    # measured under load on 2 cores (tiny models, the suite running beside it): the verify 4.3x slower
    probe = write_probe(tmp_path / "busy.json", interference={"one_row": 3.27, "rows": 0.1, "draft": 0.05})
    assert probe.one_row == pytest.approx(3.27) and MAX_SLOWDOWN == 10.0


def test_sd_verifies_above_the_table_where_ar_sits_on_it_are_a_warning(traces):
    paths, d = traces
    _, rep = calibrate(paths, probe=write_probe(d / "flat.json"))
    assert rep.latency["probe"]["sd_vs_ar"] == pytest.approx(1.0, abs=0.03)
    assert not any("idle wait" in w for w in rep.warnings)
    # the table's 4-token forward (SD K = 3's verify) 10% below what the runs paid, the 1-token one where they ran
    _, rep = calibrate(paths, probe=write_probe(d / "idle.json", bump={(1, 4): 1 / 1.1}))
    assert rep.latency["probe"]["sd_vs_ar"] == pytest.approx(1.1, abs=0.03)
    assert any("SD's verifies ran 10% further above the probe table than AR's" in w for w in rep.warnings)


def test_the_after_idle_forwards_load_as_extra_ms_per_sleep(tmp_path):
    probe = write_probe(tmp_path / "idle.json", after_idle=idle_section(40.0, 20.0))
    assert probe.after_idle == {"target": ((5.0, 40.0), (500.0, 40.0)), "draft": ((5.0, 20.0), (500.0, 20.0))}
    assert write_probe(tmp_path / "old.json").after_idle == {}  # probes before it: none


def test_the_probes_wakes_price_sd_and_say_where_they_come_from(traces):
    paths, d = traces
    prof, rep = calibrate(paths, probe=write_probe(d / "wakes.json", after_idle=idle_section(40.0, 20.0)))
    lat = prof.latency
    assert lat.target_after_idle == ((5.0, 40.0), (500.0, 40.0)) and lat.draft_after_idle[1] == (500.0, 20.0)
    assert "+40 ms after 500 ms" in prof.provenance["latency.after_idle"]
    plain, _ = calibrate(paths, probe=write_probe(d / "nowakes.json"))
    assert "not measured" in plain.provenance["latency.after_idle"]
    # SD K = 3 at b = 1: the verify +40 ms, the first draft step +20 ms (both slept longer than 500 ms)
    sd, sd0 = predict_sd(prof, 1, 3), predict_sd(plain, 1, 3)
    assert sd.verify_ms - sd0.verify_ms == pytest.approx(40.0) and sd.draft_ms - sd0.draft_ms == pytest.approx(20.0)
    assert predict_ar(prof, 1).round_ms == predict_ar(plain, 1).round_ms  # AR never sleeps


def test_sd_verifies_the_probes_wakes_explain_are_no_warning(traces):
    paths, d = traces
    table_ms = float(TARGET(1, 4)) / 1.1  # SD K = 3's verify in the table 10% below what the runs paid
    probe = write_probe(d / "explained.json", bump={(1, 4): 1 / 1.1},
                        after_idle=idle_section(0.1 * table_ms, 0.0, gaps=(1.0, 5000.0)))
    _, rep = calibrate(paths, probe=probe)
    assert rep.latency["probe"]["sd_vs_ar"] == pytest.approx(1.1, abs=0.03)
    assert rep.latency["probe"]["sd_wake_priced"] == pytest.approx(1.1, abs=1e-6)
    assert not any("idle wait" in w for w in rep.warnings)


def test_the_traces_fit_warnings_give_way_to_the_probes_tables(traces):
    paths, d = traces
    _, plain = calibrate(paths)  # AR + SD K = 3: two verify sizes, no SSD trace
    fit_lines = [w for w in plain.warnings if w.startswith(("target latency:", "draft latency beyond"))]
    assert len(fit_lines) == 2
    _, probed = calibrate(paths, probe=write_probe(d / "flat.json"))
    assert not any(w in probed.warnings for w in fit_lines)  # the probe's tables replace those fits
    assert not any("latency" in w for w in probed.warnings)  # a smooth table pins its own curve


def test_a_table_its_curve_cannot_follow_is_a_warning_about_shapes_outside_it(traces):
    paths, d = traces
    steep = lambda r, t: float(TARGET(r, 1)) * (r * t) ** 2.5  # noqa: E731  (steeper than the curve's bound, 1.5)
    _, rep = calibrate(paths, probe=write_probe(d / "steep.json", target=steep))
    assert ("target latency outside the probed shapes (rows 1..4 x tokens 1..9): the curve fitted to the probe's "
            "table has token_exponent = 1.5 at a bound") in " ".join(rep.warnings)
    assert not any(w.startswith("draft latency") for w in rep.warnings)


def scaled_verifies(src, dst, factor: float):
    """A copy of trace `src` whose every verify took `factor` times as long (another host load, or setup)."""
    out = []
    for line in src.read_text().splitlines():
        rec = json.loads(line)
        if rec.get("type") == "round":
            rec["timings_ms"]["verify"] *= factor
        out.append(json.dumps(rec))
    dst.write_text("\n".join(out) + "\n")
    return dst


def test_ssd_verifies_that_fit_no_ar_sd_fit_refuse_a_calibration_but_warn_beside_a_probe(traces):
    paths, d = traces
    ssd = write_trace(d / "ssd.jsonl", Plan(mode="ssd", num_speculative_tokens=2, fan_out=(1, 1, 2), batch_size=1),
                      rounds=120, seed=5)
    # the AR / SD runs 4x slower than the SSD run (a busy host then): no slowdown >= 0 brings the fit down to it
    busy = scaled_verifies(ssd, d / "ssd-busy.jsonl", 0.25)
    with pytest.raises(ConfigError, match="are all traces from one setup and host"):
        calibrate([*paths, busy])
    # the probe's tables and slowdowns replace the traces' fits: the calibration stands, and says what it saw
    prof, rep = calibrate([*paths, busy], probe=write_probe(d / "flat.json"))
    assert (prof.latency.verify_slowdown_one_row, prof.latency.verify_slowdown_rows) == (0.3, 0.1)
    assert any("off what the AR / SD traces' target fit" in w and "are the probe's" in w for w in rep.warnings)
    _, quiet = calibrate([*paths, ssd], probe=write_probe(d / "flat.json"))
    assert not any("off what the AR / SD traces' target fit" in w for w in quiet.warnings)


def test_a_probe_made_hours_after_the_runs_says_when_each_was_timed(traces, tmp_path):
    # the user's remedy for drift: old runs for acceptance, a fresh probe for latency (traces/cpu-fp32-xeon-fresh96-fourth)
    root = Path(__file__).resolve().parents[2] / "traces"
    runs = [read_trace(root / "cpu-fp32-xeon-fresh96" / f) for f in ("xf96-ar-t0.jsonl", "xf96-sd-k2-t0.jsonl")]
    probe = load_probe(root / "cpu-fp32-xeon-fresh96-fourth" / "probe.json")
    prof, rep = calibrate_traces(runs, [str(t.path) for t in runs], probe=probe)
    assert rep.latency["probe"]["timed"] == (
        "the traces' runs started 2026-12-05T12:52:32Z .. 2026-12-05T12:53:20Z, the probe 2026-12-05T17:42:49Z (4.8 h "
        "after the traces' last run): the latencies are the probe's, acceptance and hit rates the traces', and "
        "intervals count their horizon from the probe")
    assert prof.uncertainty.timed_at[0] == "2026-12-05T17:42:49Z"
    # runs that record no start (these synthetic ones) leave it unsaid
    paths, _ = traces
    assert calibrate(paths, probe=write_probe(tmp_path / "t.json", started_at="2026-12-03T19:00:00Z"))[1].latency[
        "probe"]["timed"] == ""
