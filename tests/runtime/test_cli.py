"""`ssd-run`: one-line errors with exit status 2, plan file + flag overrides, trace / output files."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
import torch

from ssd_runtime.cli import main
from ssd_runtime.models import tiny_model
from ssd_sim.io.host import Host, current_host, host_differences
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.model.profile import load_profile_file
from ssd_sim.model.table import MeasuredForward
from ssd_sim.plan.plan import Plan, PlanFile, load_plan
from tests.helpers.bench import load_bench
from tests.helpers.runtime import DRAFT, TARGET, make_prompts, reference_greedy, target_model

PROMPTS = make_prompts([3, 7, 5], TARGET["vocab"], seed=9)
N_NEW = 12


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    tiny_model(**TARGET).save_pretrained(d / "target")
    tiny_model(**DRAFT).save_pretrained(d / "draft")
    tiny_model(**{**DRAFT, "vocab": 97}).save_pretrained(d / "draft97")
    (d / "prompts.jsonl").write_text("\n".join(json.dumps({"prompt_ids": p}) for p in PROMPTS) + "\n")
    (d / "bad.jsonl").write_text('{"prompt_ids": [1, 2]}\n{"prompt_ids": "oops"}\n')
    (d / "text.jsonl").write_text('{"prompt": "def f():"}\n')
    plan = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), batch_size=2)
    (d / "plan.json").write_text(PlanFile(plan, {"profile": "test"}).to_json())
    return d


def models(d, draft="draft") -> list[str]:
    return ["--target", str(d / "target"), "--draft", str(d / draft), "--no-progress"]


BAD = {
    "unknown flag": (["--speed", "11"], "unrecognized arguments"),
    "fan-out syntax": (["--fan-out", "x"], "invalid fan-out"),
    "fan-out length": (["-k", "3", "--fan-out", "1,2", "--prompts", "{d}/prompts.jsonl"], "fan_out"),
    "missing plan": (["--plan", "{d}/nope.json"], "does not exist"),
    "missing model": (["--target", "{d}/nope", "--prompts", "{d}/prompts.jsonl"], "target:"),
    "vocab mismatch": (["--draft", "{d}/draft97", "--prompts", "{d}/prompts.jsonl"], "vocabulary mismatch"),
    "text without tokenizer": (["--prompts", "{d}/text.jsonl"], "no tokenizer"),
    "bad prompt line": (["--prompts", "{d}/bad.jsonl"], "line 2"),
    "forced rate": (["--forced-acceptance", "2"], "outside [0, 1]"),
    "top-p zero": (["--top-p", "0"], "--top-p"),
    "top-p above one": (["--top-p", "1.5"], "--top-p"),
    "top-k negative": (["--top-k", "-3"], "--top-k"),
    "top-k fraction": (["--top-k", "2.5"], "--top-k"),
    "device": (["--draft-device", "gpu", "--prompts", "{d}/prompts.jsonl"], "draft_device"),
    "int8 bf16": (["--draft-quantize", "int8", "--draft-dtype", "bfloat16", "--prompts", "{d}/prompts.jsonl"],
                  "draft_quantize"),
    "graphs on cpu": (["--target-compile", "cuda-graphs", "--prompts", "{d}/prompts.jsonl"],
                      "target_compile: cuda-graphs needs --target-device cuda"),
    "inductor graphs on cpu": (["--draft-compile", "inductor-graphs", "--prompts", "{d}/prompts.jsonl"],
                               "draft_compile: inductor-graphs needs --draft-device cuda"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_2(files, capsys, case):
    argv, needle = BAD[case]
    argv = [a.format(d=files) for a in argv]
    if "--target" not in argv:
        argv = models(files) + argv
    with pytest.raises(SystemExit) as e:
        main(argv + ["--trace", str(files / "never.jsonl")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2
    assert len(err.splitlines()) == 1 and needle in err, err
    assert not (files / "never.jsonl").exists()


def test_fetched_model_names_say_how_to_fetch(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SSD_MODEL_CACHE", str(tmp_path))
    with pytest.raises(SystemExit):
        main(["--prompt-set", "code"])
    assert "run `ssd-run fetch-models`" in capsys.readouterr().err


def test_hugging_face_ids_run_from_the_local_cache_and_top_p_sampling_is_recorded(files, tmp_path, monkeypatch,
                                                                                    capsys):
    """--target / --draft as Hugging Face ids of models in the local hub cache (offline); the trace names the ids,
    not the cache paths, and records the run's top-k / top-p."""
    for name in ("target", "draft"):
        snap = tmp_path / f"models--acme--tiny-{name}" / "snapshots" / "f00d"
        snap.parent.mkdir(parents=True)
        snap.symlink_to(files / name, target_is_directory=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    trace = tmp_path / "hf.jsonl"
    code = main(["--target", "acme/tiny-target", "--draft", "acme/tiny-draft", "--no-progress", "-t", "1",
                 "--top-k", "20", "--top-p", "0.9", "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", "6",
                 "--trace", str(trace)])
    assert code == 0, capsys.readouterr().err
    header = read_trace(trace).header
    assert header.models == {"target": "acme/tiny-target", "draft": "acme/tiny-draft"}
    assert (header.extra["top_k"], header.extra["top_p"]) == (20, 0.9)


def test_plan_file_with_flag_overrides_writes_trace_and_outputs(files, capsys):
    trace, out = files / "run.jsonl", files / "out.jsonl"
    code = main(models(files) + ["--plan", str(files / "plan.json"), "--saguaro-c", "0.5", "--backup", "fast",
                                 "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", str(N_NEW),
                                 "--trace", str(trace), "--output", str(out)])
    assert code == 0
    stdout = capsys.readouterr().out
    assert "tok/s" in stdout and "hit rate" in stdout and str(trace) in stdout
    tr = read_trace(trace)
    assert tr.header.plan["saguaro_c"] == 0.5 and tr.header.plan["backup"] == "fast"
    assert tr.header.plan["fan_out"] == [2, 1, 1] and tr.header.batch_size == 2
    assert tr.header.prompt_source.endswith("prompts.jsonl") and tr.header.mode == "ssd"
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    model = target_model(TARGET)
    assert [x["generated_ids"] for x in lines] == [reference_greedy(model, p, N_NEW)[0] for p in PROMPTS]
    assert [x["prompt_ids"] for x in lines] == PROMPTS and lines[0]["text"] is None
    m = summarize(tr)
    assert m.tokens == len(PROMPTS) * (N_NEW - 1) and m.hit_rate is not None and m.tok_s > 0


def test_poisson_arrivals_with_refills_report_ttft_and_tpot(files, capsys):
    trace = files / "arrivals.jsonl"
    code = main(models(files) + ["--mode", "ssd", "-k", "2", "--max-batch", "2", "--rate", "20", "--seed", "3",
                                 "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", str(N_NEW),
                                 "--trace", str(trace)])
    assert code == 0
    assert "TTFT p50 / p90 / p99 (ms)" in capsys.readouterr().out
    tr = read_trace(trace)
    reqs = tr.summary.requests
    assert tr.header.batch_size == 2 and max(r.batch for r in tr.rounds) <= 2
    assert [r.seq for r in reqs] == list(range(len(PROMPTS))) and reqs[0].arrival_ms == 0.0
    gaps = [b.arrival_ms - a.arrival_ms for a, b in zip(reqs, reqs[1:], strict=False)]
    assert all(g > 0 for g in gaps)  # exponential gaps, seeded
    assert all(r.first_token_ms >= r.arrival_ms and r.output_tokens == N_NEW for r in reqs)
    assert tr.summary.ttft_ms_p50 > 0 and tr.summary.tpot_ms_p50 > 0 and tr.summary.e2e_tok_s > 0


def test_ar_mode_needs_no_draft_and_writes_the_default_trace(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code = main(["--target", str(files / "target"), "--draft", str(files / "missing"), "--mode", "ar",
                 "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", "5", "--no-progress"])
    assert code == 0
    (path,) = (tmp_path / "runs").glob("ar-*.jsonl")
    tr = read_trace(path)
    assert tr.header.models["draft"] is None and all(r.K == 0 for r in tr.rounds)
    assert summarize(tr).mean_accept_len == 1.0


def test_forced_acceptance_of_one_accepts_every_draft_token(files, capsys):
    trace = files / "forced.jsonl"
    code = main(models(files) + ["--mode", "sd", "-k", "3", "--forced-acceptance", "1", "--prompts",
                                 str(files / "prompts.jsonl"), "--max-new-tokens", "9", "--trace", str(trace)])
    assert code == 0
    tr = read_trace(trace)
    m = summarize(tr)
    assert tr.header.forced_acceptance == 1.0
    assert m.acceptance_rate == 1.0 and m.mean_accept_len == 4.0


def test_traces_record_the_host_and_the_kernels_that_ran(files, tmp_path):
    path = tmp_path / "sd.jsonl"
    assert main(models(files) + ["--mode", "sd", "-k", "2", "--prompts", str(files / "prompts.jsonl"),
                                 "--max-new-tokens", "4", "--trace", str(path)]) == 0
    host = Host.from_dict(read_trace(path).header.host)
    assert host.kernels == {"target": "onednn-prepacked", "draft": "onednn-prepacked"}
    assert host.cores == len(os.sched_getaffinity(0))  # the run's cores, not the one each process is pinned to
    assert host.torch == torch.__version__ and host.cpu_capability and host.recorded
    assert host_differences(host, current_host()) == []


@pytest.mark.parametrize("flags,selected,label", [(["--prompt-offset", "1", "--num-prompts", "1"], [1], "[1:2]"),
                                                   (["--prompt-stride", "2"], [0, 2], "[0:3:2]")])
def test_prompt_offset_and_stride_select_prompts(files, tmp_path, flags, selected, label):
    path, out = tmp_path / "ar.jsonl", tmp_path / "out.jsonl"
    assert main(models(files) + ["--mode", "ar", "--prompts", str(files / "prompts.jsonl"), *flags,
                                 "--max-new-tokens", "3", "--trace", str(path), "--output", str(out)]) == 0
    tr = read_trace(path)
    assert tr.header.num_prompts == len(selected) and tr.header.prompt_source.endswith(f"prompts.jsonl{label}")
    assert [json.loads(line)["prompt_ids"] for line in out.read_text().splitlines()] == [PROMPTS[i] for i in selected]
    with pytest.raises(SystemExit) as e:
        main(models(files) + ["--prompts", str(files / "prompts.jsonl"), "--prompt-offset", "3"])
    assert e.value.code == 2


def byte_tokens(text: str, add_special_tokens: bool = False) -> dict:
    """A stand-in tokenizer for the tiny models (they have none): the text's first 16 UTF-8 bytes mod the vocabulary."""
    return {"input_ids": [b % TARGET["vocab"] for b in text.encode()[:16]]}


def tagged_prompts(d) -> str:
    """Six id prompts, some tagged; prompts 1, 3, 5 (0-based: a stride-2 selection from 1) are "", "code" and
    "my-class.v2"."""
    tags = ["chat", None, "chat", "code", None, "my-class.v2"]
    lines = [{"prompt_ids": p, **({"tag": t} if t else {})} for p, t in zip(make_prompts([3] * 6, TARGET["vocab"], 5),
                                                                           tags, strict=True)]
    (d / "tagged.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(d / "tagged.jsonl")


@pytest.mark.parametrize("source,tags", [
    (["--prompt-set", "pool", "--prompt-offset", "22", "--num-prompts", "4"], ["code", "code", "chat", "chat"]),
    (["--prompts", "{tagged}", "--prompt-offset", "1", "--prompt-stride", "2"], ["", "code", "my-class.v2"]),
    (["--prompts", "{untagged}"], None),
])
def test_the_trace_header_records_each_request_s_class(files, tmp_path, monkeypatch, source, tags):
    """request_tags: the selected prompts' classes in seq order ("" = untagged); no key when none has one."""
    from ssd_runtime import cli

    monkeypatch.setattr(cli, "_tokenizer", lambda path: byte_tokens)  # the built-in sets are text
    source = [a.format(tagged=tagged_prompts(tmp_path), untagged=files / "prompts.jsonl") for a in source]
    path = tmp_path / "ar.jsonl"
    assert main(models(files) + ["--mode", "ar", *source, "--max-new-tokens", "3", "--trace", str(path)]) == 0
    head = json.loads(path.read_text().splitlines()[0])
    assert head["type"] == "header" and head.get("request_tags", "absent") == (tags or "absent")
    assert read_trace(path).header.num_prompts == len(tags or PROMPTS)


def test_calibrate_here_tags_exactly_the_prompts_each_run_took(files, tmp_path, monkeypatch):
    """The latency-only runs take the first FEW selected prompts, the acceptance runs all: each header's
    request_tags are those prompts' tags."""
    from pathlib import Path

    from ssd_runtime import calibrate_here as ch
    from ssd_runtime.cli import model_specs, prompt_ids

    monkeypatch.setattr(ch, "FEW", 2)
    args = ch.build_parser().parse_args(models(files) + ["--prompts", tagged_prompts(tmp_path), "--prompt-offset", "1",
                                                         "--max-new-tokens", "3"])  # stride 2: lines 1, 3, 5
    specs = model_specs(args, with_draft=True)
    job_kw = prompt_ids(args, Path(specs["target"].path))
    runs = [ch.Run("ar", Plan(mode="ar")), ch.Run("sd", Plan(mode="sd", num_speculative_tokens=2), True)]
    few, every = ch._measure(runs, specs, job_kw, args, tmp_path)
    assert json.loads(few.read_text().splitlines()[0])["request_tags"] == ["", "code"]
    assert json.loads(every.read_text().splitlines()[0])["request_tags"] == ["", "code", "my-class.v2"]
    assert [read_trace(p).header.num_prompts for p in (few, every)] == [2, 3]


@pytest.mark.parametrize("mix,says", [("math=1", "mix: class 'math' has no request in the selected prompts"),
                                      ("code=x", "argument --mix: code='x': a share must be a finite number >= 0")])
def test_calibrate_here_refuses_a_mix_its_prompts_cannot_weigh_before_any_run(files, tmp_path, capsys, mix, says):
    out = tmp_path / "here"
    with pytest.raises(SystemExit) as e:
        main(["calibrate-here", "--target", str(files / "target"), "--draft", str(files / "draft"), "--prompts",
              tagged_prompts(tmp_path), "--max-new-tokens", "3", "--out", str(out), "--mix", mix])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and says in err, err
    assert not out.exists() or not any(out.iterdir())  # nothing measured, nothing written


@pytest.mark.parametrize("flag,value,says", [("--probe-max-k", "100", "probe.max_k: must be in 1..64, got 100"),
                                             ("--probe-batch", "5000", "probe.batch: must be integers in 1..4096")])
def test_calibrate_here_refuses_a_probe_grid_before_any_run(files, tmp_path, capsys, flag, value, says):
    """The probe runs last: its grid was checked only after minutes of AR / SD / SSD runs (an uncaught ConfigError)."""
    out = tmp_path / "here"
    with pytest.raises(SystemExit) as e:
        main(["calibrate-here", "--target", str(files / "target"), "--draft", str(files / "draft"), "--prompts",
              tagged_prompts(tmp_path), "--max-new-tokens", "3", "--out", str(out), flag, value])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and says in err, err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("arg,says", [("--temperatures=", "'' holds no temperature; give one or more, e.g. 0 or 0,1"),
                                      ("--temperatures=0,0", "'0,0': give each temperature once, each in 0..10"),
                                      ("--temperatures=0,11", "each in 0..10")])
def test_calibrate_here_names_what_is_wrong_with_its_temperatures(files, tmp_path, capsys, arg, says):
    with pytest.raises(SystemExit) as e:
        main(["calibrate-here", "--target", str(files / "target"), "--draft", str(files / "draft"), arg])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and says in err, err


# warnings a busy host's timings can raise on any calibration (model.probed, model.calibrate, io.sanity)
TIMING_WARNINGS = ("x the probe table", "further above the probe table", "off what the AR / SD traces' target fit",
                   "rounds stalled")


def test_calibrate_here_writes_traces_a_profile_of_this_host_and_its_plan(files, tmp_path, capsys):
    out = tmp_path / "here"
    argv = ["calibrate-here", "--target", str(files / "target"), "--draft", str(files / "draft"), "--prompts",
            str(files / "prompts.jsonl"), "--num-prompts", "2", "--max-new-tokens", "6", "--out", str(out),
            "--no-progress"]
    assert main(argv) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["ar-b1-t0.jsonl", "manifest.json", "plan.json", "probe.json", "profile.json", "sd-k2-b1-t0.jsonl",
                     "sd-k4-b1-t0.jsonl", "sd-k6-b1-t0.jsonl", "ssd-k2-f001-b1-t0.jsonl", "ssd-k2-f111-b2-t0.jsonl",
                     "ssd-k2-f112-b1-t0.jsonl"]
    prof = load_profile_file(out / "profile.json")
    # latencies are the probe's tables: every (b, tokens) the planner asks about at b <= 4, K <= 8 is measured
    assert isinstance(prof.latency.target, MeasuredForward) and prof.latency.target.probed_range() == "rows 1..4 x tokens 1..9"
    assert prof.latency.draft.probed_range() == "rows 1..32 x tokens 1..9"
    assert prof.provenance["latency"].startswith(f"measured: probe {out / 'probe.json'}")
    assert prof.host is not None and host_differences(prof.host, current_host()) == []
    assert prof.host.kernels == {"target": "onednn-prepacked", "draft": "onednn-prepacked"}
    assert load_plan(out / "plan.json").extra["profile"]["path"] == str(out / "profile.json")
    manifest = json.loads((out / "manifest.json").read_text())
    assert set(manifest["files"]) == set(names) - {"manifest.json"}
    printed = capsys.readouterr()
    # no warning but what a loaded host's timings cause (this suite runs two test files at a time on 2 cores)
    warnings = [w for w in printed.err.splitlines() if "warning" in w]
    assert all(any(cause in w for cause in TIMING_WARNINGS) for w in warnings), warnings
    assert "plan written to" in printed.out
    with pytest.raises(SystemExit) as e:  # the folder is not empty now: refused, nothing overwritten
        main(argv)
    assert e.value.code == 2 and sorted(p.name for p in out.iterdir()) == names


# ---- bad input refused before the run: one line, exit 2, nothing created or changed -------------------------
@pytest.fixture(scope="module")
def bad(files):
    """Malformed prompt files and broken model folders (copies of the fixture's tiny models)."""
    import shutil

    d = files / "bad"
    d.mkdir()
    (d / "utf16.jsonl").write_text('{"prompt_ids": [1]}\n', encoding="utf-16")
    (d / "binary.jsonl").write_bytes(bytes(range(256)) * 4)
    (d / "folder.jsonl").mkdir()
    (d / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
    (d / "bigint.jsonl").write_text('{"prompt_ids": [' + "9" * 5000 + "]}\n")
    (d / "long.jsonl").write_text(json.dumps({"prompt_ids": [i % TARGET["vocab"] for i in range(600)]}) + "\n")
    (d / "regular").write_text("a file, not a folder\n")
    for name, broken in (("config-cut", "config.json"), ("config-binary", "config.json"),
                         ("weights-cut", "model.safetensors")):
        shutil.copytree(files / "target", d / name)
        data = (d / name / broken).read_bytes()
        (d / name / broken).write_bytes(bytes(range(256)) if name == "config-binary" else data[:len(data) // 2])
    return d


BAD_BEFORE_RUN = {
    "prompts UTF-16": (["--prompts", "{b}/utf16.jsonl"], "prompts: {b}/utf16.jsonl is UTF-16"),
    "prompts binary": (["--prompts", "{b}/binary.jsonl"], "binary"),
    "prompts folder": (["--prompts", "{b}/folder.jsonl"], "is a folder"),
    "prompts 100,000 deep": (["--prompts", "{b}/deep.jsonl"], "nests"),
    "prompts huge int": (["--prompts", "{b}/bigint.jsonl"], "4300 digits"),
    "prompt beyond context": (["--prompts", "{b}/long.jsonl"], "prompt 1 has 600 tokens, more than the target's "
                                                               "context of 512"),
    "tokens beyond context": (["--max-new-tokens", "600"], "+ --max-new-tokens 600 + 4 draft positions ahead"),
    "config.json truncated": (["--target", "{b}/config-cut"], "target: {b}/config-cut/config.json is not valid JSON"),
    "config.json binary": (["--target", "{b}/config-binary"], "config.json is"),
    "target weights truncated": (["--target", "{b}/weights-cut"], "target: {b}/weights-cut/model.safetensors is "
                                                                  "truncated"),
    "draft weights truncated": (["--draft", "{b}/weights-cut"], "draft: {b}/weights-cut/model.safetensors is "
                                                                "truncated"),
    "cuda device": (["--target-device", "cuda:99"], "target_device: cuda:99"),
    "cuda without index": (["--draft-device", "cuda"], "draft_device: cuda: "),
    "seed -1": (["--seed", "-1"], "--seed: -1 is outside 0.."),
    "tokens beyond limit": (["--max-new-tokens", "3000000"], "outside 1..2097152"),
    "batch beyond limit": (["-b", "5000"], "outside 1..4096"),
    "max batch 0": (["--max-batch", "0"], "--max-batch: 0 is outside 1..4096"),
    "rate 0": (["--rate", "0"], "--rate: 0 is not a rate in (0, 1e+06] requests/s"),
    "rate nan": (["--rate", "nan"], "--rate:"),
    "rate of ages": (["--rate", "1e-300"], "rate: --rate 1e-300 requests/s spaces 3 requests over ~6.34e+292 years, "
                                           "past the 139 years"),
    "K beyond limit": (["-k", "65"], "outside 1..64"),
    "draft timeout beyond limit": (["--draft-timeout", "1e9"], "use 0 to wait forever"),
    "output under a file": (["--output", "{b}/regular/out.jsonl"], "output: cannot write {b}/regular/out.jsonl"),
    "output a folder": (["--output", "{b}"], "output: {b} is a folder"),
    "output in /proc": (["--output", "/proc/ssd-nope/out.jsonl"], "output: cannot create the folder /proc/ssd-nope"),
    "trace under a file": (["--trace", "{b}/regular/t.jsonl"], "trace: cannot write {b}/regular/t.jsonl"),
    "trace a folder": (["--trace", "{b}"], "trace: {b} is a folder"),
    "trace in /proc": (["--trace", "/proc/ssd-nope/t.jsonl"], "trace: cannot create the folder /proc/ssd-nope"),
}


def snapshot(d) -> dict:
    """Every path below d, with size and mtime for files (a folder's mtime moves with a write probe's come and go)."""
    return {str(p): None if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


@pytest.mark.parametrize("case", list(BAD_BEFORE_RUN))
def test_bad_input_is_refused_before_the_run_in_one_line(files, bad, capfd, case):
    argv, needle = BAD_BEFORE_RUN[case]
    argv, needle = [a.format(b=bad) for a in argv], needle.format(b=bad)
    argv = models(files) + ["--prompts", str(files / "prompts.jsonl")] + argv  # later flags win
    if "--trace" not in argv:
        argv += ["--trace", str(bad / "never.jsonl")]
    before = snapshot(files)
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capfd.readouterr().err
    assert e.value.code == 2
    assert err.count("\n") == 1 and needle in err and "Traceback" not in err, err
    assert snapshot(files) == before  # nothing created or changed (no trace, output, temp or probe file)


def test_output_is_written_through_a_symlink(files, tmp_path):
    real, link = tmp_path / "real.jsonl", tmp_path / "link.jsonl"
    real.write_text("old\n")
    link.symlink_to(real)
    assert main(models(files) + ["--mode", "ar", "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", "3",
                                 "-o", str(link), "--trace", str(tmp_path / "ar.jsonl")]) == 0
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert [json.loads(x)["prompt_ids"] for x in real.read_text().splitlines()] == PROMPTS
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ar.jsonl", "link.jsonl", "real.jsonl"]



def test_cuda_without_an_index_is_device_0_when_cuda_is_there(monkeypatch):
    from ssd_runtime import cli

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert cli._device("cuda", "target_device") == "cuda:0"
    assert cli._device("cuda:1", "draft_device") == "cuda:1"


def test_the_summary_prints_when_every_request_produced_one_token(capsys):
    """TPOT needs two tokens: a run whose every request stopped at its first token (EOS) has TTFT only."""
    from ssd_runtime.cli import print_summary
    from ssd_runtime.runlog import request_percentiles
    from ssd_sim.io.records import RequestRecord
    from tests.helpers.trace_samples import EMPTY_SUMMARY

    reqs = [RequestRecord(i, 0.0, 5.0 + i, 5.0 + i, 1) for i in range(3)]
    summary = dataclasses.replace(EMPTY_SUMMARY, **request_percentiles(reqs), requests=tuple(reqs))
    assert summary.tpot_ms_p50 is None and summary.ttft_ms_p50 == 6.0
    print_summary(summary, "ssd", None)
    out = capsys.readouterr().out
    assert "TTFT p50 / p90 / p99 (ms)" in out and "TPOT" not in out


def test_the_summary_warns_of_rounds_that_stalled(tmp_path, capsys):
    from ssd_runtime.cli import print_summary
    from tests.helpers.synthetic_traces import stalled_trace
    from tests.helpers.trace_samples import EMPTY_SUMMARY

    print_summary(EMPTY_SUMMARY, "sd", "t.jsonl", stalled_trace(tmp_path / "t.jsonl", 20.0).rounds)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ssd-run: warning: t.jsonl: 1 of 40 rounds stalled (over 5x")
    print_summary(EMPTY_SUMMARY, "sd", "t.jsonl", stalled_trace(tmp_path / "c.jsonl", 4.5).rounds)
    assert capsys.readouterr().err == ""


def test_the_summary_counts_graph_warmup_rounds_and_calls_none_a_stall(tmp_path, capsys):
    from ssd_runtime.cli import print_summary
    from tests.helpers.synthetic_traces import stalled_trace
    from tests.helpers.trace_samples import EMPTY_SUMMARY

    graphs = dataclasses.replace(EMPTY_SUMMARY, graphs_target={"graphs": 4, "replays": 90, "eager_shapes": 0})
    print_summary(graphs, "sd", "t.jsonl", stalled_trace(tmp_path / "t.jsonl", 20.0, warmup=True).rounds)
    out, err = capsys.readouterr()
    assert err == "" and "CUDA graph warm-up rounds" in out and "1 of 40" in out
    print_summary(EMPTY_SUMMARY, "sd", "t.jsonl", stalled_trace(tmp_path / "c.jsonl", 4.5).rounds)
    assert "warm-up" not in capsys.readouterr().out  # no graphs, no row


# ---- outputs never destroy inputs; concurrent runs never share a file (issue 29) ----------------------------
bad_inputs = load_bench("bad_inputs")
RUN_CASES = {name: (args, expect) for name, args, expect in bad_inputs.RUN_CASES}


@pytest.fixture(scope="module")
def run_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("runcases")
    return d, bad_inputs.make_run_files(d)


@pytest.mark.parametrize("case", [n for n, (_, expect) in RUN_CASES.items() if expect == "refuse"])
def test_an_output_over_an_input_is_refused_before_the_run(run_files, capfd, case):
    """bench/bad_inputs.py's ssd-run refusals, in-process: one line, exit 2, nothing created or changed."""
    d, files = run_files
    before = snapshot(d)
    with pytest.raises(SystemExit) as e:
        main(bad_inputs.run_argv(RUN_CASES[case][0], files)[1:])
    err = capfd.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("ssd-run: error: ") and ("input of this command" in err or "output of this command" in err)
    assert snapshot(d) == before


def test_two_runs_at_once_on_one_trace_never_break_it(run_files):
    """Two real ssd-run processes with the same --trace: one refuses in one line (or both finish), and the trace
    the finished one names parses."""
    d, files = run_files
    r = bad_inputs.concurrent("--trace {run}/both.jsonl", files, d)
    assert r["ok"], r


HOLD_TRACE = """
import sys, time
from ssd_sim.io.outputs import claim_outputs
with claim_outputs({"trace": sys.argv[1]}):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def another_run(tmp_path):
    """A process that holds the claim on a trace path, as a concurrent ssd-run does."""
    import subprocess
    import sys
    from pathlib import Path

    def hold(path):
        p = subprocess.Popen([sys.executable, "-c", HOLD_TRACE, str(path)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        assert p.stdout.readline().strip() == "held"
        procs.append(p)
        return p

    procs = []
    yield hold
    for p in procs:
        p.kill()
        p.wait()


def test_a_trace_another_run_is_writing_is_refused_in_one_line(files, tmp_path, capfd, another_run):
    trace = tmp_path / "t.jsonl"
    proc = another_run(trace)
    with pytest.raises(SystemExit) as e:
        main(models(files) + ["--prompts", str(files / "prompts.jsonl"), "--mode", "ar", "--trace", str(trace)])
    err = capfd.readouterr().err
    assert e.value.code == 2 and err == (f"ssd-run: error: trace: another run (process {proc.pid}) is writing "
                                         f"{trace} now; give --trace another file or wait for it to finish\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".t.jsonl.lock"]  # the other run's lock only


def test_a_default_trace_name_another_run_holds_moves_on_to_the_next(files, tmp_path, monkeypatch, capsys,
                                                                      another_run):
    from ssd_runtime import run

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run, "default_trace_path", lambda mode: tmp_path / "runs" / f"{mode}-same-second.jsonl")
    another_run(tmp_path / "runs" / "ar-same-second.jsonl")
    assert main(models(files) + ["--prompts", str(files / "prompts.jsonl"), "--mode", "ar",
                                 "--max-new-tokens", "3"]) == 0
    assert f"trace: {tmp_path}/runs/ar-same-second-2.jsonl" in capsys.readouterr().out
    assert read_trace(tmp_path / "runs" / "ar-same-second-2.jsonl").rounds
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [".ar-same-second.jsonl.lock",
                                                                      "ar-same-second-2.jsonl"]


# ---- valid but almost certainly not meant: one warning line before the run (ssd_sim.io.sanity) ----------------
@pytest.mark.parametrize("rate,warning", [
    ("1e-6", "ssd-run: warning: --rate 1e-06 requests/s spaces 3 requests over ~23 days of waiting; --rate is in "
             "requests per second\n"),
    ("0.0005", "ssd-run: warning: --rate 0.0005 requests/s spaces 3 requests over ~67 min of waiting"),
    ("0.001", None),  # 2 gaps of 1000 s: 33 minutes, under the hour
])
def test_a_rate_of_hours_of_waiting_warns_before_the_run_starts(files, capfd, monkeypatch, rate, warning):
    import ssd_runtime.cli as cli

    seen = []
    monkeypatch.setattr(cli, "_execute", lambda *a: seen.append(capfd.readouterr().err) or 0)  # no days of sleep
    assert main(models(files) + ["--mode", "ar", "--prompts", str(files / "prompts.jsonl"), "--max-new-tokens", "2",
                                 "--rate", rate, "--trace", str(files / "never-run.jsonl")]) == 0
    (err,) = seen
    assert (warning in err and err.count("\n") == 1) if warning else err == ""


def test_an_infinite_draft_timeout_waits_forever_however_spelled():
    from ssd_runtime.cli import build_parser

    for text in ("inf", "Infinity", "+INF", "1e999", "0"):
        assert build_parser().parse_args(["--draft-timeout", text]).draft_timeout == 0.0
