"""bench/trace_grid.py's interleaving: chunks of a run's prompts, run across the grid, merged into one trace."""

import json
from pathlib import Path

import pytest

from ssd_runtime.prompts import load_prompts, prompt_set
from ssd_sim.io.trace import read_trace, summarize
from ssd_sim.plan.plan import Plan
from tests.helpers.bench import load_bench
from tests.helpers.synthetic_traces import stalled_trace, write_trace

GRID = load_bench("trace_grid")


def test_chunks_cover_the_prompts_in_order_nearly_evenly():
    assert GRID.chunks(10, 4) == [range(0, 3), range(3, 6), range(6, 8), range(8, 10)]
    assert GRID.chunks(3, 5) == [range(0, 1), range(1, 2), range(2, 3)]  # never an empty chunk
    assert [len(c) for c in GRID.chunks(48, 12)] == [4] * 12


def test_merged_chunks_are_one_run_in_prompt_order(tmp_path):
    plan = Plan(mode="sd", num_speculative_tokens=2, batch_size=1)
    parts = [(write_trace(tmp_path / f"c{i}.jsonl", plan, rounds=40, seed=i, header={"chunk": i}), i)
             for i in range(3)]
    merged = tmp_path / "run.jsonl"
    GRID.merge_chunks(parts, merged, {"prompt_source": "prompt-set:pool", "request_tags": ["code", "code", "chat"]})
    run = read_trace(merged)
    assert run.summary is None and "chunk" not in run.header.extra
    assert run.header.request_tags == ("code", "code", "chat") and run.tag(2) == "chat"
    assert [r.round for r in run.rounds] == list(range(120))
    assert [r.seqs[0].seq for r in run.rounds] == [0] * 40 + [1] * 40 + [2] * 40
    for path, seq in parts:  # each chunk is the merged run cut to its request, round for round
        alone, cut = summarize(read_trace(path)), summarize(run.only_requests([seq]))
        assert (cut.tokens, cut.rounds) == (alone.tokens, alone.rounds)
        assert cut.tok_s == pytest.approx(alone.tok_s)
    assert json.loads(merged.read_text().splitlines()[0])["num_prompts"] == 3


def test_a_runs_line_is_followed_by_a_warning_when_its_rounds_stalled(tmp_path, capsys):
    summaries, plan = {}, Plan(mode="sd", num_speculative_tokens=2)
    for name, factor in (("stalled", 20.0), ("steady", 4.5)):
        t = stalled_trace(tmp_path / f"{name}.jsonl", factor)
        GRID.record(summaries, tmp_path, {"name": name}, plan, "sd", summarize(t), 1.0, t.rounds)
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == ["stalled", "warning:", "steady"]
    assert out[1].startswith("  warning: stalled: 1 of 40 rounds stalled")
    assert set(json.loads((tmp_path / "grid.json").read_text())) == {"stalled", "steady"}


def test_a_grid_reads_a_users_prompt_file_with_its_tags_and_labels_it_as_ssd_run_does(tmp_path):
    f = tmp_path / "mine.jsonl"
    f.write_text("".join(json.dumps({"prompt_ids": [i, i + 1], "tag": tag}) + "\n"
                         for i, tag in enumerate(["code", "chat", "chat", "code"])))
    grid = {"prompts_file": str(f), "num_prompts": 2}
    ids, label, tags = GRID.run_prompts(grid, {"name": "r", "prompt_offset": 1}, None)
    assert ids == [[1, 2], [2, 3]] and tags == ["chat", "chat"] and label == f"{f}[1:3]"
    ids, label, tags = GRID.run_prompts({**grid, "num_prompts": 4}, {"name": "r"}, None)
    assert len(ids) == 4 and label == str(f) and tags == ["code", "chat", "chat", "code"]
    with pytest.raises(SystemExit, match="r: prompts 3..5 but .*mine.jsonl has 4"):
        GRID.run_prompts(grid, {"name": "r", "prompt_offset": 3, "prompt_stride": 2}, None)


def test_the_mixed192_prompt_file_is_fresh96_then_pool96_within_each_class():
    """bench/prompts/mixed192.jsonl (traces/cpu-fp32-zen4-mixed192): fresh96's code prompts, pool96's, then both
    sets' chat prompts in the same order, tags kept, no prompt twice; code holds requests 0-95, chat 96-191."""
    prompts = Path(__file__).resolve().parents[2] / "bench" / "prompts"
    fresh, pool = load_prompts(prompts / "fresh96.jsonl"), prompt_set("pool96")
    mixed = load_prompts(prompts / "mixed192.jsonl")
    expected = [p for tag in ("code", "chat") for src in (fresh, pool) for p in src if p.tag == tag]
    assert [(p.text, p.tag) for p in mixed] == [(p.text, p.tag) for p in expected]
    assert len({p.text for p in mixed}) == 192 and [p.tag for p in mixed] == ["code"] * 96 + ["chat"] * 96
