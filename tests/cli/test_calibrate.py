"""`ssd-plan calibrate`: writes a profile the planner can use; a bad trace exits 2 with one line and no file."""

import json
from pathlib import Path

import pytest

from ssd_sim.cli.calibrate import main
from ssd_sim.cli.plan import main as plan_main
from ssd_sim.model.profile import load_profile_file
from ssd_sim.plan.plan import Plan
from tests.helpers.synthetic_traces import write_trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    plans = [Plan(mode="ar", batch_size=1), Plan(mode="sd", num_speculative_tokens=3, batch_size=1),
             Plan(mode="sd", num_speculative_tokens=2, batch_size=2),
             Plan(num_speculative_tokens=2, fan_out=(2, 1, 3), batch_size=1, backup="jit")]
    return [write_trace(d / f"t{i}.jsonl", p, rounds=300, seed=i) for i, p in enumerate(plans)]


def test_cli_writes_a_profile_usable_by_the_planner(traces, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert main([*map(str, traces), "-o", str(out), "--name", "synthetic"]) == 0
    assert "latency fits" in capsys.readouterr().out
    prof = load_profile_file(out)
    assert prof.name == "synthetic"
    assert "calibration" in json.loads(out.read_text())
    assert plan_main(["--profile", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["predicted"]["ssd_tok_s"] > 0


@pytest.mark.parametrize("kind", ["not json", "binary", "folder"])
def test_cli_bad_trace_exits_2_and_writes_nothing(tmp_path, capsys, kind):
    bad = tmp_path / "bad.jsonl"
    if kind == "folder":
        bad.mkdir()
    elif kind == "binary":
        bad.write_bytes(bytes(range(128, 256)))
    else:
        bad.write_text("not json\n")
    out = tmp_path / "p.json"
    with pytest.raises(SystemExit) as e:
        main([str(bad), "-o", str(out)])
    assert e.value.code == 2 and not out.exists()
    assert capsys.readouterr().err.count("\n") == 1


def one_line_exit(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


def test_an_unwritable_output_fails_before_any_fitting(traces, tmp_path, capsys, monkeypatch):
    import ssd_sim.cli.calibrate as cli

    def no_fit(*a, **k):
        raise AssertionError("fitted before checking -o")

    monkeypatch.setattr(cli, "calibrate_traces", no_fit)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    err = one_line_exit(capsys, [*map(str, traces), "-o", str(blocker / "profile.json")])
    assert err.startswith("ssd-plan calibrate: error: output:") and "a-file" in err
    err = one_line_exit(capsys, [*map(str, traces), "-o", str(tmp_path)])
    assert err == f"ssd-plan calibrate: error: output: {tmp_path} is a folder; give a file name"


def test_output_onto_a_symlink_writes_through_it(traces, tmp_path, capsys):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "profile.json"
    link.symlink_to(target)
    assert main([*map(str, traces), "-o", str(link), "--json"]) == 0
    assert link.is_symlink() and "calibration" in json.loads(target.read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json", "real.json"]


def rewrite(src, dst, edit) -> str:
    lines = [json.loads(x) for x in src.read_text().splitlines()]
    edit(lines)
    dst.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return str(dst)


@pytest.mark.parametrize("edit, message", [
    (lambda L: L[3]["seqs"][0].update(accepted=9), "accepted: {f} line 4: seqs[0].accepted = 9 must be an integer "
                                                   "in 0..K = 0..2 (draft tokens accepted)"),
    (lambda L: L[5]["timings_ms"].update(verify=-1.0), "timings_ms.verify: {f} line 6: timings_ms.verify = -1.0 "
                                                       "must be 0 (did not run) or a number of ms in 1e-06..3.6e+06"),
    (lambda L: L[5]["timings_ms"].update(verify=1e999), "timings_ms.verify: {f} line 6: timings_ms.verify = inf"),
    (lambda L: L[2]["timings_ms"].update(draft_glue="fast"), "timings_ms.draft_glue: {f} line 3: "
                                                             "timings_ms.draft_glue = 'fast'"),
    (lambda L: L[0].update(mode="turbo"), "mode: {f} header: mode = 'turbo', expected one of ar, sd, ssd"),
    (lambda L: L[0].update(models={"target": "other", "draft": "x"}), "models: {f} has target 'other' but"),
    (lambda L: L[2]["seqs"][0].pop("committed"), "committed: missing in {f} line 3 seqs[0]"),
    (lambda L: L.__delitem__(slice(0, None)), "trace: {f} has no header line"),
])
def test_an_impossible_trace_is_refused_naming_file_line_field_and_value(traces, tmp_path, capsys, edit, message):
    bad = rewrite(traces[3], tmp_path / "bad.jsonl", edit)
    out = tmp_path / "p.json"
    err = one_line_exit(capsys, [*map(str, traces[:3]), bad, "-o", str(out)])
    assert err.startswith("ssd-plan calibrate: error: " + message.format(f=bad)) and not out.exists()


def test_the_same_trace_twice_or_a_link_to_it_is_counted_once_with_a_warning(traces, tmp_path, capsys):
    import os

    sd = traces[1]
    os.symlink(sd, tmp_path / "link.jsonl")
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert main([str(sd), "-o", str(one), "--json"]) == 0
    assert capsys.readouterr().err == ""
    assert main([str(sd), str(sd), str(tmp_path / "link.jsonl"), "-o", str(two), "--json"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"ssd-plan calibrate: warning: trace {sd} is given twice: counted once (a second copy would double its "
        "samples and narrow the intervals)",
        f"ssd-plan calibrate: warning: trace {tmp_path / 'link.jsonl'} has the same records as {sd}: counted once (a "
        "second copy would double its samples and narrow the intervals)"]
    a, b = (json.loads(p.read_text()) for p in (one, two))
    assert b["sources"] == [str(sd)] and b.pop("calibration")["duplicates"] and a.pop("calibration")
    assert a == b


def test_the_report_names_the_rounds_the_latency_fit_left_out(traces, tmp_path, capsys):
    from tests.helpers.synthetic_traces import stalled_trace

    stalled_trace(tmp_path / "warm.jsonl", 20.0, warmup=True)
    assert main([str(tmp_path / "warm.jsonl"), str(traces[0]), "-o", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "latency timed on 339 of 340 rounds: 0 stalled and 1 CUDA graph warm-up rounds left out" in out
    assert main([str(traces[1]), str(traces[0]), "-o", str(tmp_path / "q.json")]) == 0
    assert "latency timed on" not in capsys.readouterr().out


POOL40 = sorted((Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-pool40").glob("*.jsonl"))


def tagged_copy(src: Path, dst: Path, tags: list[str]) -> str:
    """The trace with its header's request_tags set, as ssd-run writes them for tagged prompts."""
    lines = src.read_text().splitlines()
    head = json.loads(lines[0])
    dst.write_text("\n".join([json.dumps({**head, "request_tags": tags}), *lines[1:]]) + "\n")
    return str(dst)


def test_a_mix_weighs_the_traces_request_classes_and_a_bad_mix_writes_nothing(tmp_path, capsys):
    tags = ["code"] * 24 + ["chat"] * 24
    paths = [tagged_copy(p, tmp_path / p.name, tags) for p in POOL40]
    out = tmp_path / "code.json"
    assert main([*paths, "-o", str(out), "--mix", "code=1"]) == 0
    assert "workload mix: weighted" in capsys.readouterr().out
    prof = load_profile_file(out)
    assert "code 100% of requests" in prof.provenance["acceptance.mix"]
    assert prof.acceptance.at(0.0).expected_tokens(2) == pytest.approx(2.665, abs=0.005)  # code alone (test_mix)
    bad = tmp_path / "bad.json"
    for mix, says in (("code=0.6;chat=0.4", "mix: code='0.6;chat=0.4': a share must be a finite number >= 0; write e.g."),
                      ("math=1", "mix: class 'math' has no request in the runs at T = 0")):
        assert one_line_exit(capsys, [*paths, "-o", str(bad), "--mix", mix]).startswith(f"ssd-plan calibrate: error: {says}")
        assert not bad.exists()
    untagged = one_line_exit(capsys, [*map(str, POOL40), "-o", str(bad), "--mix", "code=1"])
    assert "the traces record no request_tags" in untagged and not bad.exists()
    # older traces get their classes by sequence range; the same profile as from tagged headers
    ranged = tmp_path / "ranged.json"
    assert main([*map(str, POOL40), "-o", str(ranged), "--tags", "code=0-23,chat=24-47", "--mix", "code=1"]) == 0
    assert load_profile_file(ranged).acceptance.at(0.0).acceptance == prof.acceptance.at(0.0).acceptance
    assert one_line_exit(capsys, [*paths, "-o", str(bad), "--tags", "code=0-x"]).startswith(
        "ssd-plan calibrate: error: tags: 'code=0-x' is not CLASS=FIRST-LAST")
