"""ssd_sim.io.outputs: an output that is an input (any spelling, symlink, hard link, a file of an input folder) or
another output is refused in one line; a claimed output belongs to one process; default names move on."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.outputs import check_outputs, claim_outputs, lock_path

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def d(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trace.jsonl").write_text("{}\n")
    os.link(tmp_path / "trace.jsonl", tmp_path / "hard.jsonl")
    (tmp_path / "sym.jsonl").symlink_to("trace.jsonl")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "sub").mkdir()
    return tmp_path


@pytest.mark.parametrize("output", ["trace.jsonl", "./trace.jsonl", "sub/../trace.jsonl", "hard.jsonl", "sym.jsonl"])
def test_an_output_that_is_an_input_by_any_spelling_or_link_is_refused(d, output):
    with pytest.raises(ConfigError, match=r"^output: .* the traces input of this command: writing it would destroy "
                                          r"that input; give -o another file$"):
        check_outputs({"output": output}, {"traces": ["other.jsonl", "trace.jsonl"]})
    assert (d / "trace.jsonl").read_text() == "{}\n"


def test_the_message_names_the_input_when_the_output_is_spelled_differently(d):
    with pytest.raises(ConfigError) as e:
        check_outputs({"chrome_trace": "hard.jsonl"}, {"replay": "trace.jsonl"})
    assert str(e.value) == ("chrome_trace: hard.jsonl is the same file as trace.jsonl, the replay input of this "
                            "command: writing it would destroy that input; give --chrome-trace another file")


def test_a_file_of_an_input_folder_is_an_input_but_a_new_file_there_is_not(d):
    with pytest.raises(ConfigError, match="the target input"):
        check_outputs({"trace": "model/config.json"}, {"target": "model"})
    assert check_outputs({"trace": "model/new.jsonl"}, {"target": "model"}) == {"trace": Path("model/new.jsonl")}


def test_two_outputs_of_one_command_must_differ(d):
    with pytest.raises(ConfigError, match="^output: ./t.jsonl is also the trace output of this command; give -o"):
        check_outputs({"trace": "t.jsonl", "output": "./t.jsonl"}, {})
    with pytest.raises(ConfigError, match="also the trace output"):
        check_outputs({"trace": "other.jsonl", "output": "hard.jsonl"} | {"trace": "trace.jsonl"}, {})


def test_unrelated_outputs_and_missing_inputs_pass(d):
    got = check_outputs({"output": "new.json", "trace": None}, {"plan": None, "prompts": "missing.jsonl"})
    assert got == {"output": Path("new.json")}


# path collisions generated: every way to spell or link the one input, as one of several outputs
SPELLINGS = st.sampled_from(["trace.jsonl", "./trace.jsonl", "sub/../trace.jsonl", "hard.jsonl", "sym.jsonl",
                             "{d}/trace.jsonl", "{d}/sub/../hard.jsonl"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spelling=SPELLINGS, field=st.sampled_from(["output", "trace", "chrome_trace"]),
       others=st.lists(st.sampled_from(["a.json", "sub/b.json", "new/c.json"]), max_size=2, unique=True))
def test_generated_collisions_are_always_refused_and_never_touch_the_input(d, spelling, field, others):
    outputs = {f"extra{i}": p for i, p in enumerate(others)} | {field: spelling.format(d=d)}
    with pytest.raises(ConfigError, match=f"^{field}: .*the traces input"):
        check_outputs(outputs, {"traces": [d / "trace.jsonl"]})
    assert (d / "trace.jsonl").read_text() == "{}\n"


# ---- claims ------------------------------------------------------------------------------------------------
HOLD = textwrap.dedent("""
    import sys, time
    from ssd_sim.io.outputs import claim_outputs
    with claim_outputs({"trace": sys.argv[1]}):
        print("held", flush=True)
        time.sleep(60)
