"""Plotly figure builders. Each takes plain data (lists, dicts) computed by ssd_sim and returns a Figure;
nothing here imports streamlit or computes a model quantity, so the builders test without a browser.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence

import plotly.graph_objects as go

from ssd_sim.io.records import Phase

MODE_COLORS = {"ar": "#7f7f7f", "sd": "#1f77b4", "ssd": "#d62728"}
MODE_NAMES = {"ar": "autoregressive", "sd": "SD", "ssd": "SSD"}
# One colour per event kind: the simulator's span names (ssd_sim.sim.timeline.Span) and the runtime's phases
# (ssd_sim.io.records.Phase, without their draft_ / target_ prefix); no two kinds share a colour.
PHASE_COLORS = {
    "verify": "#1f77b4", "step": "#393b79", "prefill": "#9467bd", "draft": "#17becf",
    "wait": "#c7c7c7", "request": "#bcbd22", "reply": "#7b4173", "lookup": "#8c564b",
    "glue": "#2ca02c", "branch": "#98df8a", "backup": "#ff7f0e", "commit": "#e377c2",
}
PHASE_ALIASES = {"sd": "draft"}  # the runtime's draft_sd is the simulator's draft span (K sequential steps)
# st.plotly_chart(config=CONFIG): the toolbar shows only under the pointer (it covered chart titles), without the
# buttons a what-if reader never needs.
CONFIG = {"displayModeBar": "hover", "displaylogo": False,
          "modeBarButtonsToRemove": ["zoomIn2d", "zoomOut2d", "autoScale2d", "lasso2d", "select2d"]}
_HEIGHT = 330
_LEGEND_PX = 40  # a band at the bottom for the legend, below the tick labels and the x-axis title


def phase_color(name: str) -> str:
    """The colour of an event kind (a span name, or a trace phase such as draft_glue / target_wait)."""
    kind = name.removeprefix("draft_").removeprefix("target_")
    return PHASE_COLORS.get(PHASE_ALIASES.get(kind, kind), "#444444")


def _layout(fig: go.Figure, title: str, x: str, y: str, height: int = _HEIGHT) -> go.Figure:
    """Title, axis titles and size. A legend (two or more named traces) sits at the bottom of the figure, in a band
    of its own below the x-axis title, so it never overlaps the title whatever the chart's height."""
    legend = sum(1 for t in fig.data if t.showlegend is not False and t.name) >= 2
    extra = _LEGEND_PX if legend else 0
    fig.update_layout(title={"text": title, "x": 0.0, "xanchor": "left", "pad": {"l": 8}},
                      xaxis_title=x, yaxis_title=y, height=height + extra,
                      margin={"l": 60, "r": 20, "t": 50, "b": 50 + extra},
                      legend={"orientation": "h", "x": 0.0, "xanchor": "left", "y": 0.0, "yanchor": "bottom",
                              "yref": "container"})
    return fig


def log_ticks(lo: float, hi: float, steps: Sequence[float] = (1, 2, 5)) -> list[float]:
    """Tick values for a log axis over [lo, hi]: each decade times `steps` (1, 2, 5 -> 10, 20, 50, 100, ...), every
    one labelled in full (Plotly's own log ticks label minor ones as bare digits: "2 5 10 2 5"). Falls back to
    1..9 per decade when fewer than three ticks fall inside."""
    if not (lo > 0 and hi >= lo and math.isfinite(hi)):
        return []
    out: list[float] = []
    for grid in (steps, range(1, 10)):
        out = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
               for m in grid if lo <= m * 10.0 ** e <= hi]
        if len(out) >= 3:
            break
    return sorted({float(f"{v:.6g}") for v in out})


def powers_of_two(lo: float, hi: float) -> list[int]:
    """1, 2, 4, 8, ... within [lo, hi] (batch sizes)."""
    return [2**i for i in range(0, 31) if lo <= 2**i <= hi]


def _tick_text(v: float) -> str:
    return f"{v:,.0f}" if v >= 1 else f"{v:g}"


