"""ssd_runtime.graphs: static shapes and static buffers leave every output unchanged.

CUDA graphs themselves need a GPU (bench/gpu_check.py measures them there); here the "emulate" backend runs the
same path (bucketed attention width, inputs copied into static buffers, a replay that reads only those buffers)
on the CPU, so a wrong pad, a stale buffer or a mask cached across replays changes tokens.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from ssd_runtime.draft import Drafter
from ssd_runtime.graphs import BUCKET, GraphCache, GraphedFn, bucket, row_bucket
from ssd_runtime.kv import StaticKV
from ssd_runtime.models import decoder_layers, load_model, tiny_model
from ssd_runtime.specs import ModelSpec, tiny_pair
from ssd_runtime.target import Target, TargetConfig
from ssd_runtime.transport import LocalLink
from ssd_sim.io.errors import ConfigError
from ssd_sim.plan.plan import Plan
from tests.helpers.runtime import DRAFT, TARGET, family_params, make_prompts

PROMPTS = make_prompts([3, 11, 6, 8], TARGET["vocab"], seed=0)
N_NEW = 20


def pair(graphs: bool, family: str | None = None) -> tuple[torch.nn.Module, torch.nn.Module]:
    kwargs = tiny_pair(family) if family else (TARGET, DRAFT)
    target, draft = (tiny_model(**kw) for kw in kwargs)
    if graphs:
        target._ssd_graphs = draft._ssd_graphs = "emulate"
    return target, draft


def generate(target, draft, plan: Plan, seed: int = 0, prompts=PROMPTS) -> list[list[int]]:
    link = None
    if plan.mode != "ar":
        link = LocalLink(lambda msg: Drafter(draft, plan, 0, TARGET["vocab"]))
        link.job({})
    return Target(target, TargetConfig(plan, N_NEW, seed=seed), link).generate(prompts)


def test_bucket_rounds_the_width_up_to_a_power_of_two_within_the_capacity():
    assert bucket(1, 4096) == BUCKET
    assert bucket(BUCKET, 4096) == BUCKET
    assert bucket(BUCKET + 1, 4096) == 2 * BUCKET
    assert bucket(600, 4096) == 1024
    assert bucket(130, 200) == 200  # capped at the capacity
    assert bucket(300, 200) == 300  # never narrower than the forward (StaticKV grows first)


def test_row_bucket_rounds_the_rows_up_to_a_power_of_two_within_the_cache():
    assert [row_bucket(n, 8) for n in range(1, 9)] == [1, 2, 4, 4, 8, 8, 8, 8]
    assert row_bucket(5, 6) == 6


PLANS = {
    "ar b=2": Plan(batch_size=2, mode="ar"),
    "sd K=4 b=3": Plan(num_speculative_tokens=4, batch_size=3, mode="sd"),
    "ssd K=3 b=2": Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 1), batch_size=2, mode="ssd", backup="jit"),
    "ssd T=1 b=3": Plan(num_speculative_tokens=3, fan_out=(2, 2, 1, 1), batch_size=3, mode="ssd", backup="jit",
                        temperature=1.0),
    "sd T=0.7 b=4": Plan(num_speculative_tokens=2, batch_size=4, mode="sd", temperature=0.7),
}


@pytest.mark.parametrize("name", PLANS)
def test_replayed_forwards_give_the_tokens_eager_forwards_give(name):
    plan = PLANS[name]
    eager = generate(*pair(False), plan)
    target, draft = pair(True)
    replayed = generate(target, draft, plan)
    assert replayed == eager
    caches = [m._ssd_kv.graphs for m in (target, draft) if hasattr(m, "_ssd_kv")]
    assert caches[0].replays > 0 and caches[0].captures > 0
    if plan.mode != "ar":
        assert len(caches) == 2 and caches[1].replays > 0


@pytest.mark.parametrize("mode", ["sd", "ssd"])
def test_padding_rows_leave_the_real_rows_alone(mode):
    """3 sequences in a batch of 4: every forward runs 4 rows, the 4th sees only its own scratch slot."""
    plan = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 1), batch_size=4, mode=mode, backup="jit",
                temperature=1.0)
    eager = generate(*pair(False), plan, prompts=PROMPTS[:3])
    target, draft = pair(True)
    assert generate(target, draft, plan, prompts=PROMPTS[:3]) == eager
    for model in (target, draft):  # rows finish at different rounds at T = 1: 3 rows run as 4, 1 as 1
        rows = {key.stop for key in model._ssd_kv.graphs.graphs if key.start == 0}  # forwards over rows 0..n-1
        assert 4 in rows and rows <= {1, 2, 4}


def test_widths_move_through_several_buckets_and_the_tokens_stay_the_same(monkeypatch):
    """With 8-slot buckets the tiny contexts (3-11 prompt tokens + 20) run through widths of 32 slots and then the
    capacity (38): each is its own graph, whose extra columns hold stale or zero K/V that must stay masked."""
    from ssd_runtime import graphs

    monkeypatch.setattr(graphs, "BUCKET", 8)
    plan = PLANS["sd K=4 b=3"]
    eager = generate(*pair(False), plan)
    target, draft = pair(True)
    assert generate(target, draft, plan) == eager
    widths = {key.width for key in target._ssd_kv.graphs.graphs}
    assert 32 in widths and len(widths) >= 2, widths


@pytest.mark.parametrize("family", family_params())
def test_every_family_gives_the_same_tokens_replayed(family):
    """Sliding windows (5 tokens, the contexts reach ~30), softcapping, MoE routing; 3 sequences in a batch of 4."""
    plan = Plan(num_speculative_tokens=3, fan_out=(2, 1, 1, 1), batch_size=4, mode="ssd", backup="jit",
                temperature=1.0)
    eager = generate(*pair(False, family), plan, prompts=PROMPTS[:3])
    target, draft = pair(True, family)
    assert generate(target, draft, plan, prompts=PROMPTS[:3]) == eager
    assert target._ssd_kv.graphs.replays > 0 and draft._ssd_kv.graphs.replays > 0


def test_a_second_job_reuses_the_cache_and_its_graphs():
    target, draft = pair(True)
    plan = PLANS["sd K=4 b=3"]
    outputs = [generate(target, draft, plan)]
    kv = target._ssd_kv
    # one-off shapes (the prefill, the refill of row 2) are captured once a later job sees them again: the first
    # job's prefill ran before the buffers existed, the second's is its first sighting, the third captures it
    outputs += [generate(target, draft, plan) for _ in range(2)]
    captured = kv.graphs.captures
    outputs.append(generate(target, draft, plan))
    assert all(o == outputs[0] for o in outputs) and target._ssd_kv is kv
    assert kv.graphs.captures == captured == 5  # 3 verify shapes (b = 3, 2, 1), the refill, the prefill


def test_a_model_without_graphs_gets_a_fresh_cache_per_job():
    model = tiny_model(**TARGET)
    a, b = StaticKV.reuse(model, 2, 64), StaticKV.reuse(model, 2, 64)
    assert a is not b and a.graphs is None


def test_a_shape_is_captured_the_second_time_it_is_seen():
    model = tiny_model(**TARGET)
    model._ssd_graphs = "emulate"
    kv = StaticKV(model, 2, 64)
    kv.add_rows(2)
    kv.append(PROMPTS[:2])  # prefill: allocates the buffers, eager
    kv.append([[5], [6]])
    assert kv.graphs.captures == 0 and kv.graphs.replays == 0
    kv.append([[7], [8]])
    assert kv.graphs.captures == 1 and kv.graphs.replays == 1


def test_growing_the_buffers_drops_every_graph():
    model = tiny_model(**TARGET)
    model._ssd_graphs = "emulate"
    kv = StaticKV(model, 1, 16)
    kv.add_rows(1)
    kv.append([[1, 2, 3]])
    for t in range(3):
        kv.append([[4 + t]])
    assert kv.graphs.graphs
    kv.append([list(range(10, 30))])  # outgrows 16 slots: new buffers
    assert not kv.graphs.graphs and kv.capacity >= 27


def test_a_shape_whose_capture_fails_runs_eager_and_says_why():
    calls = []

    def run(rows, ids, pos, slots, seen, keep, width):
        calls.append(width)
        raise RuntimeError("operation not permitted when stream is capturing")

    cache = GraphCache(run, "emulate")
    model = tiny_model(**TARGET)
    kv = StaticKV(model, 1, 64)
    kv.add_rows(1)
    kv.append([[1, 2, 3]])
    kv.graphs = cache
    kv.append([[4]])  # first sight: eager (the model's own forward, not `run`)
    out = kv.append([[5]])  # second: the capture fails, this forward runs eager
    assert out.shape == (1, 1, TARGET["vocab"])
    assert calls == [64] and cache.graphs == {} and len(cache.failed) == 1
    assert "1 shapes eager (RuntimeError: operation not permitted" in cache.note


@pytest.mark.parametrize("mode", ["cuda-graphs", "inductor-graphs"])
def test_graphs_on_a_cpu_device_are_refused_naming_the_flag(mode):
    spec = dataclasses.replace(ModelSpec.tiny_spec(**TARGET), compile=mode)
    with pytest.raises(ConfigError, match=f"target_compile.*{mode} needs a CUDA device"):
        load_model(spec, "target")


@pytest.mark.parametrize("family", family_params())
def test_the_decoder_layers_are_found_in_every_family(family):
    """inductor-graphs compiles the stack of decoder layers, found by shape, not by the family's attribute name."""
    model = tiny_model(**tiny_pair(family)[0])
    layers = decoder_layers(model)
    assert len(layers) == model.config.get_text_config().num_hidden_layers == 3
    assert [m.layer_idx for layer in layers for m in layer.modules() if hasattr(m, "layer_idx")][:1] == [0]
    params = sum(p.numel() for p in layers.parameters())
    assert params > 0.3 * sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", ["sd K=4 b=3", "ssd T=1 b=3"])
