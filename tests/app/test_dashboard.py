"""The Streamlit dashboard driven headless with streamlit.testing (AppTest): every page, default and
changed widget values, and the numbers it shows against ssd_sim's for the same inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
from streamlit.testing.v1 import AppTest  # noqa: E402

from ssd_sim.io.trace import read_trace  # noqa: E402
from ssd_sim.model.presets import get_preset, list_presets  # noqa: E402
from ssd_sim.plan import compare, whatif  # noqa: E402
from ssd_sim.plan.planner import PlanRequest, make_plan  # noqa: E402
from tests.helpers.profiles import calibrated_profile_file  # noqa: E402
from tests.helpers.trace_samples import write_trace  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[2] / "app" / "dashboard.py"
PAGES = ["views/whatif.py", "views/timeline.py", "views/pareto.py", "views/traces.py", "views/plan.py"]
LLAMA = "llama70b-1b-h100"


@pytest.fixture
def traces(tmp_path, monkeypatch) -> Path:
    """A traces directory with one SSD and one SD trace and one calibrated-looking profile file."""
    write_trace(tmp_path / "ssd-run.jsonl", "ssd", rounds=30)
    write_trace(tmp_path / "sub" / "sd-run.jsonl", "sd", rounds=20)
    (tmp_path / "mine.json").write_text(get_preset("qwen32b-0.6b-h100").to_json())
    (tmp_path / "not-a-profile.json").write_text("{}")
    monkeypatch.setenv("SSD_TRACES_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def at(traces) -> AppTest:
    return AppTest.from_file(str(DASHBOARD), default_timeout=60).run()


def ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def shown(res) -> dict[str, str]:
    """The What-if metrics the page should show for a PlanResult."""
    return {"autoregressive": f"{res.ar.per_seq_tok_s:.1f} tok/s",
            f"SD (best K = {res.sd.num_speculative_tokens})": f"{res.sd.per_seq_tok_s:.1f} tok/s",
            "SSD (this plan)": f"{res.ssd.per_seq_tok_s:.1f} tok/s", "p_hit": f"{res.ssd.p_hit:.3f}"}


def test_every_page_renders(at):
    ok(at)
    for page in PAGES:
        at.switch_page(page).run()
        ok(at)
    assert at.title[0].value == "Plan"


@pytest.mark.parametrize("preset", sorted(set(list_presets()) - {LLAMA}))
def test_every_preset_renders_every_page_at_t1(at, preset):
    at.selectbox(key="profile_choice").set_value(preset).run()
    at.slider(key="wi_T").set_value(1.0).run()
    ok(at)
    for page in PAGES[1:]:
        at.switch_page(page).run()
        ok(at)


def test_whatif_defaults_are_the_optimised_plan(at):
    res = make_plan(get_preset(LLAMA))
    m = metrics(at)
    for label, value in shown(res).items():
        assert m[label] == value
    assert m["b*"] == f"{res.b_star:g}"
    assert len(at.get("plotly_chart")) == 5


def test_whatif_changed_knobs_and_overrides(at):
    for key, value in (("wi_T", 1.0), ("wi_b", 4), ("wi_K", 4), ("wi_B", 16), ("wi_C", 0.5),
                       ("wi_acceptance", 0.7), ("wi_draft_latency_ratio", 0.2)):
        at.slider(key=key).set_value(value).run()
        ok(at)
    at.radio(key="wi_backup").set_value("fast").run()
    at.radio(key="wi_hm_base").set_value("sd").run()
    ok(at)
    assert at.session_state["wi_overridden"] == ["acceptance", "draft_latency_ratio"]
    prof = whatif.with_overrides(get_preset(LLAMA), 1.0, acceptance=0.7, draft_latency_ratio=0.2)
    plan = whatif.build_plan(prof, 4, 16, 1.0, 0.5, "fast", 4)
    res = whatif.evaluate(prof, plan)
    m = metrics(at)
    for label, value in shown(res).items():
        assert m[label] == value
    # Knobs survive a visit to another page.
    at.switch_page("views/plan.py").run()
    at.switch_page("views/whatif.py").run()
    assert at.slider(key="wi_K").value == 4 and metrics(at)["SSD (this plan)"] == m["SSD (this plan)"]
    at.toggle(key="wi_uniform").set_value(True).run()
    ok(at)
    uni = whatif.evaluate(prof, whatif.build_plan(prof, 4, 16, 1.0, 0.5, "fast", 4, uniform=True))
    assert metrics(at)["SSD (this plan)"] == f"{uni.ssd.per_seq_tok_s:.1f} tok/s"


def test_reset_overrides_and_optimise(at):
    at.slider(key="wi_acceptance").set_value(0.6).run()
    at.slider(key="wi_K").set_value(2).run()
    at.button(key="btn_reset").click().run()
    ok(at)
    base = get_preset(LLAMA)
    assert at.session_state["wi_overridden"] == []
    assert at.slider(key="wi_acceptance").value == pytest.approx(whatif.profile_values(base, 0.0)["acceptance"],
                                                                  abs=1e-4)
    at.slider(key="wi_b").set_value(8).run()
    at.button(key="btn_optimise").click().run()
    ok(at)
    res = make_plan(base, PlanRequest(batch_size=8))
    assert at.slider(key="wi_K").value == res.plan.K
    assert metrics(at)["SSD (this plan)"] == f"{res.ssd.per_seq_tok_s:.1f} tok/s"


def test_other_preset_and_calibrated_file(at):
    at.selectbox(key="profile_choice").set_value("qwen32b-0.6b-h100").run()
    ok(at)
    res = make_plan(get_preset("qwen32b-0.6b-h100"))
    assert metrics(at)["SSD (this plan)"] == f"{res.ssd.per_seq_tok_s:.1f} tok/s"
    options = at.selectbox(key="profile_choice").options
    assert "mine.json (calibrated)" in options and not any("not-a-profile" in o for o in options)
    at.selectbox(key="profile_choice").set_value("mine.json (calibrated)").run()
    ok(at)
    assert metrics(at)["SSD (this plan)"] == f"{res.ssd.per_seq_tok_s:.1f} tok/s"


@pytest.mark.parametrize("content,needle", [(b"", "is empty"), (b"{not json", "not valid JSON"),
                                            (b'{"schema": "ssd-profile/1"}', "name: p.json: missing")])
def test_bad_profile_upload_is_one_line_error(at, content, needle):
    at.sidebar.file_uploader[0].set_value(("p.json", content, "application/json")).run()
    assert not at.exception
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and needle in errors[0] and "\n" not in errors[0]
    assert metrics(at)["autoregressive"] == "54.7 tok/s"  # falls back to the selected preset


def test_good_profile_upload(at):
    data = get_preset("qwen32b-0.6b-h100").to_json().encode()
    at.sidebar.file_uploader[0].set_value(("qwen.json", data, "application/json")).run()
    ok(at)
    res = make_plan(get_preset("qwen32b-0.6b-h100"))
    assert metrics(at)["autoregressive"] == f"{res.ar.per_seq_tok_s:.1f} tok/s"


def test_a_calibrated_profile_offers_intervals_for_a_run_within_the_hour(at, tmp_path):
    assert not [r for r in at.radio if r.key == "horizon"]  # a preset measured no session spread: no choice
    data = calibrated_profile_file(tmp_path).read_bytes()
    at.sidebar.file_uploader[0].set_value(("mine.json", data, "application/json")).run()
    ok(at)
    assert at.radio(key="horizon").value == "later"
    assert any("more than an hour after the profile's timed forwards" in c.value for c in at.caption)
    at.radio(key="horizon").set_value("session").run()
    ok(at)
    assert any("within the hour of the profile's timed forwards (timed 2026-12-01T14:50:14Z" in c.value
               for c in at.caption)


def test_simulate_button(at):
    pytest.importorskip("ssd_sim.sim.des")
    from app import sim

    at.button(key="btn_simulate").click().run()
    ok(at)
    table = at.dataframe[0].value
    prof = get_preset(LLAMA)
    res = make_plan(prof)
    want = sim.run(prof, res.plan, "ssd").metrics.per_seq_tok_s
    assert table["simulated tok/s per seq"].iloc[2] == pytest.approx(want, abs=0.006)


def test_timeline_page(at):
    pytest.importorskip("ssd_sim.sim.des")
    from app import sim

    at.switch_page("views/timeline.py").run()
    ok(at)
    plan = make_plan(get_preset(LLAMA)).plan
    res = sim.run(get_preset(LLAMA), plan, "ssd", tokens=(plan.K + 1) * 30 + 1, timeline=True)
    assert metrics(at)["simulated tok/s per seq"] == f"{res.metrics.per_seq_tok_s:.1f}"
    chart = json.loads(at.get("plotly_chart")[0].proto.spec)
    names = {t.get("name") for t in chart["data"]}
    assert {"verify", "glue", "branch"} <= names
    at.radio(key="tl_mode").set_value("sd").run()
    at.slider(key="tl_rounds").set_value(10).run()
    ok(at)


def test_pareto_page(at):
    at.switch_page("views/pareto.py").run()
    ok(at)
    data = whatif.pareto(get_preset(LLAMA), (1, 2, 4, 8, 16, 32, 64), 0.0)
    table = at.dataframe[0].value
    ssd = table[table["mode"] == "SSD"]
    assert list(ssd["tok/s per seq"]) == [round(v, 2) for v in data["ssd"]["per_seq_tok_s"]]
    at.multiselect(key="pa_batches").set_value([1, 4]).run()
    at.radio(key="pa_x").set_value("total_tok_s").run()
    ok(at)
    assert len(at.dataframe[0].value) == 6


def test_traces_page(at, traces):
    at.switch_page("views/traces.py").run()
    ok(at)
    assert at.selectbox(key="tr_file").options == ["ssd-run.jsonl", "sub/sd-run.jsonl"]
    assert at.selectbox(key="tr_file").value == "ssd-run.jsonl"  # opens with a trace: the first SSD one
    pvm = compare.predicted_vs_measured(get_preset(LLAMA), read_trace(traces / "ssd-run.jsonl"))
    table = at.dataframe[0].value
    assert list(table["metric"]) == [r[0] for r in pvm["rows"]]
    assert list(table["measured"]) == pytest.approx([r[2] for r in pvm["rows"]])
    assert list(table["predicted"]) == pytest.approx([r[1] for r in pvm["rows"]])
    assert any(h.value == "per stopping position" for h in at.subheader)
    assert any("no logged distributions" in c.value for c in at.caption)  # the synthetic trace logged none
    at.slider(key="tr_window").set_value(5).run()
    at.selectbox(key="tr_file").set_value("sub/sd-run.jsonl").run()
    ok(at)
    assert at.dataframe[0].value["metric"].tolist() == ["tok/s (all sequences)", "mean acceptance length (tokens)"]


def test_traces_page_simulates_the_run(at, traces):
    pytest.importorskip("ssd_sim.sim.des")
    from app import sim

    at.switch_page("views/traces.py").run()
    at.selectbox(key="tr_file").set_value("ssd-run.jsonl").run()
    at.checkbox(key="tr_sim").check().run()
    ok(at)
    trace = read_trace(traces / "ssd-run.jsonl")
    plan = compare.trace_plan(trace)
    tokens = sum(s.committed for r in trace.rounds for s in r.seqs) // plan.batch_size
    m = sim.run(get_preset(LLAMA), plan, "ssd", tokens).metrics
    table = at.dataframe[0].value
    assert list(table["simulated"]) == pytest.approx([m.total_tok_s, m.mean_accept_len, m.hit_rate])


@pytest.mark.parametrize("content,needle", [
    (b"", "is empty"), (b"\xff\xfe", "not UTF-8"), (b"hello\n", "line 1 is not valid JSON"),
    (b'{"type": "round", "round": 0}\n', "round before the header"),
    (b'{"type": "header", "schema": "ssd-trace/0", "mode": "ssd", "plan": {}, "batch_size": 1}\n', "unsupported")])
def test_bad_trace_upload_is_one_line_error(at, content, needle):
    at.switch_page("views/traces.py").run()
    at.file_uploader(key="tr_upload").set_value(("bad.jsonl", content, "application/jsonl")).run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and needle in errors[0] and "\n" not in errors[0]


def test_trace_upload_without_rounds_warns(at, traces):
    at.switch_page("views/traces.py").run()
    header = (traces / "ssd-run.jsonl").read_text().splitlines()[0]
    at.file_uploader(key="tr_upload").set_value(("h.jsonl", header.encode(), "application/jsonl")).run()
    ok(at)
    assert any("no rounds" in w.value for w in at.warning)


def test_plan_page_matches_ssd_plan(at, tmp_path):
    from app.planfile import plan_file_text, report
    from ssd_sim.cli.plan import main as ssd_plan

    at.switch_page("views/plan.py").run()
    ok(at)
    prof = get_preset(LLAMA)
    rep = report(prof, make_plan(prof), f"preset:{LLAMA}", LLAMA, {})  # the knobs are make_plan's: its search
    assert [c.value for c in at.code] == [rep["engine_flags"][e]["command"] for e in ("ssd-engine", "vllm", "sglang")]
    assert json.loads(at.json[0].value) == json.loads(json.dumps(rep))
    assert [b.label for b in at.get("download_button")] == ["download plan.json", "download engine flags"]
    # The downloaded plan file is what `ssd-plan --preset NAME -o out.json` writes.
    assert ssd_plan(["--preset", LLAMA, "-o", str(tmp_path / "o.json")]) == 0
    assert (tmp_path / "o.json").read_text() == plan_file_text(rep)
    # Knobs moved on the What-if page: the plan as given, what `ssd-plan --preset NAME --plan plan.json` writes.
    at.switch_page("views/whatif.py").run()
    at.slider(key="wi_B").set_value(40).run()
    at.switch_page("views/plan.py").run()
    ok(at)
    plan = whatif.build_plan(prof, rep["plan"]["num_speculative_tokens"], 40, 0.0, 1.0, "adaptive", 1)
    rep = report(prof, whatif.evaluate(prof, plan), f"preset:{LLAMA}", LLAMA, {})
    assert json.loads(at.json[0].value) == json.loads(json.dumps(rep))
    (tmp_path / "plan.json").write_text(plan_file_text(rep))
    assert ssd_plan(["--preset", LLAMA, "--plan", str(tmp_path / "plan.json"), "-o", str(tmp_path / "o.json")]) == 0
    assert (tmp_path / "o.json").read_text() == plan_file_text(rep)


def test_pages_without_the_simulator(at, monkeypatch):
    from app import sim

    monkeypatch.setattr(sim, "_import", lambda: (None, "No module named 'ssd_sim.sim.des'"))
    at.run()
    ok(at)
    assert any("simulator not available" in i.value for i in at.info)
    assert "btn_simulate" not in [b.key for b in at.button]
    at.switch_page("views/timeline.py").run()
    ok(at)
    assert any("not available" in i.value for i in at.info)


def test_a_profile_from_another_or_an_unrecorded_host_shows_one_warning(at):
    assert not at.sidebar.warning  # the default (GPU, datasheet) preset is not host-specific
    at.selectbox(key="profile_choice").set_value("qwen-coder-1.5b-0.5b-cpu").run()
    ok(at)
    (warning,) = at.sidebar.warning
    assert "qwen-coder-1.5b-0.5b-cpu was measured on an unrecorded host" in warning.value
    assert "ssd-run calibrate-here" in warning.value


def test_a_profile_calibrated_from_traces_without_a_host_record_warns_as_ssd_plan_does():
    from app import state
    from ssd_sim.model.profile import load_profile_file
    from ssd_sim.plan.report import host_report

    prof = load_profile_file(Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-grid" / "profile.json")
    warning = state.profile_host_warning(prof)
    assert warning == host_report(prof)["warning"] and "unrecorded host (x86_64 Linux, 2 cpus" in warning


def test_uploads_over_the_cap_get_one_line_and_nothing_is_written(at, traces):
    from app.launch import MAX_UPLOAD_MB

    before = sorted(p.relative_to(traces) for p in traces.rglob("*"))
    big = b'{"type": "header"}\n' + b" " * (MAX_UPLOAD_MB * 2**20)
    at.switch_page("views/traces.py").run()
    at.file_uploader(key="tr_upload").set_value(("huge.jsonl", big, "application/jsonl")).run()
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and f"over the {MAX_UPLOAD_MB} MB upload cap" in errors[0] and "\n" not in errors[0]
    at.sidebar.file_uploader[0].set_value(("huge.json", big, "application/json")).run()
    assert any(f"over the {MAX_UPLOAD_MB} MB upload cap" in e.value for e in at.sidebar.error)
    small = (traces / "ssd-run.jsonl").read_bytes()  # a real trace under the cap is parsed in memory
    at.file_uploader(key="tr_upload").set_value(("t.jsonl", small, "application/jsonl")).run()
    assert not at.exception
    assert sorted(p.relative_to(traces) for p in traces.rglob("*")) == before  # no upload lands next to the traces


# --- a trace beside the profile of its own setup --------------------------------------------------------------

REAL = Path(__file__).resolve().parents[2] / "traces"
GRID = "cpu-fp32-grid"
GRID_SSD, GRID_AR = "ssd-k2-f112-b1-t1.jsonl", "ar-b1-t0.jsonl"


@pytest.fixture
def cpu_traces(tmp_path, monkeypatch) -> Path:
    """A traces directory holding one real CPU setup: two of its traces and the calibrated profile shipped with them."""
    setup = tmp_path / GRID
    setup.mkdir()
    for name in (GRID_SSD, GRID_AR, "profile.json"):
        (setup / name).write_bytes((REAL / GRID / name).read_bytes())
    monkeypatch.setenv("SSD_TRACES_DIR", str(tmp_path))
    return tmp_path


def open_trace(at: AppTest, name: str) -> AppTest:
    at.switch_page("views/traces.py").run()
    at.selectbox(key="tr_file").set_value(name).run()
    ok(at)
    return at


def phase_subplots(at: AppTest) -> list[str]:
    """Titles of the phase-timing chart's subplots."""
    (chart,) = [c for c in at.get("plotly_chart") if "phase timings" in c.proto.spec]
    return [a["text"] for a in json.loads(chart.proto.spec)["layout"].get("annotations", [])]