def _log_x(fig: go.Figure, ticks: Sequence[float]) -> None:
    """A log x-axis labelled exactly at `ticks` (full numbers, no minor labels)."""
    fig.update_xaxes(type="log", tickmode="array", tickvals=list(ticks), ticktext=[_tick_text(v) for v in ticks],
                     minor={"showgrid": False, "ticks": ""})


def tok_s_bars(analytic: dict[str, float], simulated: dict[str, float] | None = None,
               intervals: dict[str, tuple[float, float]] | None = None) -> go.Figure:
    """Tok/s per sequence of each mode (analytic, with its prediction interval as error bars when given), with
    simulated bars beside them when given."""
    modes = [m for m in ("ar", "sd", "ssd") if m in analytic]
    err = None
    if intervals:
        err = {"type": "data", "symmetric": False,
               "array": [max(0.0, intervals[m][1] - analytic[m]) for m in modes],
               "arrayminus": [max(0.0, analytic[m] - intervals[m][0]) for m in modes]}
    fig = go.Figure(go.Bar(name="analytic", x=[MODE_NAMES[m] for m in modes], y=[analytic[m] for m in modes],
                           marker_color=[MODE_COLORS[m] for m in modes], text=[f"{analytic[m]:.1f}" for m in modes],
                           textposition="inside", insidetextanchor="start", error_y=err))  # clear of the error bar
    if simulated:
        sim = [m for m in modes if m in simulated]
        fig.add_bar(name="simulated", x=[MODE_NAMES[m] for m in sim], y=[simulated[m] for m in sim],
                    marker_pattern_shape="/", marker_color=[MODE_COLORS[m] for m in sim], opacity=0.6,
                    text=[f"{simulated[m]:.1f}" for m in sim])
    fig.update_layout(barmode="group")
    return _layout(fig, "predicted decoding speed", "decoding mode", "tok/s per sequence")


def fanout_bars(k: Sequence[int], fan_out: Sequence[int], uniform: Sequence[int], p_hit: float,
                p_hit_uniform: float) -> go.Figure:
    """Cached guesses per stopping position k: the plan's fan-out beside the uniform one."""
    fig = go.Figure()
    fig.add_bar(name=f"plan (p_hit {p_hit:.3f})", x=list(k), y=list(fan_out), marker_color="#d62728")
    fig.add_bar(name=f"uniform (p_hit {p_hit_uniform:.3f})", x=list(k), y=list(uniform), marker_color="#aaaaaa")
    fig.update_layout(barmode="group", xaxis={"dtick": 1})
    return _layout(fig, "fan-out F_k per stopping position", "k (draft tokens accepted)", "cached guesses")


def hit_vs_budget(budgets: Sequence[int], optimal: Sequence[float], uniform_budgets: Sequence[int],
                  uniform: Sequence[float], current: int | None = None, fits: int | None = None) -> go.Figure:
    """Hit probability after a cache-served round vs cache budget (guesses per sequence)."""
    fig = go.Figure()
    fig.add_scatter(name="optimal fan-out", x=list(budgets), y=list(optimal), mode="lines", line_color="#d62728")
    fig.add_scatter(name="uniform fan-out", x=list(uniform_budgets), y=list(uniform), mode="lines+markers",
                    line_color="#7f7f7f")
    # Both labels low on the chart (the curves run near the top), each on the side away from the other line.
    plan_right = bool(fits) and current is not None and current > fits
    if fits:
        fig.add_vline(x=fits, line_dash="dot", line_color="#2ca02c", annotation_text=f"fits in one verify: {fits}",
                      annotation_position="bottom left" if plan_right else "bottom right")
    if current:
        fig.add_vline(x=current, line_color="#d62728", annotation_text=f"plan: {current}", annotation_y=0.12,
                      annotation_position="bottom right" if plan_right else "bottom left")
    xs = [*budgets, *uniform_budgets, *(v for v in (fits, current) if v)]
    fig.update_xaxes(range=[0, max(xs) * 1.04] if xs else None)
    fig.update_yaxes(range=[0, 1.02])
    return _layout(fig, "cache hit rate vs budget", "cache budget (guesses per sequence)", "p_hit")