def test_eager_slot_writes_and_masks_give_the_same_tokens(name):
    """Regional compilation runs StaticKV's slot writes and the attention masks eagerly between the compiled parts
    (kv.eager_writer, attention.eager_mask); uncompiled, that path must give exactly the default path's tokens."""
    plan = PLANS[name]
    eager = generate(*pair(False), plan)
    target, draft = pair(True)
    target._ssd_regional = draft._ssd_regional = True
    assert generate(target, draft, plan) == eager
    assert target._ssd_kv._writer.__name__ == "_EagerSlotWriter"


@pytest.mark.slow  # ~1 min of Dynamo and Inductor (C++) on a 2-core host
def test_inductor_compiled_layers_replayed_give_the_eager_tokens_and_share_one_code():
    """inductor-graphs' CPU stand-in: every decoder layer torch.compile'd (compile_forward) under the emulated
    graphs. AR, SD and SSD give the eager tokens, and a model of 6 layers compiles no more graphs than one of 3
    (the layers share the compiled code; a guard on layer_idx would compile each layer apart)."""
    from torch._dynamo.utils import counters

    from ssd_runtime.models import compile_forward

    counts = []
    for layers in (3, 6):
        torch._dynamo.reset()
        counters.clear()
        for name in ("ar b=2", "sd K=4 b=3", "ssd K=3 b=2"):
            plan = PLANS[name]
            kw = [{**k, "layers": layers} for k in (TARGET, DRAFT)]
            eager = generate(*(tiny_model(**k) for k in kw), plan)
            target, draft = (tiny_model(**k) for k in kw)
            for model in (target, draft):
                compile_forward(model, "inductor-graphs", graphs="emulate")
            assert generate(target, draft, plan) == eager, (layers, name)
        counts.append(counters["stats"]["unique_graphs"])
    assert counts[1] <= counts[0], counts


