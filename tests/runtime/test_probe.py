"""The probe times every shape of its grid in the runtime's code, both models at once and the transfer; its file
loads into measured tables."""

import datetime
import json
import math

import pytest

from ssd_runtime.cli import main
from ssd_runtime.probe import ProbeGrid
from ssd_runtime.protocol import ProbeCtl as P
from ssd_sim.io.probe import load_probe
from tests.helpers.runtime import DRAFT, TARGET, spec

GRID = ProbeGrid(batch=(1, 2), max_k=3, branch_rows=(1, 2, 4), context=24, repeats=2, temperature=1.0,
                 transfer_k=(1, 3), idle_gaps_ms=(1.0, 10.0))


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    from ssd_runtime.probe import run_probe

    res = run_probe(spec(TARGET), spec(DRAFT), GRID, say=lambda m: None)
    path = tmp_path_factory.mktemp("probe") / "probe.json"
    path.write_text(json.dumps(res.to_dict()))
    return res, path


def test_every_shape_of_the_grid_is_timed_repeats_times(probed):
    res, _ = probed
    assert sorted(res.target) == sorted(GRID.target_shapes()) and len(res.target) == 2 * 4
    assert sorted(res.draft) == sorted(GRID.draft_shapes()) and len(res.draft) == 8 + 3
    assert all(len(v) == 2 and min(v) > 0 for d in (res.target, res.draft) for v in d.values())
    assert sorted(res.transfer) == [(1, 1), (1, 3), (2, 1), (2, 3)]
    assert {"one_row", "rows", "draft"} <= set(res.interference)
    assert res.interference["rows_draft_shape"] == ["tree", 4, 1]
    # every verify shape beside each draft step kind, every draft shape beside each verify shape
    assert len(res.interference["pairs"]) == 2 * 3 + 3 * 3 and all(r > 0 for *_, r in res.interference["pairs"])
    assert list(res.after_idle["target"]["after"]) == [1.0, 10.0]
    assert sorted(res.after_idle["target"]["back"]) == [("append", 1, 2), ("append", 1, 3), ("append", 1, 4)]
    assert sorted(res.after_idle["draft"]["after"][10.0]) == [("append", 1, 1), ("append", 1, 2), ("append", 1, 4)]
    timed = [v for d in res.after_idle.values() for by_shape in (d["back"], *d["after"].values())
             for v in by_shape.values()]
    assert len(timed) == 2 * 3 * 3 and all(len(v) == 2 and min(v) > 0 for v in timed)


def test_the_probe_file_loads_as_tables_of_this_host(probed):
    res, path = probed
    probe = load_probe(path)
    assert set(probe.target) == {(b, t) for b in (1, 2) for t in range(1, 5)}
    assert (4, 1) in probe.draft and probe.context == 24 and probe.temperature == 1.0
    assert probe.host is not None and probe.host.cpu and probe.transfer_ms > 0
    assert probe.models["target"]["label"].startswith("tiny(")
    assert [g for g, _ in probe.after_idle["target"]] == [1.0, 10.0] == [g for g, _ in probe.after_idle["draft"]]
    extra = [ms for role in ("target", "draft") for _, ms in probe.after_idle[role]]
    assert len(extra) == 4 and all(math.isfinite(ms) for ms in extra)  # ms after a sleep over back to back
    # when it ran, for the horizon of a plan's intervals (model.drift): started minutes ago, lasted its wall time
    start = datetime.datetime.fromisoformat(probe.started_at.replace("Z", "+00:00"))
    assert 0 <= (datetime.datetime.now(datetime.UTC) - start).total_seconds() < 3600 and probe.wall_s > 0


def test_the_sleeps_come_before_their_forwards_and_back_to_back_right_after_one():
    from ssd_runtime.probe import _Bench

    events = []

    class Stub(_Bench):
        def __init__(self):
            self.kv = self.tree_kv = None

        def forward(self, shape):
            events.append(("forward", shape))
            return 1.0

    import ssd_runtime.probe as probe

    real_sleep = probe.time.sleep
    probe.time.sleep = lambda s: events.append(("sleep", round(s * 1e3, 3)))
    try:
        out = Stub().after_sleep([("append", 1, 2)], [5.0, 50.0], repeats=1)
    finally:
        probe.time.sleep = real_sleep
    shape = ("append", 1, 2)
    assert events == [("forward", shape), ("sleep", 5.0), ("forward", shape), ("sleep", 50.0), ("forward", shape),
                      ("forward", shape)]
    assert out == {"back": {shape: [1.0]}, "after": {5.0: {shape: [1.0]}, 50.0: {shape: [1.0]}}}


