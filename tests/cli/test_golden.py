"""The golden command set (tests/cli/golden.py) gives byte-identical records: exit status, stdout and written files
of ssd-plan, ssd-sim and calibrate over every preset, fixed knobs, plan files and --json. A record may differ only
where golden.DOCUMENTED_CHANGES says why; re-record with `python -m tests.cli.golden --update`."""

from __future__ import annotations

import pytest

from tests.cli.golden import COMMANDS, DOCUMENTED_CHANGES, golden_path, run


def test_the_set_is_large_and_every_record_exists():
    assert len(COMMANDS) >= 40
    assert sorted(p.stem for p in golden_path("x").parent.glob("*.txt")) == sorted(COMMANDS)
    assert set(DOCUMENTED_CHANGES) <= set(COMMANDS)


@pytest.mark.parametrize("cid", list(COMMANDS))
def test_command_output_equals_its_golden_record(cid, tmp_path):
    assert run(cid, tmp_path) == golden_path(cid).read_text(), f"{cid}: output changed ({COMMANDS[cid]})"