def test_an_unknown_backend_is_refused():
    with pytest.raises(ValueError, match="graph backend"):
        GraphCache(lambda *a: None, "cudnn")


def test_ssd_run_compiles_with_graphs_on_cuda_and_runs_eager_elsewhere_by_default():
    from ssd_runtime.cli import build_parser
    from ssd_runtime.specs import compile_mode

    args = build_parser().parse_args(["--target", "t", "--draft", "d"])
    assert args.target_compile == args.draft_compile == "auto"
    assert compile_mode("auto", "cuda:1") == "cuda-graphs"
    assert compile_mode("auto", "cpu") == "off"
    assert compile_mode("off", "cuda:0") == "off"  # the flag that turns graphs off
    assert compile_mode("reduce-overhead", "cpu") == "reduce-overhead"


def test_host_reads_raise_only_inside_the_block_and_the_old_mode_comes_back(monkeypatch):
    """The sync debug mode that refuses host-reading forwards before a capture (CUDA-only calls, recorded here)."""
    from ssd_runtime import graphs

    modes = ["warn"]
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with pytest.raises(RuntimeError, match="synchronizing"), graphs._host_reads_raise():
        assert modes[-1] == "error"
        raise RuntimeError("called a synchronizing CUDA operation")
    assert modes == ["warn", "error", "warn"]


