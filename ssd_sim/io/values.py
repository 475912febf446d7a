"""Command-line values: text -> number, list or enum, with a one-line argparse error naming what was expected.

The knob schema (ssd_sim.plan.plan) names these as the parsers of its flags; every CLI's other flags use them too.
Infinity is one value however it is spelled: every text Python's float() reads as infinite ('inf', 'Infinity',
'+INF', '1e999') parses alike, where a flag takes it (threshold_arg) and in the one refusal where it does not; JSON
files get the same through nonfinite_strings (a string spelling of inf or nan reads as the number it spells).
"""

from __future__ import annotations

import argparse
import datetime
import math
from collections.abc import Collection, Hashable, Iterable
from typing import Any

from ssd_sim.io.limits import MAX_BUDGET

NEVER = ("never", "none")  # threshold_arg: spellings of "no threshold" besides infinity


def fan_out_arg(text: str) -> int | tuple[int, ...]:
    """'3' -> 3 (uniform, per position); '4,3,3,2' -> (4, 3, 3, 2) (one per position 0..K)."""
    parts = text.replace(" ", "").split(",")
    if len(text) > 4096 or any(p == "" for p in parts):
        raise argparse.ArgumentTypeError(
            f"invalid fan-out {text[:40]!r}: give an integer (uniform) or a comma list like 4,3,3,2 (no empty entries)")
    try:
        vals = [int(v) for v in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid fan-out {text[:40]!r}: give an integer (uniform) or a comma list like 4,3,3,2") from None
    if any(v < 0 for v in vals):
        raise argparse.ArgumentTypeError(f"invalid fan-out {text!r}: entries must be integers >= 0")
    if any(v > MAX_BUDGET for v in vals):
        raise argparse.ArgumentTypeError(f"invalid fan-out {text[:40]!r}: at most {MAX_BUDGET} guesses per sequence "
                                         "and round in all")
    return vals[0] if len(vals) == 1 and "," not in text else tuple(vals)


def fan_out_list_arg(text: str) -> tuple[int, ...]:
    v = fan_out_arg(text)
    return (v,) if isinstance(v, int) else v


def int_list(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4): positive integers, ascending, no repeats."""
    try:
        vals = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None
    if not vals or any(v < 1 for v in vals) or list(vals) != sorted(set(vals)):
        raise argparse.ArgumentTypeError(f"{text!r} must list integers >= 1 in ascending order, each once")
    return vals


def _number(text: str, cast, kind: str):
    if len(text) > 64:
        raise argparse.ArgumentTypeError(f"invalid {kind} {text[:20]}... ({len(text)} characters)")
    try:
        return cast(text)
    except ValueError:
        v = _float_or_none(text)
        if v is not None and not math.isfinite(v):  # one message for inf, Infinity, +INF, 1e999, NaN ...
            raise argparse.ArgumentTypeError(f"invalid {kind} {v} (give a finite whole number)") from None
        hint = " (write it out as an integer)" if cast is int and v is not None else ""
        raise argparse.ArgumentTypeError(f"invalid {kind} {text!r}{hint}") from None


def _float_or_none(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def nonfinite_strings(data: Any, text_keys: Collection[str] = ()) -> Any:
    """JSON data with every string spelling of a non-finite number ('inf', 'Infinity', '+inf', '1e999', 'nan') as
    that float, so a file's "inf" is checked (accepted or refused) exactly as its literal Infinity; the values of
    `text_keys` (names, descriptions) stay as written. Other values are returned unchanged."""
    if isinstance(data, dict):
        return {k: v if k in text_keys else nonfinite_strings(v, text_keys) for k, v in data.items()}
    if isinstance(data, list):
        return [nonfinite_strings(v, text_keys) for v in data]
    if isinstance(data, str) and len(data) <= 64:
        v = _float_or_none(data)
        if v is not None and not math.isfinite(v):
            return v
    return data


def unit_float(text: str) -> float:
    v = _number(text, float, "number")
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{v} is outside [0, 1]")
    return v


def positive_int(text: str) -> int:
    v = _number(text, int, "integer")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be >= 1")
    return v


def bounded_int(lo: int, hi: int, what: str):
    """An argparse type: an integer in lo..hi; the error states the range and what the number counts."""

    def parse(text: str) -> int:
        v = _number(text, int, "integer")
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{v} is outside {lo}..{hi} ({what})")
        return v

    parse.__name__ = f"integer in {lo}..{hi}"
    return parse


def nonneg_int(text: str) -> int:
    v = _number(text, int, "integer")
    if v < 0:
        raise argparse.ArgumentTypeError(f"{v} must be >= 0")
    return v


def nonneg_float(text: str) -> float:
    v = _number(text, float, "number")
    if not (v >= 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"{v} must be a finite number >= 0")
    return v


def means_infinity(text: str) -> bool:
    """Whether text spells +infinity as float() reads it: 'inf', 'Infinity', '+INF', ' inf', '1e999'."""
    return len(text) <= 64 and _float_or_none(text) == math.inf


def threshold_arg(text: str) -> float:
    """A batch size >= 1, or no threshold: any spelling of +infinity, 'never' or 'none'."""
    if text.strip().lower() in NEVER or means_infinity(text):
        return math.inf
    v = nonneg_float(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be a batch size >= 1 (or 'inf')")
    return v


def first_repeat(items: Iterable[Hashable]) -> Hashable | None:
    """The first item that appears a second time (None when each appears once): what a "given twice" error names."""
    seen: set[Hashable] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None


def parse_utc(text) -> datetime.datetime | None:
    """An ISO time as the runtime writes it (2026-12-03T19:00:00Z) as an aware UTC datetime; None if it is not one."""
    try:
        stamp = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.UTC)


def utc_text(stamp: datetime.datetime) -> str:
    """A datetime as the runtime writes times (UTC, seconds, Z)."""
    return stamp.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def utc_now() -> str:
    """Now, as the runtime writes times (trace headers' started_at, probes' started_at)."""
    return utc_text(datetime.datetime.now(datetime.UTC))
