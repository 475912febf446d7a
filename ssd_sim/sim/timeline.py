"""The simulated timeline: spans per device, and their export as Chrome / Perfetto trace-event JSON.

A span is one phase on one device: target prefill / step / draft / verify / wait, draft wait / prefill /
request / lookup / backup / reply / glue / branch. The JSON opens in ui.perfetto.dev and
chrome://tracing: one "X" (complete) event per span with ts / dur in microseconds, one process per
device named by "M" (metadata) events. `timeline_rounds` condenses the spans to one row per round.
"""

from __future__ import annotations

import json
from typing import NamedTuple


class Span(NamedTuple):
    """One phase on one device. Times in ms from the start of the run."""

    start_ms: float
    dur_ms: float
    device: str  # "target", "draft" ("draft0", "draft1", ... with several draft devices)
    name: str  # prefill | step | draft | verify | wait | request | lookup | backup | reply | glue | branch
    round: int  # decode round (-1 outside rounds: prefill, idle)
    rows: int  # sequences (branch: branch rows) the phase processes

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.dur_ms


def sort_spans(spans: list[Span], devices: list[str]) -> list[Span]:
    """Spans in time order; ties broken by device order, then recording order (stable)."""
    rank = {d: i for i, d in enumerate(devices)}
    return sorted(spans, key=lambda s: (s.start_ms, rank.get(s.device, len(rank))))


def event_log(spans: list[Span], devices: list[str], ndigits: int = 6) -> list[tuple[float, str, str]]:
    """(time ms, device, phase) of every span start, in time order: the run as a readable event log."""
    return [(round(float(s.start_ms), ndigits), s.device, s.name) for s in sort_spans(spans, devices)]


def chrome_trace(spans: list[Span], devices: list[str], labels: dict[str, str] | None = None,
                 metadata: dict | None = None) -> dict:
    """Chrome trace-event JSON object ({"traceEvents": [...]}) of a timeline."""
    labels = labels or {}
    pid = {d: i + 1 for i, d in enumerate(devices)}
    events: list[dict] = []
    for d in devices:
        events.append({"name": "process_name", "ph": "M", "pid": pid[d], "tid": 0,
                       "args": {"name": labels.get(d, d)}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid[d], "tid": 0,
                       "args": {"sort_index": pid[d]}})
        events.append({"name": "thread_name", "ph": "M", "pid": pid[d], "tid": 0, "args": {"name": d}})
    for s in sort_spans(spans, devices):
        events.append({"name": s.name, "cat": s.device, "ph": "X", "pid": pid[s.device], "tid": 0,
                       "ts": round(s.start_ms * 1e3, 3), "dur": round(s.dur_ms * 1e3, 3),
                       "args": {"round": s.round, "rows": s.rows}})
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": metadata or {}}


def chrome_trace_json(trace: dict) -> str:
    return json.dumps(trace, separators=(",", ":"))


def timeline_rounds(spans: list[Span], target: str = "target") -> list[dict]:
    """Per decode round of a simulated timeline: when the target's
    verify started (ms), whether every sequence hit (no `backup` span that round) and the missed rows."""
    verify_at: dict[int, float] = {}
    missed: dict[int, int] = {}
    for s in spans:
        if s.round < 0:
            continue
        if s.device == target and s.name == "verify":
            verify_at.setdefault(s.round, s.start_ms)
        elif s.name == "backup":
            missed[s.round] = missed.get(s.round, 0) + s.rows
    return [{"round": r, "start_ms": t, "hit": r not in missed, "missed_rows": missed.get(r, 0)}
            for r, t in sorted(verify_at.items())]