def speedup_heatmap(rows: Sequence[str], cols: Sequence[str], z, baseline: str = "AR",
                    marker: tuple[int, int] | None = None) -> go.Figure:
    """Speedup heatmap over acceptance (rows, labels bottom to top) x draft/target latency ratio (columns).

    marker: (row, column) of the cell to circle; its printed value is z[row][column] (speedup_text), the number a
    caption quotes. Colours: red below 1x (slower than the baseline), white at 1x, blue above.
    """
    z = [[float(v) for v in row] for row in z]
    top = max(max(max(row) for row in z), 1.01)
    low = min(min(min(row) for row in z), 0.99)
    mid = (1.0 - low) / (top - low)
    scale = [[0.0, "#b2182b"], [mid, "#f7f7f7"], [1.0, "#2166ac"]]
    xs, ys = list(cols), list(rows)
    fig = go.Figure(go.Heatmap(
        x=xs, y=ys, z=z, colorscale=scale, zmin=low, zmax=top, text=[[speedup_text(v) for v in row] for row in z],
        texttemplate="%{text}", textfont={"size": 11}, colorbar={"title": {"text": f"x {baseline}"}},
        hovertemplate="acceptance %{y}<br>ratio %{x}<br>speedup %{z:.2f}x<extra></extra>"))
    if marker:
        i, j = marker
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5, xref="x", yref="y",
                      line={"color": "black", "width": 3})
    fig.update_xaxes(type="category", categoryorder="array", categoryarray=xs)
    fig.update_yaxes(type="category", categoryorder="array", categoryarray=ys)
    return _layout(fig, f"SSD speedup over {baseline} (this plan)", "draft / target latency ratio (per step)",
                   "acceptance rate per token", height=380)


def speedup_text(v: float) -> str:
    """How a heatmap cell prints its speedup (and how a caption quotes the circled one)."""
    return f"{v:.2f}"


def backup_crossover(batch_sizes: Sequence[int], jit: Sequence[float], fast: Sequence[float], b_star: float,
                     current: int | None = None) -> go.Figure:
    """SSD tok/s per sequence with the neural (jit) and the fast backup over batch size, with b*.

    The b* and current-batch markers are line traces (vline annotations misplace on log axes)."""
    fig = go.Figure()
    fig.add_scatter(name="jit (neural) backup", x=list(batch_sizes), y=list(jit), mode="lines+markers")
    fig.add_scatter(name="fast (random) backup", x=list(batch_sizes), y=list(fast), mode="lines+markers")
    ys = [v for v in (*jit, *fast) if v is not None and math.isfinite(v)]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if math.isfinite(b_star):
        fig.add_scatter(name=f"b* = {b_star:g}", x=[b_star, b_star], y=[lo, hi], mode="lines",
                        line={"dash": "dash", "color": "black"})
    if current:
        fig.add_scatter(name=f"this batch: {current}", x=[current, current], y=[lo, hi], mode="lines",
                        line={"dash": "dot", "color": "#d62728"})
    _log_x(fig, powers_of_two(min(batch_sizes), max(batch_sizes)) if batch_sizes else [])
    return _layout(fig, "backup crossover over batch size", "batch size (sequences)", "tok/s per sequence")


def pareto(data: dict[str, dict[str, list]], x: str = "tok_s_per_device") -> go.Figure:
    """Per-sequence speed vs throughput per device, one line per mode, points labelled by batch size."""
    fig = go.Figure()
    for mode, row in data.items():
        fig.add_scatter(name=MODE_NAMES.get(mode, mode), x=row[x], y=row["per_seq_tok_s"], mode="lines+markers+text",
                        text=[f"b={b}" for b in row["batch_sizes"]], textposition="top right",
                        line_color=MODE_COLORS.get(mode), customdata=row["K"],
                        hovertemplate="%{text}<br>K=%{customdata}<br>%{x:.1f} tok/s/device<br>"
                                      "%{y:.1f} tok/s/seq<extra></extra>")
    xs = [v for row in data.values() for v in row[x] if v is not None and v > 0]
    _log_x(fig, log_ticks(min(xs), max(xs)) if xs else [])
    title = {"tok_s_per_device": "tok/s per device (all sequences, log scale)",
             "total_tok_s": "total tok/s (all sequences, log scale)"}.get(x, x)
    return _layout(fig, "per-sequence speed vs throughput", title, "tok/s per sequence", height=480)