def test_a_cpu_trace_opens_against_the_cpu_profile_beside_it(cpu_traces):
    from ssd_sim.model.profile import load_profile_file

    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{GRID}/{GRID_SSD}")
    assert at.radio(key="tr_profile").value == "own"
    assert any(c.value == "compared with profile **qwen-coder-cpu-calibrated** (shipped beside the trace: "
               f"{GRID}/profile.json)" for c in at.caption)
    assert not at.main.warning  # the models and devices are the trace's own
    assert at.subheader[0].value == "predicted (qwen-coder-cpu-calibrated) vs measured"
    profile = load_profile_file(cpu_traces / GRID / "profile.json")
    pvm = compare.predicted_vs_measured(profile, read_trace(cpu_traces / GRID / GRID_SSD))
    table = at.dataframe[0].value
    assert list(table["predicted"]) == pytest.approx([r[1] for r in pvm["rows"]])
    assert list(table["measured"]) == pytest.approx([r[2] for r in pvm["rows"]])
    tok_s = table.set_index("metric").loc["tok/s (all sequences)"]
    assert 0.5 < tok_s["measured"] / tok_s["predicted"] < 2.0  # 3.6 measured vs 4.0 predicted: the same setup
    assert 3.0 < tok_s["measured"] < 4.5
    assert phase_subplots(at) == ["target device", "draft device"]


