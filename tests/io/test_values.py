"""io.values: infinity is one value however it is spelled, on the command line and in JSON files."""

from __future__ import annotations

import argparse
import math

import pytest

from ssd_sim.io.values import (
    bounded_int,
    means_infinity,
    nonfinite_strings,
    nonneg_float,
    positive_int,
    threshold_arg,
    unit_float,
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
