"""`ssd-plan holdout`: a user's own traces, checked on random halves of their requests (ssd_sim.sim.holdout)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ssd_sim.cli.plan import main

HALVES = Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-halves"
RUNS = [str(HALVES / f) for f in ("cal-ar-t0.jsonl", "cal-sd-k2-t0.jsonl", "cal-ssd-k2-f112-t0.jsonl")]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_holdout_prints_each_runs_errors_the_floor_and_the_interval_coverage(capsys):
    code, out, err = run(capsys, "holdout", *RUNS, "--draws", "2")
    assert code == 0 and err == ""
    assert "2 random halves of 12 requests" in out
    for name, mode in (("cal-ar-t0.jsonl", "ar"), ("cal-sd-k2-t0.jsonl", "sd K=2"), ("cal-ssd-k2-f112-t0.jsonl", "ssd K=2")):
        row = next(line for line in out.splitlines() if name[:12] in line)
        assert mode in row and row.count(" of 2") == 1
    assert "inside their 90% intervals:" in out and "of 6" in out  # 3 runs x 2 draws
    assert "halves of 6 requests" in out  # fewer than 24 per half: the floor note
    assert "not the host's drift" in out


def test_holdout_json_and_the_report_file_agree(capsys, tmp_path):
    report = tmp_path / "holdout.json"
    code, out, _ = run(capsys, "holdout", *RUNS, "--draws", "1", "--seed", "3", "--json", "-o", str(report))
    assert code == 0
    summary = json.loads(out)  # stdout is the JSON alone
    whole = json.loads(report.read_text())
    assert "runs" not in summary and len(whole["runs"]) == whole["predicted"] == 3
    assert summary["seed"] == whole["seed"] == 3 and summary["median_abs_err_pct"] == whole["median_abs_err_pct"]
    assert set(summary["per_run"]) == {Path(r).name for r in RUNS}  # file names, where unique
    assert summary["worst_abs_err_pct"] == pytest.approx(max(abs(r["tok_s_err_pct"]) for r in whole["runs"]))


def test_holdout_refuses_in_one_line_and_writes_nothing(capsys, tmp_path):
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(["holdout", RUNS[1], str(HALVES / "pred-sd-k3-t0.jsonl"), "-o", str(out)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "traces:" in err and "share 0 prompts" in err
    assert not out.exists()