def test_a_mismatched_profile_gets_one_warning_line(cpu_traces):
    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{GRID}/{GRID_SSD}")
    at.radio(key="tr_profile").set_value("sidebar").run()  # the sidebar's default: llama70b-1b-h100 on H100s
    ok(at)
    (warning,) = at.main.warning
    assert "\n" not in warning.value
    assert warning.value.startswith("profile llama70b-1b-h100 is for Llama-3.1-70B-Instruct + Llama-3.2-1B-Instruct "
                                    "on GPU, but this trace ran qwen-coder-1.5b + qwen-coder-0.5b on CPU")
    assert any("compared with profile **llama70b-1b-h100** (the sidebar's profile)" in c.value for c in at.caption)
    llama = compare.predicted_vs_measured(get_preset(LLAMA), read_trace(cpu_traces / GRID / GRID_SSD))
    assert list(at.dataframe[0].value["predicted"]) == pytest.approx([r[1] for r in llama["rows"]])
    # A sidebar profile of the same setup is compared without a warning (the sidebar's own host note aside).
    at.selectbox(key="profile_choice").set_value("qwen-coder-1.5b-0.5b-cpu").run()
    at.radio(key="tr_profile").set_value("sidebar").run()
    ok(at)
    assert at.caption[0].value.startswith("compared with profile **qwen-coder-1.5b-0.5b-cpu**")
    assert not at.main.warning


