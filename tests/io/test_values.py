"""io.values: infinity is one value however it is spelled, on the command line and in JSON files."""

from __future__ import annotations

import argparse
import datetime
import math

import pytest

from ssd_sim.io.values import (
    bounded_int,
    means_infinity,
    nonfinite_strings,
    nonneg_float,
    parse_utc,
    positive_int,
    threshold_arg,
    unit_float,
    utc_text,
)

INFINITY = ["inf", "Infinity", "infinity", "INF", "+inf", "+Infinity", " inf ", "1e999"]


@pytest.mark.parametrize("text", INFINITY + ["never", "none", "Never"])
def test_every_spelling_of_infinity_is_no_backup_threshold(text):
    assert threshold_arg(text) == math.inf


@pytest.mark.parametrize("parse", [nonneg_float, unit_float, positive_int, bounded_int(1, 64, "draft tokens")])
def test_every_spelling_of_infinity_is_refused_with_one_message(parse):
    messages = set()
    for text in INFINITY:
        with pytest.raises(argparse.ArgumentTypeError) as e:
            parse(text)
        messages.add(str(e.value))
    assert len(messages) == 1, messages
    assert messages.pop() in ("inf must be a finite number >= 0", "inf is outside [0, 1]",
                              "invalid integer inf (give a finite whole number)")


def test_minus_infinity_and_nan_are_refused_as_thresholds():
    for text in ("-inf", "-Infinity", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a finite number >= 0"):
            threshold_arg(text)
    assert not means_infinity("-inf") and not means_infinity("9" * 400)  # too long to be a spelling


def test_json_strings_spelling_infinity_read_as_the_number_and_text_keys_stay():
    data = {"name": "inf", "a": "Infinity", "b": ["+inf", "-INF", "x", 3], "c": {"d": "1e999", "e": "nan"}}
    out = nonfinite_strings(data, ("name",))
    assert out["name"] == "inf" and out["a"] == math.inf and out["b"][:1] == [math.inf] and out["b"][2:] == ["x", 3]
    assert out["b"][1] == -math.inf and out["c"]["d"] == math.inf and math.isnan(out["c"]["e"])


def test_utc_times_read_as_the_runtime_writes_them_and_anything_else_is_none():
    stamp = parse_utc("2026-12-03T19:00:00Z")
    assert stamp == datetime.datetime(2026, 12, 3, 19, tzinfo=datetime.UTC) and utc_text(stamp) == "2026-12-03T19:00:00Z"
    assert parse_utc("2026-12-03T19:00:00") == stamp  # no zone: UTC, as the runtime means it
    assert utc_text(parse_utc("2026-12-03T20:30:00+01:30")) == "2026-12-03T19:00:00Z"
    assert [parse_utc(x) for x in ("", "noon", None, 3)] == [None] * 4