def _recorded(target, draft, plan: Plan, on_round=None) -> Target:
    """A finished job whose draft (SD / SSD) replies as in ssd-run (a DraftRecorder: ranks, timings, counts);
    `on_round` gets each RoundRecord."""
    from ssd_runtime.draft_trace import DraftRecorder

    link = None
    if plan.mode != "ar":
        link = LocalLink(lambda msg: DraftRecorder(Drafter(draft, plan, 0, TARGET["vocab"])))
        link.job({})
    job = Target(target, TargetConfig(plan, N_NEW), link, on_round=on_round)
    job.generate(PROMPTS)
    return job


def test_the_summary_records_each_sides_graphs_and_none_without_them():
    from ssd_runtime.runlog import graph_counts

    counts = graph_counts(_recorded(*pair(True), PLANS["sd K=4 b=3"]))
    for side in ("graphs_target", "graphs_draft"):
        g = counts[side]
        assert g["graphs"] > 0 and g["replays"] > g["graphs"] and g["eager_shapes"] == 0, (side, g)
    assert graph_counts(_recorded(*pair(False), PLANS["sd K=4 b=3"])) == {"graphs_target": None, "graphs_draft": None}


def test_ssd_run_warns_when_a_sides_captures_fail():
    from types import SimpleNamespace

    from ssd_runtime.runlog import graph_warnings

    def summary(target, draft):  # the two records.Summary fields graph_warnings reads
        return SimpleNamespace(graphs_target=target, graphs_draft=draft)

    ok = {"graphs": 9, "replays": 400, "eager_shapes": 0}
    assert graph_warnings(summary(ok, ok)) == [] and graph_warnings(summary(None, None)) == []
    failed = graph_warnings(summary(ok, {"graphs": 0, "replays": 0, "eager_shapes": 4}))
    assert len(failed) == 1 and failed[0].startswith("every CUDA graph capture of the draft failed (4 shapes): it ran eager")
    some = graph_warnings(summary({"graphs": 5, "replays": 90, "eager_shapes": 2}, None))
    assert some == ["2 forward shapes of the target could not be captured in CUDA graphs and ran eager (5 shapes replayed)"]


def test_the_summary_line_keeps_the_graph_counts_and_older_lines_read_none():
    import json

    from ssd_sim.io.records import Summary, TraceMetrics

    metrics = TraceMetrics(rounds=1, tokens=2, wall_ms=1.0, tok_s=2000.0, mean_accept_len=2.0, acceptance_rate=0.5,
                           hit_rate=None, primary_hit_rate=None, backup_hit_rate=None, tokens_per_round_hit=None,
                           tokens_per_round_miss=None, per_position_acceptance=(0.5,))
    g = {"graphs": 3, "replays": 40, "eager_shapes": 1}
    line = json.loads(json.dumps(Summary.of(metrics, graphs_target=g).to_json()))
    back = Summary.from_json(line, "summary")
    assert back.graphs_target == g and back.graphs_draft is None and back.extra == {}
    older = {k: v for k, v in line.items() if not k.startswith("graphs_")}
    assert Summary.from_json(older, "summary").graphs_target is None


def _rounds(target, draft, plan: Plan) -> list:
    """The RoundRecords of one job as ssd-run records it."""
    rounds = []
    _recorded(target, draft, plan, rounds.append)
    return rounds


@pytest.mark.parametrize("name", ["ar b=2", "sd K=4 b=3", "ssd K=3 b=2"])
def test_rounds_that_warm_a_graph_are_marked_and_a_warm_cache_runs_steady_rounds(name):
    """A shape's first (eager) sighting and its capture fall in the first rounds and where the batch shrinks; once
    every shape is captured (the next job on the same caches: the rounds' shapes all recur within a job) no round is
    warm-up. Without graphs none is."""
    plan = PLANS[name]
    target, draft = pair(True)
    first = _rounds(target, draft, plan)
    warm = [r.round for r in first if r.warmup]
    assert warm[:2] == [0, 1] and len(warm) < len(first), warm  # the verify shape: sighting, then capture
    assert not [r.round for r in _rounds(target, draft, plan) if r.warmup]
    assert not [r for r in _rounds(*pair(False), plan) if r.warmup]