def test_an_ar_trace_has_no_draft_device_subplot(cpu_traces):
    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{GRID}/{GRID_AR}")
    assert phase_subplots(at) == ["target device"]
    assert at.dataframe[0].value["metric"].tolist() == ["tok/s (all sequences)", "mean acceptance length (tokens)"]
    assert at.button(key="btn_tr_calibrate").disabled  # no draft timings to fit


def test_a_profile_calibrated_from_the_trace_on_request(cpu_traces):
    from ssd_sim.model.calibrate import calibrate

    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{GRID}/{GRID_SSD}")
    at.button(key="btn_tr_calibrate").click().run()
    ok(at)
    assert at.radio(key="tr_profile").value == "calibrated"
    name = "calibrated-from-" + GRID_SSD.removesuffix(".jsonl")
    assert any(c.value == f"compared with profile **{name}** (calibrated from this trace)" for c in at.caption)
    fitted, _ = calibrate([str(cpu_traces / GRID / GRID_SSD)], name=name)
    want = compare.predicted_vs_measured(fitted, read_trace(cpu_traces / GRID / GRID_SSD))
    assert list(at.dataframe[0].value["predicted"]) == pytest.approx([r[1] for r in want["rows"]])
    assert not at.main.warning
    # An upload has no folder: a preset of its models is its own setup, and it is calibrated in memory.
    before = sorted(p.relative_to(cpu_traces) for p in cpu_traces.rglob("*"))
    data = (cpu_traces / GRID / GRID_SSD).read_bytes()
    at.file_uploader(key="tr_upload").set_value(("mine.jsonl", data, "application/jsonl")).run()
    ok(at)
    assert at.caption[0].value == ("compared with profile **qwen-coder-1.5b-0.5b-cpu** (a preset for the same models "
                                   "on the same kind of device: preset qwen-coder-1.5b-0.5b-cpu)")
    at.button(key="btn_tr_calibrate").click().run()
    ok(at)
    assert at.caption[0].value == "compared with profile **calibrated-from-mine** (calibrated from this trace)"
    assert list(at.dataframe[0].value["predicted"]) == pytest.approx([r[1] for r in want["rows"]])
    assert sorted(p.relative_to(cpu_traces) for p in cpu_traces.rglob("*")) == before


