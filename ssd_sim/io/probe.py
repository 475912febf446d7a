"""Read a probe file (ssd-probe/1, written by `ssd-run probe` and `ssd-run calibrate-here`) without torch.

The file holds, per role, one row [kind, rows, tokens, median ms, [samples]] per timed shape (kind "append": a
forward of rows x tokens; "tree": one draft tree step of 1 sequence x rows branches, i.e. rows x 1 token), the
slowdowns measured with both models busy, transfer round trips [b, K, median ms, [samples]] and (probes since
2026-12) "after_idle": per role the one-row forwards back to back and after sleeps of a few gaps, which the reader
turns into the extra ms of a forward after each sleep (mean after the sleep - mean back to back, the median over the
shapes): on one Intel Xeon host that extra was about the same for a 200 ms and a 700 ms forward, where a fraction
was not (model.latency).

Each table holds the **mean** of a shape's samples, not the file's median: a run's tok/s is its tokens over the sum of
its forwards, so what it pays per forward is the mean, outliers included (the same reason a calibrated fit is levelled
to the measured total, model.latency.total_level). On the pool probe (5 samples a shape) the mean sits 1-7% above the
median.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.jsonfile import read_json_object
from ssd_sim.io.values import nonfinite_strings, parse_utc

PROBE_SCHEMA = "ssd-probe/1"
# the most a slowdown fraction may be (a forward 11x slower beside the other model): beyond it the host was busy with
# something else, and `ssd-run probe` refuses to write the result rather than write a file this reader refuses
MAX_SLOWDOWN = 10.0
KINDS = ("append", "tree")


@dataclass(frozen=True)
class Probe:
    """A probe's measurements: tables {(rows, tokens): mean ms}, slowdown fractions, transfer ms per (b, K)."""

    path: str
    target: dict[tuple[int, int], float]
    draft: dict[tuple[int, int], float]
    spread: dict[str, float]  # role -> median over shapes of the samples' SD / mean (the table's own noise)
    one_row: float  # the verify's slowdown while the draft decodes one branch row per step
    rows: float  # ... while it decodes several rows per step
    draft_slowdown: float  # the draft's steps and glue beside a verify
    transfer: dict[tuple[int, int], float]  # (b, K) -> mean request + reply (ms)
    context: int
    temperature: float
    host: Host | None
    models: dict
    # role -> ((gap ms, extra ms), ...): a forward right after a sleep of gap ms costs extra ms more than one back to
    # back; empty when the probe did not time it (files before 2026-12)
    after_idle: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    started_at: str = ""  # UTC ISO start; "" in files before 2026-12-03
    wall_s: float = 0.0  # how long the probe ran (s)

    @property
    def transfer_ms(self) -> float:
        """One request + reply at b = 1 (median over the probed K; ms)."""
        one = [ms for (b, _), ms in self.transfer.items() if b == 1] or list(self.transfer.values())
        return float(statistics.median(one)) if one else 0.0

    def max_rows_tokens(self) -> tuple[int, int]:
        """The largest rows x tokens of one probed forward: (target, draft)."""
        return tuple(max(r * t for r, t in tab) for tab in (self.target, self.draft))


def load_probe(path: str | Path) -> Probe:
    """Read and check a probe file; any problem is one ConfigError line naming the field."""
    d = nonfinite_strings(read_json_object(path, "probe", "write one with `ssd-run probe -o FILE`"),
                          ("schema", "host", "models"))  # "inf" is checked like the literal Infinity
    if d.get("schema") != PROBE_SCHEMA:
        raise ConfigError("probe.schema", f"{path}: expected {PROBE_SCHEMA!r}, got {d.get('schema')!r}")
    tables, spread = {}, {}
    for role in ("target", "draft"):
        tables[role], spread[role] = _table(d.get(role), f"probe.{role}", path)
    inter = d.get("interference")
    if not isinstance(inter, dict):
        raise ConfigError("probe.interference", f"{path}: missing; rerun `ssd-run probe`")
    grid = d.get("grid") if isinstance(d.get("grid"), dict) else {}
    return Probe(str(path), tables["target"], tables["draft"], spread,
                 *(_fraction(inter, k, path) for k in ("one_row", "rows", "draft")),
                 transfer=_transfer(d.get("transfer", []), path), context=int(grid.get("context", 0)),
                 temperature=float(grid.get("temperature", 0.0)),
                 host=Host.from_dict(d["host"], "probe.host") if isinstance(d.get("host"), dict) else None,
                 models=d.get("models") if isinstance(d.get("models"), dict) else {},
                 after_idle=_after_idle(d.get("after_idle"), path), started_at=_started_at(d.get("started_at"), path),
                 wall_s=_wall_s(d.get("wall_s"), path))


def _started_at(v, path) -> str:
    """The probe's UTC start (ISO, as trace headers write it); "" when the file does not say."""
    if v in (None, ""):
        return ""
    if not isinstance(v, str) or parse_utc(v) is None:
        raise ConfigError("probe.started_at", f"{path}: must be an ISO UTC time like 2026-12-03T19:00:00Z, got {v!r}")
    return v


