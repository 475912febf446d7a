"""app.charts: figure builders from plain data (no streamlit needed)."""

from __future__ import annotations

import math

from app import charts


def test_tok_s_bars_with_and_without_simulation():
    fig = charts.tok_s_bars({"ar": 50.0, "sd": 100.0, "ssd": 150.0})
    assert list(fig.data[0].y) == [50.0, 100.0, 150.0] and len(fig.data) == 1
    fig = charts.tok_s_bars({"ar": 50.0, "sd": 100.0, "ssd": 150.0}, {"ssd": 149.0})
    assert list(fig.data[1].y) == [149.0]


def test_heatmap_colours_put_white_at_one():
    fig = charts.speedup_heatmap([0.5, 0.9], [0.1, 0.5], [[0.5, 2.0], [1.5, 3.0]], marker=(0.88, 0.12))
    heat = fig.data[0]
    assert heat.zmin == 0.5 and heat.zmax == 3.0
    assert heat.colorscale[1][0] == (1.0 - 0.5) / (3.0 - 0.5)
    assert fig.data[1].x == ("0.1",) and fig.data[1].y == ("0.90",)


def test_backup_crossover_marks_b_star_and_batch():
    fig = charts.backup_crossover([1, 2, 4], [10.0, 8.0, 5.0], [9.0, 8.5, 6.0], 2.0, 4)
    names = [t.name for t in fig.data]
    assert names == ["jit (neural) backup", "fast (random) backup", "b* = 2", "this batch: 4"]
    assert charts.backup_crossover([1, 2], [2.0, 1.0], [1.0, 0.5], math.inf).data[-1].name.startswith("fast")


def test_gantt_one_trace_per_phase_with_base():
    spans = [{"start_ms": 0.0, "dur_ms": 2.0, "device": "target", "name": "verify", "round": 0, "rows": 1},
             {"start_ms": 2.0, "dur_ms": 2.0, "device": "target", "name": "verify", "round": 1, "rows": 1},
             {"start_ms": 0.0, "dur_ms": 1.0, "device": "draft", "name": "backup", "round": 0, "rows": 1}]
    fig = charts.gantt(spans, ["target", "draft"])
    assert [t.name for t in fig.data] == ["verify", "backup"]
    assert list(fig.data[0].base) == [0.0, 2.0] and list(fig.data[0].x) == [2.0, 2.0]
    charts.round_markers(fig, [{"start_ms": 0.0, "hit": False}, {"start_ms": 2.0, "hit": True}], "target")
    assert [t.name for t in fig.data[2:]] == ["hit", "miss"]


def test_series_and_phases_drop_nan_and_zero():
    fig = charts.series([0, 1], {"a": [float("nan"), 0.5]}, "t", "x", "y", (0, 1))
    assert list(fig.data[0].y) == [None, 0.5]
    fig = charts.stacked_phases([0, 1], {"verify": [1.0, 1.0], "draft_sd": [0.0, 0.0]})
    assert [t.name for t in fig.data] == ["verify"] and fig.data[0].yaxis == "y"
    fig = charts.stacked_phases([0], {"verify": [1.0], "draft_glue": [2.0]})
    assert [t.yaxis for t in fig.data] == ["y", "y2"]


def test_predicted_vs_measured_relative_heights():
    fig = charts.predicted_vs_measured([("tok/s", 100.0, 90.0), ("hit", 0.5, None)])
    assert list(fig.data[1].y) == [0.9, None]