def test_a_pair_on_a_gpu_from_specs(at):
    from ssd_sim.model.spec_profile import profile_from_specs

    at.toggle(key="spec_on").set_value(True).run()
    at.selectbox(key="spec_target").set_value("Llama-3.1-8B")
    at.selectbox(key="spec_gpu").set_value("l40s")
    at.number_input(key="spec_tp").set_value(1).run()
    ok(at)
    res = make_plan(profile_from_specs("Llama-3.1-8B", "Llama-3.2-1B", "l40s", tp=1, context=1024))
    assert metrics(at)["SSD (this plan)"] == f"{res.ssd.per_seq_tok_s:.1f} tok/s"
    assert metrics(at)["autoregressive"] == f"{res.ar.per_seq_tok_s:.1f} tok/s"
    at.selectbox(key="spec_target").set_value("Llama-3.1-70B").run()  # 141 GB of weights on one 48 GB card
    errors = [e.value for e in at.sidebar.error]
    assert len(errors) == 1 and errors[0].startswith("tp: Llama-3.1-70B needs 141 GB") and "\n" not in errors[0]
    assert metrics(at)["autoregressive"] == "54.7 tok/s"  # falls back to the selected preset


def test_a_gpu_uploaded_as_its_numbers_plans_as_the_same_gpu_by_name(at):
    """Uploading the H100 SXM's datasheet numbers gives the predictions of choosing h100-sxm; a bad file is one
    line naming the field, and the sidebar falls back to the selected preset."""
    at.toggle(key="spec_on").set_value(True).run()
    at.selectbox(key="spec_target").set_value("Llama-3.1-8B")
    at.number_input(key="spec_tp").set_value(1).run()
    ok(at)
    by_name = metrics(at)
    numbers = {"name": "my-h100", "hbm_tb_s": 3.35, "bf16_tflops": 989, "fp8_tflops": 1979, "link_gb_s": 450,
               "memory_gb": 80}
    at.sidebar.file_uploader(key="spec_gpu_file").set_value(("my-h100.json", json.dumps(numbers).encode(),
                                                              "application/json")).run()
    ok(at)
    assert metrics(at) == by_name
    assert any(c.value.startswith("Llama-3.1-8B+Llama-3.2-1B on 1xmy-h100: KV caches of up to") for c in at.sidebar.caption)
    bad = json.dumps({**numbers, "memory_gb": -1}).encode()
    at.sidebar.file_uploader(key="spec_gpu_file").set_value(("bad.json", bad, "application/json")).run()
    errors = [e.value for e in at.sidebar.error]
    assert errors == ["gpu: bad.json: memory_gb must be a positive number (units in ssd_sim/model/hardware.py)"]
    assert metrics(at)["autoregressive"] == "54.7 tok/s"  # falls back to the selected preset


