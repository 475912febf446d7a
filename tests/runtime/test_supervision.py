"""The controller supervises both worker processes from launch, and every way a run can be stopped ends in one line.

Start-up: a draft that dies, fails or hangs while loading ends start-up with one line (WorkerError / ConfigError),
with no worker process left. Mid-run: a draft that dies at the prefill or before the job's first message lets the
job finish autoregressively, exactly. From outside (`ssd-run` in a subprocess): Ctrl-C to the process group or
to the controller, SIGTERM, and a killed target each end within seconds with one line on stderr and status
130 / 143 / 1, no worker left behind, no --output file and a .partial trace of whole, valid lines. A full disk
loses no finished result and leaves no temp file. Generous time bounds only: the machine may be slow and noisy.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import ssd_runtime
from ssd_runtime import transport
from ssd_runtime.hooks import TestHooks
from ssd_runtime.models import tiny_model
from ssd_runtime.run import Job, Session, WorkerError
from ssd_sim.io.errors import ConfigError
from ssd_sim.io.trace import read_trace
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, make_prompts, reference_greedy, spec, target_model

REPO = Path(ssd_runtime.__file__).parent.parent
WORKERS = ("ssd-target", "ssd-draft")  # the names the worker processes give themselves (ps, /proc/PID/comm)
N_NEW = 10
PROMPTS = make_prompts([4, 9, 6], TARGET["vocab"], seed=3)
PLAN = Plan(num_speculative_tokens=2, fan_out=(2, 1, 1), batch_size=1)


def children(pid: int) -> dict[int, str]:
    """{pid: name} of the live (not zombie) descendants of `pid` (the workers are children of the fork server,
    itself a child of the controller; under spawn, of the controller)."""
    procs = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            name = (d / "comm").read_text().strip()
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        procs[int(d.name)] = (int(ppid), state, name)
    out, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for p, (ppid, state, name) in procs.items():
            if ppid == parent and state != "Z" and p not in out:
                out[p] = name
                todo.append(p)
    return out


def alive(pids) -> list[int]:
    """The pids that still run (zombies count as gone)."""
    out = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.append(pid)
    return out


def my_workers() -> list[int]:
    return [pid for pid, name in children(os.getpid()).items() if name in WORKERS]


@pytest.fixture(scope="module")
def reference():
    model = target_model(TARGET)
    return [reference_greedy(model, p, N_NEW)[0] for p in PROMPTS]


# ---- start-up ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind, timeout_s, needle", [("kill", 60.0, "died during start-up (killed by SIGKILL)"),
                                                     ("raise", 60.0, "draft process failed: RuntimeError"),
                                                     ("hang", 1.0, "not ready 1 s after the target")],
                         ids=["kill", "raise", "hang"])
def test_a_draft_that_dies_fails_or_hangs_while_loading_ends_start_up_in_one_line(kind, timeout_s, needle):
    t0 = time.monotonic()
    with pytest.raises(WorkerError) as e:
        Session(spec(TARGET), spec(DRAFT), draft_timeout_s=timeout_s,
                hooks=TestHooks(draft_fault=kind, fault_phase="load"))
    assert needle in str(e.value) and "\n" not in str(e.value)
    assert time.monotonic() - t0 < 60  # not the 30 minutes of a rendezvous timeout
    assert my_workers() == []


def test_truncated_draft_weights_are_bad_input_named_by_the_draft_process(tmp_path):
    from ssd_runtime.models import ModelSpec

    tiny_model(**DRAFT).save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(ConfigError, match="draft: .*model.safetensors is truncated"):
        Session(spec(TARGET), ModelSpec(path=str(tmp_path)))
    assert my_workers() == []


# ---- a draft lost after start-up: exact autoregressive finish -------------------------------------------
def test_a_draft_killed_at_its_prefill_leaves_an_exact_autoregressive_finish(reference):
    with Session(spec(TARGET), spec(DRAFT)) as session:
        res = session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, N_NEW, draft_timeout_s=60.0,
                              hooks=TestHooks(draft_fault="kill", fault_phase="batch", fault_round=1)))
    assert res.outputs == reference
    assert len(res.faults) == 1 and "autoregressively" in res.faults[0]
    assert [r.fallback for r in res.rounds][-1] == "ar"
    assert my_workers() == []


def test_a_draft_that_died_between_jobs_leaves_the_next_job_an_exact_autoregressive_finish(reference, tmp_path):
    with Session(spec(TARGET), spec(DRAFT)) as session:
        os.kill(session.draft_pid, signal.SIGKILL)
        session.dproc.join(10)
        res = session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, N_NEW, trace_path=str(tmp_path / "t.jsonl")))
        assert res.outputs == reference
        assert len(res.faults) == 1 and res.faults[0].startswith("job start: the draft did not take the job")
        tr = read_trace(tmp_path / "t.jsonl")
        assert all(r.fallback == "ar" and r.K == 0 for r in tr.rounds) and list(tr.summary.faults) == res.faults
        with pytest.raises(ConfigError, match="needs the draft process"):
            session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, N_NEW))


def test_prompts_beyond_the_models_context_are_refused_by_the_worker_before_any_work(tmp_path):
    with Session(spec({**TARGET, "max_positions": 48}), spec({**DRAFT, "max_positions": 32})) as session:
        with pytest.raises(ConfigError, match=r"prompt 2 \(9 tokens\) \+ --max-new-tokens 40 = 49 positions, "
                                              r"more than the target's context of 48"):
            session.run(Job(PLAN.replace(mode="ar"), PROMPTS, 40, trace_path=str(tmp_path / "t.jsonl")))
        with pytest.raises(ConfigError, match=r"\+ 5 draft positions ahead \(K = 2\) = 34 positions, more than the "
                                              r"draft's context of 32"):
            session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, 20, trace_path=str(tmp_path / "t.jsonl")))
        assert not list(tmp_path.iterdir())
        assert len(session.run(Job(PLAN.replace(mode="ssd"), PROMPTS, 8)).outputs) == len(PROMPTS)  # the session is still fine


def test_draft_timeout_zero_waits_forever(monkeypatch):
    """0 maps to no timeout in the Session (start-up) and the Job (per message), and a wait without a timeout
    is bounded only by the group's ten-year timeout, not torch's default 30 minutes."""
    from ssd_runtime import cli, run

    assert transport.GROUP_TIMEOUT.days >= 3650
    seen = {}

    class Recorder(Exception):
        pass

    class FakeSession:
        def __init__(self, target, draft, pin=True, draft_timeout_s=120.0):
            seen["session"] = draft_timeout_s

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def run(self, job, advance):
            seen["job"] = job.draft_timeout_s
            raise Recorder()

    monkeypatch.setattr(run, "Session", FakeSession)
    monkeypatch.setattr(cli, "_prepare", lambda args, files: (Plan(), {"prompts": [[1]], "source": "x", "tags": [None]},
                                                              {"target": None, "draft": None}))
    with pytest.raises(Recorder):
        cli.main(["--draft-timeout", "0", "--trace", "unused.jsonl"])
    assert seen == {"session": None, "job": None}


# ---- signals and a killed target, from outside ------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("signals")
    tiny_model(**TARGET, max_positions=8192).save_pretrained(d / "target")
    tiny_model(**DRAFT, max_positions=8192).save_pretrained(d / "draft")
    prompts = make_prompts([5, 8, 6, 7] * 4, TARGET["vocab"], seed=5)
    (d / "prompts.jsonl").write_text("".join(json.dumps({"prompt_ids": p}) + "\n" for p in prompts))
    return d


def start_long_run(d: Path, name: str) -> tuple[subprocess.Popen, dict[int, str]]:
    """`ssd-run` in its own process group on a job of minutes; returns once rounds are in the trace."""
    cmd = [sys.executable, "-m", "ssd_runtime.cli", "--target", str(d / "target"), "--draft", str(d / "draft"),
           "--prompts", str(d / "prompts.jsonl"), "--max-new-tokens", "4000", "--ignore-eos", "-k", "2",
           "--fan-out", "2,1,1", "--no-progress", "--trace", str(d / f"{name}.jsonl"), "-o", str(d / f"{name}.out")]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # SIGINT at its default, as in a terminal's foreground job: a test run started in the background of a
    # non-interactive shell inherits SIGINT ignored (POSIX), and Python keeps an inherited SIG_IGN, so its Ctrl-C
    # would never reach ssd-run (which is right for such a background job, not what this test asks)
    proc = subprocess.Popen(cmd, cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    partial, deadline = d / f"{name}.jsonl.partial", time.monotonic() + 120
    while not (partial.exists() and len(partial.read_text().splitlines()) >= 3):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"ssd-run did not start: {proc.communicate()}")
        time.sleep(0.05)
    workers = {pid: n for pid, n in children(proc.pid).items() if n in WORKERS}
    assert sorted(workers.values()) == sorted(WORKERS)
    return proc, workers


@pytest.mark.parametrize("to, sig, code, needle", [
    ("group", signal.SIGINT, 130, "ssd-run: interrupted (SIGINT); stopped all processes"),
    ("main", signal.SIGINT, 130, "ssd-run: interrupted (SIGINT); stopped all processes"),
    ("main", signal.SIGTERM, 143, "ssd-run: terminated (SIGTERM); stopped all processes"),
    ("ssd-target", signal.SIGKILL, 1, "ssd-run: error: the target process died mid-run (killed by SIGKILL)"),
], ids=["ctrl-c-to-the-group", "sigint-to-the-controller", "sigterm-to-the-controller", "target-killed"])
def test_signals_and_a_killed_target_stop_everything_with_one_line(run_dir, to, sig, code, needle):
    name = f"{to}-{sig.name}"
    proc, workers = start_long_run(run_dir, name)
    t0 = time.monotonic()
    if to == "group":
        os.killpg(proc.pid, sig)
    elif to == "main":
        os.kill(proc.pid, sig)
    else:
        os.kill(next(pid for pid, n in workers.items() if n == to), sig)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    took = time.monotonic() - t0
    err = err.decode()
    assert proc.returncode == code, err
    assert err.count("\n") == 1 and err.startswith(needle) and "Traceback" not in err, err
    assert f"{name}.out not written" in err and f"the trace so far is in {run_dir / name}.jsonl.partial" in err
    assert took < 10, took  # about half a second here; generous for a loaded machine
    deadline = time.monotonic() + 5
    while alive(workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive(workers) == []
    assert not (run_dir / f"{name}.out").exists() and not (run_dir / f"{name}.jsonl").exists()
    assert not list(run_dir.glob(f".{name}*"))  # no temp file
    tr = read_trace(run_dir / f"{name}.jsonl.partial")  # every line whole and valid: a prefix of the trace
    assert tr.summary is None and len(tr.rounds) >= 2


# ---- a full disk ------------------------------------------------------------------------------------------
def test_a_full_disk_loses_no_result_and_leaves_no_temp_file(tmp_path):
    """Under RLIMIT_FSIZE (writes beyond 4 KB fail, as on a full disk): --output falls back to a new file in
    the temp folder, or to stdout; the trace stops at its last whole line and the run goes on."""
    script = textwrap.dedent("""
        import os, resource, sys, tempfile
        from pathlib import Path
        from ssd_runtime.cli import save_outputs
        from ssd_runtime.runlog import TraceOut
        from ssd_sim.io.records import Header, RoundRecord
        from ssd_sim.io.trace import read_trace
        from tests.helpers.trace_samples import EMPTY_SUMMARY
        tempfile.tempdir = sys.argv[2]
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        out = Path(sys.argv[1])
        text = "".join('{"index": %d, "generated_ids": [1, 2, 3]}\\n' % i for i in range(400))
        print("OUTPUT", save_outputs(out / "out.jsonl", text), file=sys.stderr)
        trace = TraceOut(str(out / "t.jsonl"), Header(mode="ar", plan={}, batch_size=1))
        seq = {"seq": 0, "accepted": 0, "bonus": 1, "committed": 1}
        for i in range(200):
            trace.round(RoundRecord.from_json({"round": i, "K": 0, "seqs": [seq], "timings_ms": {"round": 1.0}}, "t"))
        print("TRACE", trace.close(EMPTY_SUMMARY), trace.error, file=sys.stderr)
        print("ROUNDS", len(read_trace(out / "t.jsonl.partial").rounds), file=sys.stderr)
    """)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    tmp.mkdir()
    res = subprocess.run([sys.executable, "-c", script, str(out), str(tmp)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "OUTPUT cannot write" in res.stderr and "the results are printed on stdout instead" in res.stderr
    assert len(res.stdout.splitlines()) == 400 and json.loads(res.stdout.splitlines()[-1])["index"] == 399
    assert "TRACE None cannot write the trace" in res.stderr and "it stops there" in res.stderr
    assert 0 < int(res.stderr.split("ROUNDS ")[1]) < 200
    assert sorted(p.name for p in out.iterdir()) == ["t.jsonl.partial"] and list(tmp.iterdir()) == []


def test_results_that_cannot_be_written_go_to_a_new_file_in_the_temp_folder(tmp_path, monkeypatch):
    import tempfile

    from ssd_runtime import cli

    def full(path, text, field):
        raise ConfigError(field, f"cannot write {path} (No space left on device); nothing was written")

    monkeypatch.setattr(cli, "save_text_atomic", full)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    said = cli.save_outputs(tmp_path / "out.jsonl", '{"index": 0}\n')
    (alt,) = tmp_path.glob("ssd-run-output-*.jsonl")
    assert said == f"cannot write {tmp_path / 'out.jsonl'} (No space left on device); nothing was written; the " \
                   f"results are in {alt} instead"
    assert alt.read_text() == '{"index": 0}\n' and not (tmp_path / "out.jsonl").exists()

