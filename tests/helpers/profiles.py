"""Small hand-made profiles for tests of prediction and planning."""

from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.latency import ForwardLatency, LatencyModel
from ssd_sim.model.profile import Profile


def flat_profile(verify_ms=10.0, draft_ms=1.0, alpha=0.8, c=0.4, r=0.8):
    """Latencies independent of rows and tokens, no overheads, one hit curve: the paper's assumptions."""
    lat = LatencyModel(ForwardLatency(fixed_ms=verify_ms), ForwardLatency(fixed_ms=draft_ms))
    pt = AcceptancePoint(0.0, (alpha,), HitCurve(c, r), HitCurve(c, r))
    return Profile("flat", lat, AcceptanceModel((pt,)))
