"""Small hand-made profiles for tests of prediction and planning."""

from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve
from ssd_sim.model.latency import ForwardLatency, LatencyModel
from ssd_sim.model.profile import Profile


def flat_profile(verify_ms=10.0, draft_ms=1.0, alpha=0.8, c=0.4, r=0.8):
    """Latencies independent of rows and tokens, no overheads, one hit curve: the paper's assumptions."""
    lat = LatencyModel(ForwardLatency(fixed_ms=verify_ms), ForwardLatency(fixed_ms=draft_ms))
    pt = AcceptancePoint(0.0, (alpha,), HitCurve(c, r), HitCurve(c, r))
    return Profile("flat", lat, AcceptanceModel((pt,)))


def calibrated_profile_file(folder):
    """profile.json in `folder`, calibrated from the shipped AR + SD K = 2, 4 traces of traces/cpu-fp32-splits (timed
    2026-12-01 14:50-15:09 UTC): a profile with both horizons' latency spreads (model.drift)."""
    import json
    from pathlib import Path

    from ssd_sim.model.calibrate import calibrate

    splits = Path(__file__).resolve().parents[2] / "traces" / "cpu-fp32-splits"
    prof, _ = calibrate([splits / f for f in ("ar-b1-t0.jsonl", "sd-k2-b1-t0.jsonl", "sd-k4-b1-t0.jsonl")])
    path = Path(folder) / "profile.json"
    path.write_text(json.dumps(prof.to_dict()))
    return path
