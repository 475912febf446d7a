"""The golden command set (tests/cli/golden.py) gives byte-identical records: exit status, stdout and written files
of ssd-plan, ssd-sim and calibrate over every preset, fixed knobs, plan files and --json. A record may differ only
where golden.DOCUMENTED_CHANGES says why; re-record with `python -m tests.cli.golden --update`. Decimal numbers compare
within a relative 1e-5 (golden.same_record: a solver's last digits differ between CPU kinds)."""

from __future__ import annotations

import pytest

from tests.cli.golden import COMMANDS, DOCUMENTED_CHANGES, golden_path, run, same_record


def test_the_set_is_large_and_every_record_exists():
    assert len(COMMANDS) >= 40
    assert sorted(p.stem for p in golden_path("x").parent.glob("*.txt")) == sorted(COMMANDS)
    assert set(DOCUMENTED_CHANGES) <= set(COMMANDS)


@pytest.mark.parametrize("cid", list(COMMANDS))
def test_command_output_equals_its_golden_record(cid, tmp_path):
    assert same_record(run(cid, tmp_path), golden_path(cid).read_text()), f"{cid}: output changed ({COMMANDS[cid]})"


def test_records_compare_numbers_within_1e_5_and_text_exactly():
    assert same_record('"x": 3.2841840716674064,', '"x": 3.2841833780441836,')  # 2e-7 apart
    assert not same_record('"x": 3.2841,', '"x": 3.2851,')
    assert not same_record("b*=3; closed form 1.51", "b*=2; closed form 1.51")
