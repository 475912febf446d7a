"""bench/gpu_smoke.py's pure helpers: which cases run for a device kind and GPU count, the model pairs of the
families case, how a case is judged, the table; bench/gpu_smoke.sh's one line for missing packages. No model runs
here (`bash bench/gpu_smoke.sh --device cpu` is the CPU run, by hand)."""

import os
import subprocess
import sys
from pathlib import Path

from ssd_runtime.specs import FAMILIES
from tests.helpers.bench import load_bench

GS = load_bench("gpu_smoke")


def devices(cases):
    return [(c.name, c.target_device, c.draft_device) for c in cases]


def test_cpu_runs_tiny_and_the_families_and_the_real_pair_only_when_asked():
    assert devices(GS.plan_cases("cpu", 0, False, None, None, "float32")) == [("tiny cpu", "cpu", "cpu"),
                                                                               ("families cpu", "cpu", "cpu")]
    real = GS.plan_cases("cpu", 0, True, None, None, "float32")[-1]
    assert (real.models, real.num_prompts, real.max_new_tokens) == ("real", 1, 16)


def test_one_gpu_puts_both_processes_on_cuda0_and_two_gpus_add_the_nccl_cases():
    one = devices(GS.plan_cases("cuda", 1, True, None, None, "float32"))
    assert ("tiny 1dev", "cuda:0", "cuda:0") in one and ("real 1dev", "cuda:0", "cuda:0") in one
    assert ("families 1dev", "cuda:0", "cuda:0") in one
    assert not any(t.endswith("1") or d.endswith("1") for _, t, d in one)
    two = devices(GS.plan_cases("cuda", 2, True, 2, 32, "bfloat16"))
    assert ("tiny 2dev", "cuda:0", "cuda:1") in two and ("real 2dev", "cuda:0", "cuda:1") in two


def test_the_families_case_runs_a_tiny_pair_of_every_family_on_the_case_devices():
    case = next(c for c in GS.plan_cases("cuda", 1, False, None, None, "float32") if c.models == "families")
    pairs = GS.case_pairs(case)
    assert [p[0] for p in pairs] == list(FAMILIES)
    for family, target, draft, prompts in pairs:
        assert dict(target.tiny)["family"] == family == dict(draft.tiny)["family"] and dict(draft.tiny)["noise"] > 0
        assert target.device == draft.device == "cuda:0" and len(prompts) == case.num_prompts
        assert target.compile == draft.compile == "cuda-graphs"  # as ssd-run's default on CUDA


def test_the_mixed_case_captures_graphs_on_the_gpu_side_only_and_off_turns_them_off():
    import dataclasses

    mixed = next(c for c in GS.plan_cases("cuda", 1, False, None, None, "float32") if c.name == "tiny mixed")
    (_, target, draft, _), = GS.case_pairs(mixed)
    assert (target.compile, draft.compile) == ("cuda-graphs", "off")
    (_, target, draft, _), = GS.case_pairs(dataclasses.replace(mixed, compile="off"))
    assert target.compile == draft.compile == "off"


def test_the_shell_script_names_missing_packages_in_one_line_and_installs_nothing(tmp_path):
    root = Path(__file__).resolve().parents[2]
    bare = tmp_path / "bare"  # a Python without torch or transformers: a venv without site packages
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    env = {**os.environ, "PYTHON": str(bare / "bin" / "python")}
    p = subprocess.run(["bash", str(root / "bench" / "gpu_smoke.sh"), "--device", "cpu"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and "lacks the Python packages: torch transformers" in p.stderr, p.stderr


def mode(name, tokens=8, **kw):
    return GS.ModeResult(name, "tiny", 10.0, 9.0, tokens, **kw)


def test_judge_equal_outputs_faults_and_differences():
    same = {"ar": [[1, 2, 3, 4]] * 2, "sd": [[1, 2, 3, 4]] * 2, "ssd": [[1, 2, 3, 4]] * 2}
    modes = [mode("ar"), mode("sd"), mode("ssd")]
    assert GS.judge(same, modes, 4, 2) == ("ok", "AR == SD == SSD")
    diff = {**same, "ssd": [[1, 2, 3, 4], [1, 2, 0, 4]]}
    assert GS.judge(diff, modes, 4, 2) == ("DIFF", "ssd differs from ar on prompt 1 at token 2")
    assert GS.judge(same, [mode("ar"), mode("sd", fallback_rounds=3), mode("ssd")], 4, 2)[0] == "FAIL"
    assert GS.judge(same, [mode("ar", tokens=7), mode("sd"), mode("ssd")], 4, 2)[0] == "FAIL"
    # a side whose CUDA graph captures all failed ran eager: FAIL; some shapes eager (a MoE router, say) is not
    eager = "every CUDA graph capture of the draft failed (3 shapes): it ran eager"
    assert GS.judge(same, [mode("ar"), mode("sd", graph_warnings=[eager]), mode("ssd")], 4, 2) == ("FAIL", f"sd: {eager}")
    some = "2 forward shapes of the target could not be captured in CUDA graphs and ran eager (5 shapes replayed)"
    assert GS.judge(same, [mode("ar", graph_warnings=[some]), mode("sd"), mode("ssd")], 4, 2)[0] == "ok"


def test_table_has_a_row_per_mode_and_one_row_for_a_failed_case():
    ok = GS.CaseResult("tiny 1dev", "ok", "AR == SD == SSD", "nccl", "cuda:0", "cuda:0",
                       [mode("ar"), mode("sd", mean_accept_len=2.5), mode("ssd")], 12.0)
    bad = GS.CaseResult("real 1dev", "FAIL", "WorkerError: the draft process died", "nccl", "cuda:0", "cuda:0")
    lines = GS.format_table([ok, bad], "hdr").splitlines()
    rows = [ln for ln in lines if ln.startswith("| ") and not ln.startswith("| case")]
    assert len(rows) == 4
    assert rows[1].startswith("| tiny 1dev | tiny | cuda:0 | cuda:0 | nccl | sd | 10.0 | 9.0 | 8 | 2.50 | ok |")
    assert "FAIL: WorkerError: the draft process died" in rows[3]