def test_a_spec_pairs_plan_file_from_the_plan_page_reloads_in_ssd_plan(at, tmp_path, capsys):
    """The downloaded plan file records the pair (an uploaded GPU as its numbers), so `ssd-plan --plan` re-plans
    the same pair and predicts what the page reported; the page's command line gives the same too."""
    from app.planfile import plan_file_text
    from ssd_sim.cli.plan import main as ssd_plan

    at.toggle(key="spec_on").set_value(True).run()
    at.selectbox(key="spec_target").set_value("Llama-3.1-8B")
    at.selectbox(key="spec_gpu").set_value("l40s")
    at.number_input(key="spec_tp").set_value(1).run()
    numbers = {"name": "my-l40s", "hbm_tb_s": 0.864, "bf16_tflops": 362.05, "fp8_tflops": 733, "link_gb_s": 32,
               "memory_gb": 48}
    for upload in (None, numbers):
        if upload:
            at.sidebar.file_uploader(key="spec_gpu_file").set_value(("my-l40s.json", json.dumps(upload).encode(),
                                                                      "application/json")).run()
        at.switch_page("views/plan.py").run()
        ok(at)
        rep = json.loads(at.json[0].value)
        assert rep["profile"]["spec"] == {"target": "Llama-3.1-8B", "draft": "Llama-3.2-1B", "gpu": upload or "l40s",
                                          "tp": 1, "context": 1024}
        path = tmp_path / "plan.json"
        path.write_text(plan_file_text(rep))
        assert ssd_plan(["--plan", str(path), "--json"]) == 0
        cli = json.loads(capsys.readouterr().out)
        assert cli["predicted"] == rep["predicted"] and cli["plan"] == rep["plan"]
        at.switch_page("views/whatif.py").run()


def test_the_plan_page_warns_when_the_batch_does_not_fit_the_pairs_memory(at):
    """70B on 4 x H100 at 128k tokens holds 3 sequences' KV caches (ssd-plan's memory warning): b = 8 is planned,
    with the warning on the Plan page and in its report; b = 2 carries none."""
    at.toggle(key="spec_on").set_value(True).run()
    at.number_input(key="spec_ctx").set_value(131072).run()
    assert any("up to 3 (AR), 3 (SD), 3 (SSD, before its branch rows) sequences fit" in c.value for c in at.sidebar.caption)
    at.switch_page("views/whatif.py").run()
    for b, warned in ((8, True), (2, False)):
        at.slider(key="wi_b").set_value(b).run()
        at.switch_page("views/plan.py").run()
        ok(at)
        rep = json.loads(at.json[0].value)["memory"]
        assert rep["max_batch_size"] == 3 and rep["over"] == ([8] if warned else [])
        assert [w.value for w in at.warning if "does not fit" in w.value] == ([rep["warning"]] if warned else [])
        at.switch_page("views/whatif.py").run()


def test_pareto_page_capacity_search_stars_what_ssd_plan_capacity_chooses(at):
    from ssd_sim.sim.capacity import Capacity, Load, Targets, search
    from ssd_sim.sim.workload import poisson

    at.switch_page("views/pareto.py").run()
    for key, value in (("ca_rate", 30.0), ("ca_requests", 200), ("ca_tokens", 48), ("ca_ttft", 150.0),
                       ("ca_tpot", 7.0), ("ca_pct", 90.0)):
        at.number_input(key=key).set_value(value)
    at.button(key="ca_search").click().run()
    ok(at)
    load = Load.of(poisson(rate=30.0, num_requests=200, max_batch=1, output_tokens=48), seed=0)
    best = search(Capacity(get_preset(LLAMA), load, Targets(150.0, 7.0))).best
    want = f"cheapest: {best.config.mode.upper()} {best.config.replicas} x b<={best.config.max_batch}"
    assert at.success[0].value.startswith(want) and f"on {best.gpus} GPUs" in at.success[0].value
    assert "ch_capacity" in [c.key for c in at.get("plotly_chart")]


# --- what a new user reads (issue 30): one number per fact, readable labels, every URL opens ------------------------

def charts_by_key(at: AppTest) -> dict[str, dict]:
    return {c.key: json.loads(c.proto.spec) for c in at.get("plotly_chart")}


def test_the_boxed_heatmap_cell_is_the_headline_speedup(at):
    res = make_plan(get_preset(LLAMA))
    want = f"{res.ssd.per_seq_tok_s / res.ar.per_seq_tok_s:.2f}"  # 283.7 / 54.7 tok/s, the metrics above
    heat = charts_by_key(at)["ch_heat"]
    (box,) = heat["layout"]["shapes"]
    i, j = round((box["y0"] + box["y1"]) / 2), round((box["x0"] + box["x1"]) / 2)
    cell = heat["data"][0]["text"][i][j]
    assert cell == want and heat["data"][0]["y"][i].startswith("profile")
    (caption,) = [c.value for c in at.caption if c.value.startswith("Boxed")]
    assert f"**{want}x** AR" in caption
    at.radio(key="wi_hm_base").set_value("sd").run()
    heat = charts_by_key(at)["ch_heat"]
    (caption,) = [c.value for c in at.caption if c.value.startswith("Boxed")]
    assert f"**{heat['data'][0]['text'][i][j]}x** SD" in caption