def capacity_pareto(outcomes: Sequence[dict], best: dict | None, tpot_target: float, cost: str = "gpus") -> go.Figure:
    """Cost (GPUs, or $ per M tokens) vs TPOT at the load of every simulated configuration, one colour per mode,
    filled markers where the targets are met, the cheapest marked with a star, the TPOT target as a line."""
    fig = go.Figure()
    for mode in ("ar", "sd", "ssd"):
        rows = [o for o in outcomes if o["mode"] == mode and o[cost] is not None]
        if not rows:
            continue
        fig.add_scatter(name=MODE_NAMES[mode], x=[o[cost] for o in rows], y=[o["tpot_ms"] for o in rows],
                        mode="markers", marker={"color": MODE_COLORS[mode], "size": 9,
                                                "symbol": ["circle" if o["meets"] else "circle-open" for o in rows]},
                        text=[f"{o['replicas']} x b<={o['max_batch']} {o['backup']}" for o in rows],
                        hovertemplate="%{text}<br>%{x} <br>TPOT %{y:.2f} ms<extra></extra>")
    if best is not None and best[cost] is not None:
        fig.add_scatter(name="cheapest", x=[best[cost]], y=[best["tpot_ms"]], mode="markers",
                        marker={"symbol": "star", "size": 18, "color": MODE_COLORS[best["mode"]],
                                "line": {"width": 1, "color": "black"}}, hoverinfo="skip")
    fig.add_hline(y=tpot_target, line_dash="dot", annotation_text="TPOT target", annotation_position="top left")
    x = "GPUs" if cost == "gpus" else "$ per million output tokens"
    return _layout(fig, "cost vs TPOT at the load (filled: meets every target)", x, "TPOT at the percentile (ms)",
                   height=420)


def gantt(spans: Sequence[dict], devices: Sequence[str], title: str = "simulated pipeline") -> go.Figure:
    """Gantt chart: one row per device, one bar per span {start_ms, dur_ms, device, name, round, rows},
    coloured by phase; `backup` spans mark cache-miss rounds."""
    fig = go.Figure()
    by_phase: dict[str, list[dict]] = {}
    for s in spans:
        by_phase.setdefault(s["name"], []).append(s)
    for phase, group in by_phase.items():
        fig.add_bar(name=phase, orientation="h", y=[s["device"] for s in group], x=[s["dur_ms"] for s in group],
                    base=[s["start_ms"] for s in group], marker_color=phase_color(phase),
                    customdata=[[s["round"], s["rows"]] for s in group],
                    hovertemplate=phase + " %{base:.2f} ms + %{x:.2f} ms<br>round %{customdata[0]}, "
                                          "rows %{customdata[1]}<extra></extra>")
    fig.update_layout(barmode="overlay", bargap=0.25, legend_title_text="event")
    fig.update_yaxes(categoryorder="array", categoryarray=list(reversed(list(devices))))
    return _layout(fig, title, "time (ms)", "", height=160 + 70 * len(devices))


def round_markers(fig: go.Figure, rounds: Sequence[dict], device: str) -> go.Figure:
    """Hit / miss markers {start_ms, hit} above the target row of a Gantt chart."""
    for hit in (True, False):
        pts = [r for r in rounds if r["hit"] is hit]
        if pts:
            fig.add_scatter(name="hit" if hit else "miss", x=[r["start_ms"] for r in pts], y=[device] * len(pts),
                            mode="markers", marker_symbol="triangle-down" if hit else "x",
                            marker_color="#2ca02c" if hit else "#d62728", marker_size=9,
                            hovertemplate=("hit" if hit else "miss") + " %{x:.2f} ms<extra></extra>")
    return fig