def _wall_s(v, path) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ConfigError("probe.wall_s", f"{path}: must be seconds >= 0, got {v!r}")
    return float(v)


def _after_idle(d, path) -> dict[str, tuple[tuple[float, float], ...]]:
    """role -> ((gap ms, extra ms), ...) ascending in gap (module docstring); {} without the section."""
    if d is None:
        return {}
    if not isinstance(d, dict) or set(d) != {"target", "draft"}:
        raise ConfigError("probe.after_idle", f"{path}: must hold 'target' and 'draft'; rerun `ssd-run probe`")
    out = {}
    for role, entry in d.items():
        where = f"probe.after_idle.{role}"
        gaps = entry.get("after_sleep") if isinstance(entry, dict) else None
        if not isinstance(gaps, list) or not gaps or not all(isinstance(g, list) and len(g) == 2 for g in gaps):
            raise ConfigError(where, f"{path}: must hold back_to_back and after_sleep [[gap ms, rows], ...]")
        back, _ = _table(entry.get("back_to_back"), f"{where}.back_to_back", path, at_least=1)
        pairs = []
        for gap, rows in gaps:
            if not _ms(gap):
                raise ConfigError(f"{where}.after_sleep", f"{path}: gap must be a positive number of ms, got {gap!r}")
            after, _ = _table(rows, f"{where}.after_sleep", path, at_least=1)
            if set(after) != set(back):
                raise ConfigError(f"{where}.after_sleep", f"{path}: must time the shapes back_to_back times")
            # any ratio is kept: forwards of a few ms (tiny models) on a loaded host differ by factors from sample
            # to sample, and a bound here would refuse files the probe wrote
            pairs.append((float(gap), idle_extra(back, after)[0]))
        if [g for g, _ in pairs] != sorted({g for g, _ in pairs}):
            raise ConfigError(f"{where}.after_sleep", f"{path}: gaps must be ascending and distinct")
        out[role] = tuple(pairs)
    return out


def idle_extra(back: dict, after: dict) -> tuple[float, float]:
    """(ms, fraction): the median over shapes of (ms after a sleep - ms back to back), and of (after / back) - 1;
    both {shape: mean ms}."""
    return (float(statistics.median(after[s] - back[s] for s in back)),
            float(statistics.median(after[s] / back[s] for s in back)) - 1.0)


def _table(rows, field: str, path, at_least: int = 3) -> tuple[dict[tuple[int, int], float], float]:
    """{(rows, tokens): mean of the pooled samples} (module docstring), and the median over shapes of the samples'
    SD / mean."""
    if not isinstance(rows, list) or len(rows) < at_least:
        raise ConfigError(field, f"{path}: must list at least {at_least} timed shapes; rerun `ssd-run probe`")
    pooled: dict[tuple[int, int], list[float]] = {}
    for i, row in enumerate(rows):
        ok = (isinstance(row, list) and len(row) == 5 and row[0] in KINDS and all(_count(x) for x in row[1:3])
              and isinstance(row[4], list) and row[4] and all(_ms(x) for x in row[4]))
        if not ok:
            raise ConfigError(f"{field}[{i}]", f"{path}: must be [\"append\"|\"tree\", rows, tokens, median ms, "
                                               f"[ms, ...]] with positive finite ms, got {str(row)[:80]}")
        shape = (int(row[1]), int(row[2])) if row[0] == "append" else (int(row[1]) * int(row[2]), 1)
        pooled.setdefault(shape, []).extend(float(x) for x in row[4])
    rel = [statistics.pstdev(v) / statistics.fmean(v) for v in pooled.values() if len(v) >= 2]
    return ({s: float(statistics.fmean(v)) for s, v in pooled.items()},
            float(statistics.median(rel)) if rel else 0.0)


def _fraction(inter: dict, key: str, path) -> float:
    v = inter.get(key)
    if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= MAX_SLOWDOWN):
        raise ConfigError(f"probe.interference.{key}", f"{path}: must be a slowdown fraction in [0, {MAX_SLOWDOWN:g}], "
                                                       f"got {v!r}")
    return float(v)


def _transfer(rows, path) -> dict[tuple[int, int], float]:
    if not isinstance(rows, list):
        raise ConfigError("probe.transfer", f"{path}: must be a list of [b, K, median ms, [ms, ...]]")
    out = {}
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == 4 and _count(row[0]) and _count(row[1]) and _ms(row[2])):
            raise ConfigError(f"probe.transfer[{i}]", f"{path}: must be [b, K, median ms, [ms, ...]], got {str(row)[:80]}")
        samples = row[3] if isinstance(row[3], list) and row[3] and all(_ms(x) for x in row[3]) else [row[2]]
        out[(int(row[0]), int(row[1]))] = float(statistics.fmean(samples))
    return out


def _count(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 1


def _ms(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0