def test_the_budget_chart_marks_the_fit_the_caption_states(at):
    at.selectbox(key="profile_choice").set_value("llama70b-1b-h200").run()
    at.slider(key="wi_T").set_value(1.0).run()
    at.button(key="btn_optimise").click().run()  # budget 128 (the cap); 151 fit inside one verify
    ok(at)
    fit = make_plan(get_preset("llama70b-1b-h200"), PlanRequest(temperature=1.0)).budget_fit
    assert fit > 128
    assert any(f"the draft finishes up to {fit} inside one verify" in c.value for c in at.caption)
    budget = charts_by_key(at)["ch_budget"]["layout"]
    assert f"fits in one verify: {fit}" in [a["text"] for a in budget["annotations"]]
    assert budget["xaxis"]["range"][1] >= fit


def test_log_axes_are_labelled_in_full(at):
    cross = charts_by_key(at)["ch_backup"]["layout"]["xaxis"]
    assert cross["ticktext"] == ["1", "2", "4", "8", "16", "32", "64"]
    at.switch_page("views/pareto.py").run()
    pareto = charts_by_key(at)["ch_pareto"]["layout"]["xaxis"]
    assert pareto["tickmode"] == "array" and all(t.replace(",", "").isdigit() for t in pareto["ticktext"])
    assert [float(t.replace(",", "")) for t in pareto["ticktext"]] == pareto["tickvals"]


def test_every_chart_has_axis_titles_and_a_toolbar_only_under_the_pointer(at, traces):
    seen = {}
    for page in PAGES:
        at.switch_page(page).run()
        ok(at)
        for c in at.get("plotly_chart"):
            seen[c.key] = json.loads(c.proto.spec)["layout"]
            assert json.loads(c.proto.config)["displayModeBar"] == "hover", c.key
    assert {"ch_tok", "ch_fanout", "ch_budget", "ch_backup", "ch_heat", "ch_gantt", "ch_pareto", "ch_tr_acc",
            "ch_tr_hit", "ch_tr_phase", "ch_tr_pvm", "ch_tr_pos_acc", "ch_tr_pos_hit"} <= set(seen)
    for key, lay in seen.items():
        def titles(axis: str, lay=lay) -> list[str]:
            return [v.get("title", {}).get("text") for k, v in lay.items() if k.startswith(axis)]

        assert any(titles("xaxis")), key
        assert key == "ch_gantt" or all(titles("yaxis")), key  # the Gantt's rows are named devices
        if key in HALF_WIDTH:  # the title ends left of the toolbar (shown at once where there is no hover)
            assert len(lay["title"]["text"]) <= 34, (key, lay["title"]["text"])


HALF_WIDTH = {"ch_tok", "ch_fanout", "ch_budget", "ch_backup", "ch_heat", "ch_tr_acc", "ch_tr_hit", "ch_tr_pvm",
              "ch_tr_pos_acc", "ch_tr_pos_hit"}
def test_timeline_colours_each_event_kind_apart_with_a_legend(at):
    pytest.importorskip("ssd_sim.sim.des")
    at.switch_page("views/timeline.py").run()
    ok(at)
    gantt = charts_by_key(at)["ch_gantt"]
    bars = {t["name"]: t["marker"]["color"] for t in gantt["data"] if t["type"] == "bar"}
    assert {"request", "reply", "verify", "backup"} <= set(bars)
    assert len(set(bars.values())) == len(bars)
    assert gantt["layout"]["legend"]["title"]["text"] == "event"


def test_traces_page_opens_with_a_trace_and_its_tables_show_no_none(at, traces):
    at.switch_page("views/traces.py").run()
    ok(at)
    assert at.subheader[0].value.startswith("predicted (") and len(at.get("plotly_chart")) >= 4
    table = at.dataframe[0].value
    assert list(table.columns) == ["metric", "predicted", "measured", "measured / predicted"]  # simulated: once run
    cells = [str(v) for v in table.to_numpy().ravel()]
    assert not any(v in ("None", "nan", "NaN") for v in cells)


def test_traces_page_without_traces_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("SSD_TRACES_DIR", str(tmp_path))
    at = AppTest.from_file(str(DASHBOARD), default_timeout=60).run()
    at.switch_page("views/traces.py").run()
    ok(at)
    (info,) = at.info
    assert info.value.startswith("no traces in traces/ yet") and "\n" not in info.value


def test_every_page_has_its_own_url_and_the_root_opens_what_if(at):
    from tests.helpers.bench import load_bench

    assert at.title[0].value == "What-if"  # the app's root URL
    registered = {info["url_pathname"]: info for info in at._registered_pages.values()}  # what the server matches
    for path, title, _ in load_bench("dashboard_screenshots").PAGES:  # /whatif, /timeline, ...
        assert registered[path]["page_name"] == title
    assert "" in registered  # the root


