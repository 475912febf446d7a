"""`ssd-plan capacity`: prints the cheapest configuration with its margins and the same-GPU answer; JSON and -o
agree; bad input is one line."""

from __future__ import annotations

import json

import pytest

from ssd_sim.cli.plan import main

ARGS = ["capacity", "--preset", "llama70b-1b-h100", "--rate", "30", "--num-requests", "240", "--tokens", "48",
        "--ttft-ms", "150", "--tpot-ms", "7", "--modes", "sd,ssd", "--batch-caps", "2,8", "--max-replicas", "6",
        "--gpu-price", "2.5", "--jobs", "1"]


def test_the_cheapest_configuration_its_margins_and_the_same_gpu_answer_are_printed(capsys):
    assert main(ARGS) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "cheapest: SSD 2 x TP=4 b<=8, " in out and "on 10 GPUs ($" in out and "TTFT margin +" in out
    assert "SD on SSD's 10 GPUs (2 x TP=4 b<=" in out and "misses them" in out
    assert "none within 6" in out  # SD: its table row
    # the preset's KV reads at the load's mean decode context: 128-token prompts + half of 48 output tokens
    assert "the plans and the analytic bounds at 152, the workload's mean prompt" in out
    assert "simulated rounds at their batch's mean cached tokens per sequence" in out
    # and how far the cheapest SSD deployment's round moves over the context growing from 128 to 176 tokens
    assert "over a context growing from 128 to 176 tokens the analytic SSD round at b = 8" in out
    assert "their TPOTs hold for the whole decode" in out


def test_the_preset_at_its_own_longer_context_needs_more_replicas(capsys):
    assert main(ARGS + ["--context", "400", "--json"]) == 0  # the preset's own context: every forward reads more KV
    data = json.loads(capsys.readouterr().out)
    assert (data["best"]["mode"], data["best"]["gpus"]) == ("ssd", 15) and "context_note" not in data
    assert "context_growth" not in data  # a context given: nothing was taken at the mean


def test_json_and_the_output_file_hold_the_same_result(tmp_path, capsys):
    out = tmp_path / "cap.json"
    assert main(ARGS + ["--json", "-o", str(out)]) == 0
    printed, written = json.loads(capsys.readouterr().out), json.loads(out.read_text())
    assert printed == written
    best = written["best"]
    assert (best["mode"], best["gpus"], best["meets"]) == ("ssd", 10, True)
    assert best["usd_per_mtok"] == pytest.approx(10 * 2.5 / 3600 / best["tok_s"] * 1e6)
    assert written["per_mode"]["sd"] is None and written["same_gpus"]["sd"]["meets"] is False
    growth = written["context_growth"]
    assert (growth["prompt_tokens"], growth["output_tokens"], growth["batch"]) == (128, 48, 8)
    assert growth["mean_context_err_pct"] >= -1e-6  # the mean of max(T_v, T_p) is at least the max at the mean


