"""ssd_sim.sim.timeline: one row per simulated round from the span list."""

from ssd_sim.sim.timeline import Span, timeline_rounds


def test_timeline_rounds_marks_backup_rounds_as_misses():
    spans = [Span(0.0, 1.0, "draft", "backup", 0, 2), Span(0.5, 10.0, "target", "verify", 0, 2),
             Span(11.0, 10.0, "target", "verify", 1, 2), Span(10.0, 0.1, "draft", "lookup", 1, 2)]
    assert timeline_rounds(spans) == [
        {"round": 0, "start_ms": 0.5, "hit": False, "missed_rows": 2},
        {"round": 1, "start_ms": 11.0, "hit": True, "missed_rows": 0}]