def test_plan_page_reports_the_search_when_the_knobs_are_make_plans(at, tmp_path, capsys):
    from ssd_sim.cli.plan import main as ssd_plan

    at.switch_page("views/plan.py").run()
    ok(at)
    rep = json.loads(at.json[0].value)
    assert "fixed by the user" not in rep["binding"] and rep["b_star_curve"] is not None
    assert ssd_plan(["--preset", LLAMA, "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert rep == cli  # `ssd-plan --preset NAME --json`, field for field
    assert any("make_plan's plan" in c.value for c in at.caption)
    at.switch_page("views/whatif.py").run()
    at.slider(key="wi_K").set_value(3).run()
    at.switch_page("views/plan.py").run()
    ok(at)
    rep = json.loads(at.json[0].value)
    assert "fixed by the user" in rep["binding"]  # they were: on the What-if page
    assert any("differ from make_plan's plan" in c.value for c in at.caption)


def test_workload_lengths_take_a_gpu_presets_kv_reads_at_the_mean_decode_context(at):
    from ssd_sim.cli.growth import growth

    at.selectbox(key="profile_choice").set_value(LLAMA).run()
    at.toggle(key="len_on").set_value(True).run()
    at.number_input(key="len_prompt").set_value(4000)
    at.number_input(key="len_output").set_value(512).run()
    ok(at)
    res = make_plan(get_preset(LLAMA, context=4256))  # as ssd-plan --prompt-tokens 4000 --tokens 512 plans at
    assert metrics(at)["autoregressive"] == f"{res.ar.per_seq_tok_s:.1f} tok/s"
    assert any("4256 cached tokens" in c.value for c in at.sidebar.caption)
    line = next(c.value for c in at.main.caption if c.value.startswith("over a context growing from 4000 to 4512"))
    g = growth({"preset": LLAMA}, 4000, 512, 1, at.session_state["_scenario"].plan, modes=("ssd",))["ssd"]
    assert f"({g['tok_s']:.2f} tok/s per sequence)" in line
    at.button(key="btn_simulate").click().run()  # requests of 4000 + 512 tokens, each round at its batch's context
    ok(at)
    from app import sim

    plan, prof = at.session_state["_scenario"].plan, get_preset(LLAMA, context=4256)
    want = sim.run(prof, plan, "ssd", lengths=({"preset": LLAMA}, 4000, 512)).metrics.per_seq_tok_s
    assert at.dataframe[0].value["simulated tok/s per seq"].iloc[2] == pytest.approx(want, abs=0.006)
    assert want == pytest.approx(g["tok_s"], rel=0.03)
    at.switch_page("views/plan.py").run()  # the ssd-plan command names the context the lengths set
    ok(at)
    assert any("--preset llama70b-1b-h100 --context 4256" in c.value for c in at.main.caption)
    at.switch_page("views/whatif.py").run()
    at.selectbox(key="profile_choice").set_value("qwen-coder-1.5b-0.5b-cpu").run()  # measured: nothing to move
    ok(at)
    assert any("change nothing" in c.value for c in at.sidebar.caption)
    assert not any(c.value.startswith("over a context growing") for c in at.main.caption)
    at.selectbox(key="profile_choice").set_value("mine.json (calibrated)").run()  # a file: no lengths section at all
    ok(at)
    assert not any(c.value.startswith("over a context growing") for c in at.main.caption)


POOL40I, POOL_SSD = "cpu-fp32-pool40i", "pool40i-ssd-k2-f112-t0.jsonl"


@pytest.fixture
def pool_trace(tmp_path, monkeypatch) -> Path:
    """A traces directory holding one real SSD run whose requests carry classes (24 code, 24 chat)."""
    (tmp_path / POOL40I).mkdir()
    (tmp_path / POOL40I / POOL_SSD).write_bytes((REAL / POOL40I / POOL_SSD).read_bytes())
    monkeypatch.setenv("SSD_TRACES_DIR", str(tmp_path))
    return tmp_path / POOL40I / POOL_SSD


def test_a_trace_with_request_classes_is_calibrated_for_the_mix_typed_beside_it(pool_trace):
    from ssd_sim.model.calibrate import calibrate_traces
    from ssd_sim.model.mix import RequestMix

    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{POOL40I}/{POOL_SSD}")
    box = at.text_input(key="tr_mix")
    assert "code 24, chat 24" in box.help and box.placeholder == "code=0.5,chat=0.5"
    box.set_value("code=1").run()
    at.button(key="btn_tr_calibrate").click().run()
    ok(at)
    assert at.radio(key="tr_profile").value == "calibrated"
    assert any(c.value.startswith("workload mix: weighted") and "code 100%" in c.value for c in at.caption)
    trace = read_trace(pool_trace)
    want, _ = calibrate_traces([trace], [str(pool_trace)], name="x", mix=RequestMix.parse("code=1"))
    rows = compare.predicted_vs_measured(want, trace)["rows"]
    assert list(at.dataframe[0].value["predicted"]) == pytest.approx([r[1] for r in rows])
    assert [w.value for w in at.main.warning if "weigh 0" in w.value or "leaves out" in w.value]  # chat left out
    # code only accepts more than the run's own mix: the predicted acceptance moves up from the unweighted one
    plain, _ = calibrate_traces([trace], [str(pool_trace)], name="x")
    assert want.acceptance.at(0.0).acceptance[0] > plain.acceptance.at(0.0).acceptance[0]
    # a class the trace never ran, or a malformed mix: one line, no profile
    for bad in ("poem=1", "code=lots"):
        at.text_input(key="tr_mix").set_value(bad).run()
        at.button(key="btn_tr_calibrate").click().run()
        assert not at.exception
        (err,) = at.error
        assert err.value.startswith("cannot calibrate from this trace: mix") and "\n" not in err.value
        assert at.radio(key="tr_profile").value != "calibrated" and not at.main.warning  # no stale profile or note


def test_a_trace_without_request_classes_has_no_mix_input(cpu_traces):
    at = open_trace(AppTest.from_file(str(DASHBOARD), default_timeout=60).run(), f"{GRID}/{GRID_SSD}")
    assert not [t for t in at.text_input if t.key == "tr_mix"]