BAD = {
    "no target": (["--ttft-ms"], "targets: give a TTFT or a TPOT target"),
    "no load": (["--rate"], "rate: give the load as --rate R"),
    "an unknown mode": (["--modes", "sd,xx"], "modes: 'xx' is not one of ar, sd, ssd"),
    "an unknown router": (["--routers", "random"], "routers: 'random' is not one of round-robin, least-loaded"),
    "an empty mode": (["--modes", "ar,,sd"], "modes: '' is not one of ar, sd, ssd"),
    "a mode twice": (["--modes", "ssd,sd,ssd"], "modes: names 'ssd' twice; give each once"),
    "a router twice": (["--routers", "round-robin,round-robin"], "routers: names 'round-robin' twice"),
    "ray not installed": (["--ray"], "ray: Ray is not installed here"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_exit_2(capsys, case):
    drop, needle = BAD[case]
    argv = list(ARGS)
    if drop[0] in ("--ttft-ms", "--rate") and len(drop) == 1:
        i = argv.index(drop[0])
        del argv[i:i + 2]
        if drop[0] == "--ttft-ms":
            i = argv.index("--tpot-ms")
            del argv[i:i + 2]
    else:
        argv += drop
    try:
        import ray  # noqa: F401

        if case == "ray not installed":
            pytest.skip("ray is installed here")
    except ImportError:
        pass
    with pytest.raises(SystemExit) as e:
        main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and needle in err, err


def test_tp_options_search_each_degree_from_specs_and_are_refused_for_a_preset(capsys):
    spec = ["capacity", "--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "H100-SXM", "--rate", "30",
            "--num-requests", "240", "--tokens", "48", "--tpot-ms", "7", "--modes", "ssd", "--batch-caps", "8",
            "--max-replicas", "4", "--jobs", "1", "--json"]
    assert main(spec + ["--tp-options", "4,8"]) == 0
    both = json.loads(capsys.readouterr().out)["best"]
    alone = []
    for tp in ("4", "8"):
        assert main(spec + ["--tp", tp]) == 0
        alone.append(json.loads(capsys.readouterr().out)["best"])
    assert both["gpus"] == min(b["gpus"] for b in alone if b) and both["tp"] in (4, 8)
    with pytest.raises(SystemExit) as e:
        main(ARGS + ["--tp-options", "2,4"])
    assert e.value.code == 2 and "tp_options: --tp-options needs a pair from specs" in capsys.readouterr().err


def test_a_least_loaded_router_is_searched_beside_round_robin(capsys):
    assert main(ARGS + ["--routers", "round-robin,least-loaded", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {o["router"] for o in data["simulated"]} == {"round-robin", "least-loaded"}
    alone = []
    for router in ("round-robin", "least-loaded"):
        assert main(ARGS + ["--routers", router, "--json"]) == 0
        alone.append(json.loads(capsys.readouterr().out)["best"]["gpus"])
    assert data["best"]["meets"] and data["best"]["gpus"] == min(alone) and alone[0] == 10


def test_a_ray_pool_gives_the_results_of_one_process(capsys):
    """--ray (ray.util.multiprocessing.Pool) where Ray is installed; CI has no Ray, so this runs where it is
    (measured 2026-12-02 with ray 2.60.0 on this project's 2-core host: JSON identical to --jobs 2)."""
    pytest.importorskip("ray")
    assert main(ARGS + ["--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert main([a for a in ARGS if a not in ("--jobs", "1")] + ["--ray", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == local


def test_a_tp_degree_whose_memory_cannot_hold_one_sequence_is_left_out_with_a_warning(capsys):
    """70B on 2 x H100 keeps 2.9 GB beside its 141 GB of weights, less than one 16k-token KV cache (5.2 GB): TP = 2 is
    left out (one warning line) and TP = 4 searched; with only TP = 2 the same reason is the error."""
    spec = ["capacity", "--target", "Llama-3.1-70B", "--draft", "Llama-3.2-1B", "--gpu", "h100", "--rate", "2",
            "--num-requests", "20", "--prompt-tokens", "16000", "--tokens", "16", "--tpot-ms", "50", "--modes", "ssd",
            "--batch-caps", "1", "--max-replicas", "2", "--jobs", "1", "--json"]
    assert main(spec + ["--tp-options", "2,4"]) == 0
    out, err = capsys.readouterr()
    assert err.count("\n") == 1 and err.startswith("ssd-plan capacity: warning: --tp 2 left out: context: one "
                                                   "sequence's Llama-3.1-70B KV cache at 16008 tokens")
    assert json.loads(out)["best"]["tp"] == 4
    with pytest.raises(SystemExit) as e:
        main(spec + ["--tp-options", "2"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.count("\n") == 1 and "context: one sequence's" in err


@pytest.mark.parametrize("group", [False, True], ids=["parent", "process-group"])
def test_sigterm_during_a_pooled_search_ends_at_once_in_one_line(tmp_path, group):
    """SIGTERM to ssd-plan capacity --jobs 2 (to it alone, as `kill PID`; or to its group, as a container stop): the
    workers are stopped, not waited for (the search had minutes left), and no worker prints a traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    argv = [a for a in ARGS if a not in ("--jobs", "1", "--num-requests", "240")]
    # 100,000 requests: minutes of search (6,000 took 12 s on 2 cores), so the signal always lands mid-search
    argv += ["--num-requests", "100000", "--batch-caps", "1,2,4,8,16,32", "--max-replicas", "64", "--jobs", "2"]
    code = f"import sys; from ssd_sim.cli.plan import main; sys.exit(main({argv!r}))"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline and not children.read_text().split():
        time.sleep(0.2)  # until the pool's workers exist
    time.sleep(1.0)  # and are at work
    assert proc.poll() is None, "the search ended before the signal: make it longer"
    start = time.monotonic()
    (os.killpg if group else os.kill)(proc.pid, signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=30)
    finally:  # a hang fails the test, and leaves nothing running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert time.monotonic() - start < 10
    assert "Traceback" not in err and err.count("\n") == 1, err
    assert (proc.returncode, err) in ((143, "ssd-plan capacity: terminated\n"),
                                      (2, "ssd-plan capacity: error: jobs: a simulation worker process died (killed, or "
                                          "out of memory); nothing was written: run again, or with --jobs 1\n"))
    if not group:
        assert proc.returncode == 143
