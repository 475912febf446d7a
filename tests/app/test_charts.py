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
    fig = charts.speedup_heatmap(["0.50", "0.90"], ["0.1", "0.5"], [[0.5, 2.0], [1.5, 3.0]], marker=(1, 0))
    heat = fig.data[0]
    assert heat.zmin == 0.5 and heat.zmax == 3.0
    assert heat.colorscale[1][0] == (1.0 - 0.5) / (3.0 - 0.5)


def test_heatmap_boxes_the_marked_cell_and_prints_its_value():
    fig = charts.speedup_heatmap(["0.50", "profile (0.954)", "0.95"], ["0.1", "0.154", "0.5"],
                                 [[1, 2, 3], [4, 5.1870901, 6], [7, 8, 9]], marker=(1, 1))
    (box,) = fig.layout.shapes
    assert (box.x0, box.x1, box.y0, box.y1) == (0.5, 1.5, 0.5, 1.5)  # the cell at row 1, column 1
    assert fig.data[0].text[1][1] == charts.speedup_text(5.1870901) == "5.19"


def test_batch_axes_are_labelled_at_powers_of_two_only():
    fig = charts.backup_crossover([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], [1.0] * 12, [1.0] * 12, 2.0, 1)
    axis = fig.layout.xaxis
    assert axis.type == "log" and axis.tickmode == "array"
    assert list(axis.tickvals) == [1, 2, 4, 8, 16, 32, 64] and list(axis.ticktext) == ["1", "2", "4", "8", "16", "32",
                                                                                       "64"]


def test_log_tok_s_axes_label_every_tick_in_full():
    assert charts.log_ticks(13.7, 3226) == [20, 50, 100, 200, 500, 1000, 2000]
    assert charts.log_ticks(30, 60) == [30, 40, 50, 60]  # under a decade: 1..9 steps, never fewer than three
    data = {"ar": {"batch_sizes": [1, 64], "per_seq_tok_s": [54.7, 50.4], "tok_s_per_device": [13.7, 806.5],
                   "total_tok_s": [54.7, 3226.1], "K": [0, 0]}}
    axis = charts.pareto(data).layout.xaxis
    assert list(axis.ticktext) == ["20", "50", "100", "200", "500"]
    assert "log scale" in axis.title.text and "tok/s" in axis.title.text


def test_hit_vs_budget_marks_what_fits_beyond_the_budgets_drawn():
    fig = charts.hit_vs_budget([1, 2, 3], [0.5, 0.6, 0.7], [3], [0.6], current=3, fits=177)
    texts = sorted(a.text for a in fig.layout.annotations)
    assert texts == ["fits in one verify: 177", "plan: 3"]
    assert sorted(s.x0 for s in fig.layout.shapes) == [3, 177]
    assert fig.layout.xaxis.range[1] >= 177  # the marked line is on the chart


def test_every_event_kind_has_its_own_colour():
    from ssd_sim.io.records import Phase

    spans = "prefill step draft verify wait request lookup backup reply glue branch".split()  # timeline.Span names
    phases = [p.value for p in Phase if p is not Phase.ROUND and p is not Phase.DRAFT_SD]
    colours = [charts.phase_color(n) for n in spans + phases]
    kinds = {n.removeprefix("draft_").removeprefix("target_") for n in spans + phases}
    assert len(set(colours)) == len(kinds) == len(spans) + 1  # + commit; the trace phases are the spans' kinds
    assert charts.phase_color("request") != charts.phase_color("reply")
    assert charts.phase_color("draft_sd") == charts.phase_color("draft")  # the same event: K sequential draft steps
    assert "#444444" not in colours


def test_gantt_has_a_titled_legend_below_the_axis_title():
    spans = [{"start_ms": 0.0, "dur_ms": 1.0, "device": "draft", "name": n, "round": 0, "rows": 1}
             for n in ("request", "reply")]
    fig = charts.gantt(spans, ["target", "draft"])
    assert fig.layout.legend.title.text == "event" and fig.layout.legend.yref == "container"
    alone = charts.series([0, 1], {"one line": [1.0, 2.0]}, "t", "x", "y")  # no legend: no band for it
    assert fig.layout.margin.b > alone.layout.margin.b  # the x-axis title, then a band for the legend
    assert [t.marker.color for t in fig.data] == [charts.phase_color("request"), charts.phase_color("reply")]


def test_tables_show_a_dash_never_none_or_nan():
    rows = charts.table_rows([{"metric": "tok/s", "predicted": 5.7493, "simulated": None},
                              {"metric": "hit", "predicted": 0.6776, "simulated": float("nan")}, {"metric": "x"}])
    assert [r["predicted"] for r in rows] == ["5.749", "0.6776", "-"]
    assert [r["simulated"] for r in rows] == ["-", "-", "-"]
    assert charts.table_rows([{"a": 1.5}]) == [{"a": 1.5}]  # complete columns stay numbers


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
