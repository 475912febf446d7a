"""bench/gpu_check.py: its CPU fallback end to end (every section, scaled shapes, --quick: ~25 s here), bad flags
(exit 2, one line naming the flag), an interrupted run (the table of what was measured, exit 143), and the pure
helpers (GPU name -> datasheet bandwidth, the table from partial rows, the section time limit)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.bench import BENCH, load_bench

GC = load_bench("gpu_check")


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_cpu_fallback_measures_every_section_and_passes_exactness(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert GC.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    rows = read_rows(out)
    header = rows[0]
    assert header["section"] == "header" and header["device"] == "cpu" and header["bandwidth_bytes_s"] > 0
    k = header["k"]
    assert not [r for r in rows if r.get("status") in ("FAIL", "skipped")], rows

    exact = [r for r in rows if r["section"] == "exact"]
    assert {r["case"].split(",")[0] for r in exact} >= {"greedy AR == SD == SSD", "verify rule at T = 1: chi-square on cpu"}
    assert all(r["status"] == "ok" for r in exact)
    chi2 = next(r for r in exact if "p_value" in r)
    assert chi2["p_value"] > GC.ALPHA > chi2["p_value_broken"]  # the test passes the rule and catches a wrong q

    forward = [r for r in rows if r["section"] == "forward"]
    assert {(r["model"], r["b"], r["w"]) for r in forward} == {(m, b, w) for m in GC.MODELS for b in (1, 8)
                                                               for w in (1, k + 1)}
    assert all(r["ms"] > 0 and r["roofline_ms"] > 0 and r["weight_bytes"] > 0 for r in forward)

    overhead = [r for r in rows if r["section"] == "overhead"]
    assert {(r["mode"], r["b"]) for r in overhead} == {(m, b) for m in ("ar", "sd", "ssd") for b in (1, 8)}
    for r in overhead:
        assert r["round_ms"] > 0 and r["forward_ms"] > 0 and r["rounds"] >= 2
        assert r["overhead_ms"] == pytest.approx(r["round_ms"] - r["forward_ms"], abs=r["round_ms"])
    assert all(isinstance(r["syncs_per_round"], (int, float)) for r in overhead)

    toks = [r for r in rows if r["section"] == "toks"]
    configs = {(r["mode"], r["b"], r["acceptance"]) for r in toks}
    assert configs == {("ar", 1, None), ("ar", 8, None)} | {(m, b, a) for m in ("sd", "ssd") for b in (1, 8)
                                                            for a in (0.7, 1.0)}
    assert all(r["tok_s"] > 0 and r["status"] == "ok" for r in toks)
    assert len(toks) == len(configs) * header["repeats"]  # interleaved repeats, each its own row
    first = [r for r in rows if r["section"] == "toks-warmup"]
    assert {(r["mode"], r["b"], r["acceptance"]) for r in first} == configs and len(first) == len(configs)
    assert all(r["rounds"] > 0 and r["warmup_rounds"] == 0 for r in first + toks)  # eager on a CPU: nothing to mark

    table = capsys.readouterr().out
    for text in ("forward", "overhead", "toks", "identical", "tok/s", "roofline", "every check that ran passed"):
        assert text in table, text
    assert "graph warm-up rounds, off" in table


def test_the_warmup_line_counts_marked_and_stalled_rounds_and_fails_when_a_timed_round_still_warms_a_graph():
    def row(section: str, marked: int, stalled: int = 0) -> dict:
        return {"section": section, "mode": "sd", "b": 1, "acceptance": 0.7, "compile": "cuda-graphs", "tok_s": 9.0,
                "rounds": 40, "warmup_rounds": marked, "stalled_rounds": stalled}

    first = [row("toks-warmup", 3, 1), row("toks-warmup", 2)]
    (line,) = GC.warmup_lines(first + [row("toks", 0), row("toks", 0)])
    assert line == ("toks", "graph warm-up rounds, cuda-graphs", "first pass: 5 of 80 rounds marked warm-up, 1 stalled; "
                    "timed runs: 0 of 80 marked, 0 stalled", "timed runs: 0 marked", "ok")
    assert GC.warmup_lines(first + [row("toks", 1)])[0][-1] == "FAIL"


@pytest.mark.parametrize("argv, flag", [
    (["--max-seconds", "-1"], "--max-seconds"),
    (["--max-seconds", "soon"], "--max-seconds"),
    (["--sections", "forward,warp"], "--sections"),
    (["--models", "gpt-5"], "--models"),
    (["--compile", "fast"], "--compile"),
    (["--compile", "cuda-graphs,fast"], "--compile"),
    (["--compile", ","], "--compile"),
    (["-k", "0"], "--k"),
    (["--repeats", "0"], "--repeats"),
    (["--device", "tpu"], "--device"),
])
def test_a_bad_flag_exits_2_with_one_line_naming_it(argv, flag, capsys, tmp_path):
    assert GC.main([*argv, "--out", str(tmp_path / "x.jsonl")]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.count("\n") == 1 and flag in cap.err and cap.err.startswith("gpu_check: error:")


def test_a_bad_flag_from_the_command_line_exits_2_before_any_work(tmp_path):
    p = subprocess.run([sys.executable, str(BENCH / "gpu_check.py"), "--max-seconds", "0", "--out",
                        str(tmp_path / "x.jsonl")], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == "" and p.stderr.count("\n") == 1 and "--max-seconds" in p.stderr


def test_cuda_on_a_host_without_it_is_bad_input(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    assert GC.main(["--device", "cuda", "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda" in err and "--device cpu" in err


def test_an_interrupted_run_prints_what_was_measured_and_exits_nonzero(tmp_path, capsys, monkeypatch):
    def stopped(*_):
        raise GC.Stopped(signal.SIGTERM)

    monkeypatch.setattr(GC, "section_forward", stopped)
    out = tmp_path / "rows.jsonl"
    assert GC.main(["--device", "cpu", "--quick", "--sections", "exact,forward,toks", "--out", str(out)]) == 143
    rows = read_rows(out)
    assert [r["section"] for r in rows] == ["header", "exact", "exact"]  # written as measured; toks never ran
    table = capsys.readouterr().out
    assert "identical" in table and "interrupted (SIGTERM)" in table


def test_a_section_out_of_time_is_cut_with_a_skipped_row(tmp_path, capsys, monkeypatch):
    def slow(ctx, *_):
        ctx.emit({"section": "forward", "model": "qwen2.5-1.5b", "compile": "off", "b": 1, "w": 1, "rep": 0,
                  "ms": 2.0, "weight_bytes": 10**9, "roofline_ms": 1.0, "status": "ok"})
        time.sleep(30)

    monkeypatch.setattr(GC, "section_forward", slow)
    out = tmp_path / "rows.jsonl"
    t0 = time.monotonic()
    assert GC.main(["--device", "cpu", "--sections", "forward", "--max-seconds", "5", "--out", str(out)]) == 0
    assert time.monotonic() - t0 < 15
    rows = read_rows(out)
    assert rows[-1]["status"] == "skipped" and rows[-1]["case"] == "time budget"
    table = capsys.readouterr().out
    assert "eager 2.000 ms" in table and "x2.0" in table and "skipped" in table


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA A100-SXM4-80GB", "a100-80g"), ("NVIDIA L40S", "l40s"), ("NVIDIA B200", "b200"),
    ("AMD Instinct MI300X", "mi300x"), ("Tesla T4", None),
])
def test_the_gpu_name_picks_its_datasheet_bandwidth(name, key):
    from ssd_sim.model.hardware import GPUS

    spec = GC.match_gpu(name, GPUS)
    assert (spec.name if spec else None) == key


def test_the_real_shapes_are_the_public_configs_and_the_cpu_ones_keep_their_heads():
    assert GC.MODELS["qwen2.5-1.5b"] == {"family": "qwen2", "hidden": 1536, "layers": 28, "heads": 12, "kv_heads": 2,
                                         "intermediate": 8960, "vocab": 151936}
    assert GC.MODELS["llama-3.2-1b"]["kv_heads"] == 8 and GC.MODELS["qwen2.5-0.5b"]["hidden"] == 896
    small = GC.scaled(GC.MODELS["qwen2.5-1.5b"])
    assert (small["hidden"], small["layers"], small["heads"], small["kv_heads"]) == (192, 4, 12, 2)


def test_the_table_compares_compiled_forwards_and_speedups_from_partial_rows():
    rows = [{"section": "header", "compile": "reduce-overhead"}]
    for c, ms in (("off", 4.0), ("off", 6.0), ("reduce-overhead", 1.5)):
        rows.append({"section": "forward", "model": "m", "compile": c, "b": 1, "w": 1, "ms": ms,
                     "weight_bytes": 3 * 10**9, "roofline_ms": 1.0, "status": "ok"})
    for mode, acc, tok_s in (("ar", None, 100.0), ("sd", 0.7, 150.0), ("ssd", 0.7, 300.0)):
        rows.append({"section": "toks", "mode": mode, "b": 1, "acceptance": acc, "compile": "off", "tok_s": tok_s,
                     "accept_len": 2.0, "status": "ok"})
    lines = {(r[0], r[1]): r for r in GC.table_rows(rows)}
    fwd = lines[("forward", "m b=1, 1 tok")]
    assert fwd[2] == "eager 5.000 ms, reduce-overhead 1.500 ms" and fwd[3] == "roofline 1.000 ms (3.00 GB), best x1.5"
    assert lines[("toks", "ssd b=1 acc=0.7, off")][3] == "x3.00 AR, x2.00 SD"


def test_several_compiled_modes_are_measured_in_the_order_given_and_tabled_side_by_side():
    args = GC.parse(["--compile", "cuda-graphs, inductor-graphs,cuda-graphs"])
    assert args.compile == ("cuda-graphs", "inductor-graphs")
    kw = dict(dtype="bfloat16", compiles=args.compile, k=4, context=8, new_tokens=8, repeats=1, inner=1,
              models=("m",), out=Path("unused"))
    assert GC.Ctx(device="cuda:0", **kw).compile_modes == ["cuda-graphs", "inductor-graphs", "off"]
    assert GC.Ctx(device="cpu", **kw).compile_modes == ["off", "cuda-graphs", "inductor-graphs"]
    assert GC.Ctx(device="cpu", **kw).compile == "cuda-graphs,inductor-graphs"
    rows = [{"section": "header", "compile": "cuda-graphs,inductor-graphs"}]
    for c, ms in (("cuda-graphs", 4.0), ("inductor-graphs", 1.2), ("off", 30.0), ("inductor-graphs", 1.4)):
        rows.append({"section": "forward", "model": "m", "compile": c, "b": 1, "w": 1, "ms": ms,
                     "weight_bytes": 3 * 10**9, "roofline_ms": 1.0, "status": "ok"})
    rows.append({"section": "forward-ready", "model": "m", "compile": "inductor-graphs", "load_s": 2.04,
                 "warmup_s": 61.26})
    lines = {(r[0], r[1]): r for r in GC.table_rows(rows)}
    fwd = lines[("forward", "m b=1, 1 tok")]
    assert fwd[2] == "eager 30.000 ms, cuda-graphs 4.000 ms, inductor-graphs 1.300 ms"
    assert fwd[3] == "roofline 1.000 ms (3.00 GB), best x1.3"
    assert lines[("forward", "m inductor-graphs: ready")][2] == "loaded in 2.0 s, warm-up (compiles, captures) 61.3 s"


def test_the_sections_asked_for_share_all_of_the_time_budget():
    assert GC.section_ends(GC.SECTIONS) == pytest.approx(GC.SECTION_END)
    assert GC.section_ends(("forward",)) == {"forward": pytest.approx(1.0)}
    assert GC.section_ends(("exact", "forward")) == pytest.approx({"exact": 0.2, "forward": 1.0})
    assert GC.section_ends(("overhead", "toks")) == pytest.approx({"overhead": 0.2 / 0.7, "toks": 1.0})