def series(x: Sequence[float], ys: dict[str, Sequence[float]], title: str, xl: str, yl: str,
           y_range: tuple[float, float] | None = None) -> go.Figure:
    """Line chart of one or more named series over a shared x."""
    fig = go.Figure()
    for name, y in ys.items():
        fig.add_scatter(name=name, x=list(x), y=[None if _nan(v) else v for v in y], mode="lines")
    if y_range:
        fig.update_yaxes(range=list(y_range))
    return _layout(fig, title, xl, yl)


def position_lines(positions: Sequence[int], ys: dict[str, Sequence[float | None]], title: str, yl: str) -> go.Figure:
    """Per stopping position, one line with markers per source (measured, derived, profile); None = no data."""
    fig = go.Figure()
    for name, y in ys.items():
        if y is not None:
            fig.add_scatter(name=name, x=list(positions)[:len(y)], y=[None if _nan(v) else v for v in y],
                            mode="lines+markers")
    fig.update_yaxes(range=[0, 1.02])
    fig.update_xaxes(dtick=1)
    return _layout(fig, title, "stopping position k", yl)


def _nan(v) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


DRAFT_DEVICE_PHASES = tuple(p.value for p in (Phase.DRAFT_LOOKUP, Phase.DRAFT_BACKUP, Phase.DRAFT_GLUE, Phase.DRAFT_BRANCH))


def stacked_phases(x: Sequence[int], phases: dict[str, Sequence[float]]) -> go.Figure:
    """Per-round ms of each phase, stacked: the target's phases on top, the draft device's below (they
    overlap in time). Phases that are always zero are left out, and so is the draft device's subplot when
    none of its phases ran (an AR trace: no draft)."""
    from plotly.subplots import make_subplots

    shown = {name: y for name, y in phases.items() if any(v for v in y)}
    rows = 2 if any(name in DRAFT_DEVICE_PHASES for name in shown) else 1
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("target device", "draft device")[:rows])
    for name, y in shown.items():
        fig.add_bar(name=name, x=list(x), y=list(y), row=2 if name in DRAFT_DEVICE_PHASES else 1, col=1,
                    marker_color=phase_color(name))
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_yaxes(title_text="ms")
    fig.update_xaxes(title_text="round", row=rows, col=1)
    return _layout(fig, "phase timings per round", "", "ms", height=420 if rows == 2 else 300)


def predicted_vs_measured(rows: Sequence[tuple]) -> go.Figure:
    """Grouped bars per metric: predicted (height 1), measured and, where given, simulated, each
    relative to predicted. rows: (name, predicted, measured[, simulated])."""
    names = ["<br>".join(textwrap.wrap(r[0], 16)) for r in rows]  # upright labels, a few words a line

    def rel(i: int) -> list[float | None]:
        return [(r[i] / r[1]) if (r[1] and len(r) > i and r[i] is not None) else None for r in rows]

    fig = go.Figure()
    fig.add_bar(name="predicted", x=names, y=[1.0] * len(rows), marker_color="#aaaaaa",
                text=[_fmt(r[1]) for r in rows])
    fig.add_bar(name="measured", x=names, y=rel(2), marker_color="#d62728", text=[_fmt(r[2]) for r in rows])
    if any(len(r) > 3 and r[3] is not None for r in rows):
        fig.add_bar(name="simulated", x=names, y=rel(3), marker_color="#1f77b4",
                    text=[_fmt(r[3] if len(r) > 3 else None) for r in rows])
    fig.update_layout(barmode="group")
    fig.update_xaxes(tickangle=0)
    return _layout(fig, "relative to predicted", "metric (bars: each value / the predicted one)", "x predicted")


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def table_rows(rows: Sequence[dict]) -> list[dict]:
    """Rows for st.dataframe that never show "None" or "nan": a column with a missing value (None, nan, or a key a
    row lacks) is shown as text, "-" where the value is missing and numbers to 4 significant digits; complete columns
    keep their values (and sort as numbers)."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    gaps = {c for c in cols if any(_nan(r.get(c)) for r in rows)}
    return [{c: (_cell(r.get(c)) if c in gaps else r[c]) for c in cols} for r in rows]


def _cell(v) -> str:
    if _nan(v):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)