@pytest.mark.parametrize("role", ["target", "draft"])
def test_with_graphs_no_timed_forward_is_a_shapes_first_sighting_or_its_capture(role):
    """The "emulate" graph backend (ssd_runtime.graphs) counts warm-ups as CUDA graphs would: every shape is warmed
    (sighting, capture, a replay) before its first timed sample; one untimed pass would leave the capture timed."""
    from types import SimpleNamespace

    from ssd_runtime.models import tiny_model
    from ssd_runtime.probe import _Bench

    model = tiny_model(**TARGET)
    model._ssd_graphs = "emulate"
    bench = _Bench(SimpleNamespace(model=model, vocab_size=TARGET["vocab"], spec=SimpleNamespace(device="cpu")),
                   GRID, role)
    shapes = GRID.draft_shapes() if role == "draft" else GRID.target_shapes()
    timed_warmups, passes = [], []
    forward, warm = bench.forward, bench.warm

    def counted(shape):
        if passes:  # after warm(): a timed forward
            before = bench._warmups()
            ms = forward(shape)
            timed_warmups.append(bench._warmups() - before)
            return ms
        return forward(shape)

    bench.forward = counted
    bench.warm = lambda s: (warm(s), passes.append(bench._warmups()))
    out = bench.time(shapes, 2)
    assert passes[0] > 0 and len(timed_warmups) == 2 * len(shapes) and not any(timed_warmups)
    assert all(len(v) == 2 for v in out.values())


@pytest.mark.parametrize("flag,value", [("--probe-batch", "2,1"), ("--probe-idle-gaps", "50,5")])
def test_probe_cli_refuses_a_bad_grid_in_one_line(capsys, tmp_path, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["probe", flag, value, "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and flag in err and "ascending" in err
    assert not (tmp_path / "p.json").exists()


class DriftingPair:
    """A probe pair whose timed forwards take `levels` ms in turn (alone, beside, alone, ...), as a host that drifts."""

    def __init__(self, levels):
        self.levels, self.shapes = iter(levels), None

    def send(self, role, cmd, arg=None):
        if cmd == P.TIME:
            self.shapes, self.repeats = arg

    def expect(self, role, kind):
        return {s: [next(self.levels)] * self.repeats for s in self.shapes} if kind == P.TIMES else None


def test_interference_is_timed_against_the_same_shapes_alone_right_before_and_after():
    from ssd_runtime.probe import _bracketed

    shapes = [("append", 1, 2)]
    # the host slows 10 -> 14 ms over the three timings: beside at 12 is no slowdown, the drift is not interference
    assert _bracketed(DriftingPair([10.0, 12.0, 14.0]), "draft", ("tree", 1, 1), "target", shapes, 3) == {
        ("append", 1, 2): pytest.approx(1.0)}
    assert _bracketed(DriftingPair([10.0, 13.2, 14.0]), "draft", ("tree", 1, 1), "target", shapes, 3) == {
        ("append", 1, 2): pytest.approx(1.1)}


def test_a_slowdown_beyond_what_a_probe_file_holds_is_refused_not_written():
    from ssd_runtime.probe import _slowdown

    assert _slowdown({("append", 1, 2): 4.3}) == pytest.approx(3.3)
    assert _slowdown({("append", 1, 2): 0.9}) == 0.0
    with pytest.raises(RuntimeError, match="something else is using these cores"):
        _slowdown({("append", 1, 2): 12.0})


def test_the_summary_of_a_probe_without_batch_1_names_its_smallest_batch(probed, capsys):
    """--probe-batch 2,4 is valid: the summary's transfer line is at b = 2 (it raised 'no median for empty data'
    after the file was written)."""
    from dataclasses import replace

    from ssd_runtime.probe_cli import print_summary

    res = probed[0]
    no_one = replace(res, transfer={k: v for k, v in res.transfer.items() if k[0] != 1})
    print_summary(no_one)
    assert "ms per request + reply at b = 2" in capsys.readouterr().out