def test_the_drafts_warmups_mark_the_rounds_they_delay():
    """Graphs on the draft only: the target's forwards are all eager, so every mark comes from the draft's replies
    (its decode steps, glue and tree shapes; its prefills of new rows are left out)."""
    target, draft = pair(False)
    draft._ssd_graphs = "emulate"
    rounds = _rounds(target, draft, PLANS["ssd K=3 b=2"])
    warm = [r.round for r in rounds if r.warmup]
    assert warm and warm[0] <= 1 and len(warm) < len(rounds), warm
    target2, draft2 = pair(False)
    assert not [r for r in _rounds(target2, draft2, PLANS["ssd K=3 b=2"]) if r.warmup]


def test_a_forward_over_some_rows_never_writes_a_live_row_beyond_them():
    """The draft's catch-up forward covers rows 0..2 of 4 live ones. Padded to 4 rows like a forward over every
    row, it would replay row 3 with what the graph's last 4-row call left there, overwriting row 3's K/V at slots
    that now hold other tokens (the outputs stay exact, the draft's acceptance would not)."""
    model = tiny_model(**TARGET)
    model._ssd_graphs = "emulate"
    kv = StaticKV(model, 4, 64)
    kv.add_rows(4)
    kv.append([p[:3] for p in PROMPTS])  # every row 3 tokens long
    for _ in range(2):  # the 1-token, 4-row shape: seen, then captured (row 3's token 90 at position 3)
        kv.append([[90]] * 4)
        kv.truncate([3] * 4)
    kv.append([[91, 92]] * 4)  # another shape: row 3 now holds token 91 at position 3 (slot 4)
    kv.truncate([3, 3, 3, 5])
    before = [k[3].clone() for k in kv.keys]
    kv.append([[93]] * 3, rows=range(3))  # 1 token over rows 0..2: the width of the captured 4-row shape
    assert all(torch.equal(k[3], b) for k, b in zip(kv.keys, before, strict=True))
    assert kv.lengths == [4, 4, 4, 5]


def test_a_graphed_function_replays_its_shapes_after_the_second_sighting():
    calls = []

    def fn(x, y, n):
        calls.append(n)
        return torch.cat([x * n, y], dim=-1)

    f = GraphedFn(fn, "emulate")
    x, y = torch.ones(2, 3), torch.zeros(2, 1)
    assert torch.equal(f(x, y, n=2), fn(x, y, n=2)) and not f.graphs  # first sighting: eager
    f(x, y, n=2)  # second: captured
    calls.clear()
    out = f(x + 1, y + 5, n=2)  # replayed on the new inputs, a copy of the graph's output
    assert torch.equal(out, torch.cat([(x + 1) * 2, y + 5], dim=-1)) and calls == [2] and len(f.graphs) == 1
    out.fill_(0)
    assert torch.equal(f(x, y, n=2), fn(x, y, n=2))
    f(x, y, n=3)
    assert len(f.graphs) == 1  # another keyword is another shape, seen once so far


def test_a_graphed_function_whose_capture_fails_stays_eager():
    state = {"n": 0}

    def fn(x):
        state["n"] += 1
        if state["n"] == 2:
            raise RuntimeError("operation not permitted when stream is capturing")
        return x + 1

    f = GraphedFn(fn, "emulate")
    x = torch.ones(3)
    f(x)
    assert torch.equal(f(x), x + 1) and not f.graphs and len(f.failed) == 1
    assert torch.equal(f(x), x + 1) and not f.graphs


@pytest.mark.parametrize("name", ["ssd K=3 b=2", "ssd T=1 b=3"])
def test_the_drafts_bonus_candidates_are_replayed_and_give_the_same_tokens(name):
    plan = PLANS[name]
    eager = generate(*pair(False), plan)
    target, draft = pair(True)
    assert generate(target, draft, plan) == eager
    assert draft._ssd_candidates.graphs and not hasattr(target, "_ssd_candidates")