""")


@pytest.fixture
def held(tmp_path):
    """Another process holding a claim on tmp_path/t.jsonl (killed at the end)."""
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "t.jsonl")], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.stdout.readline().strip() == "held"
    yield tmp_path / "t.jsonl", p
    p.kill()
    p.wait()


def test_an_output_another_process_claims_is_refused_in_one_line(held):
    path, proc = held
    with pytest.raises(ConfigError) as e, claim_outputs({"trace": path}):
        pass
    assert str(e.value) == (f"trace: another run (process {proc.pid}) is writing {path} now; give --trace another "
                            "file or wait for it to finish")


@pytest.mark.skipif(sys.platform == "win32", reason="flock")
def test_a_holder_that_has_not_written_its_pid_yet_is_still_refused_in_one_line(tmp_path):
    # the window between a claim's flock and its pid reaching the lock file: two runs started at once meet there
    path = tmp_path / "t.jsonl"
    hold = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", hold, str(lock_path(path))], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held" and lock_path(path).read_text() == ""
        with pytest.raises(ConfigError) as e, claim_outputs({"trace": path}):
            pass
        assert str(e.value) == (f"trace: another run is writing {path} now; give --trace another file or wait for it "
                                "to finish")
    finally:
        p.kill()
        p.wait()


def test_a_default_name_another_process_claims_moves_on_to_the_next_suffix(held):
    path, _ = held
    with claim_outputs({"trace": path}, unique=["trace"]) as got:
        assert got["trace"] == path.with_name("t-2.jsonl")
        assert lock_path(got["trace"]).exists()
    assert not lock_path(got["trace"]).exists()


def test_a_default_name_never_reuses_an_existing_file(tmp_path):
    (tmp_path / "t.jsonl").write_text("an earlier run\n")
    with claim_outputs({"trace": tmp_path / "t.jsonl"}, unique=["trace"]) as got:
        assert got["trace"] == tmp_path / "t-2.jsonl"


def test_a_killed_holder_leaves_a_lock_file_that_the_next_run_takes_over(held):
    path, proc = held
    proc.kill()
    proc.wait()
    assert lock_path(path).exists()  # SIGKILL: no release, but the kernel dropped the flock
    with claim_outputs({"trace": path}) as got:
        assert got["trace"] == path and lock_path(path).read_text() == f"{os.getpid()}\n"
    assert not lock_path(path).exists()


def test_claims_are_reentrant_in_one_process_and_released_with_the_last(tmp_path):
    path = tmp_path / "t.jsonl"
    with claim_outputs({"trace": path}):
        with claim_outputs({"trace": path}):
            pass
        assert lock_path(path).exists()
    assert list(tmp_path.iterdir()) == []


def test_a_claim_creates_the_output_folder_and_says_when_it_cannot(tmp_path):
    with claim_outputs({"trace": tmp_path / "new" / "t.jsonl"}) as got:
        assert got["trace"].parent.is_dir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="^trace: cannot create the folder"), \
            claim_outputs({"trace": tmp_path / "file" / "t.jsonl"}):
        pass


@pytest.mark.parametrize("output", ["/dev/stdout", "out.txt"])
def test_an_output_that_is_the_file_stdout_goes_to_is_refused_and_the_report_kept(tmp_path, output):
    """`ssd-plan -o /dev/stdout > out.txt` (or `-o out.txt > out.txt`): the plan's atomic rename would swap out.txt
    under the printed report; refused before any work, with out.txt left as the shell made it."""
    code = f"from ssd_sim.cli.plan import main; main(['--preset', 'qwen-coder-1.5b-0.5b-cpu', '-o', {output!r}])"
    with open(tmp_path / "out.txt", "w") as out:
        run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, stdout=out, stderr=subprocess.PIPE, text=True)
    assert run.returncode == 2
    assert run.stderr.strip().endswith("is the file this command's stdout goes to: the report printed there would be "
                                       "lost; give -o another file")
    assert (tmp_path / "out.txt").read_text() == "" and list(tmp_path.iterdir()) == [tmp_path / "out.txt"]
