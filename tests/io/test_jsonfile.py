"""The input layer turns every malformed file into one ConfigError line; the writers never leave half a file."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import (
    MAX_JSON_DEPTH,
    AtomicWriter,
    check_writable,
    parse_json,
    read_json_object,
    read_text_file,
    save_json_atomic,
)


@pytest.mark.parametrize("content,needle", [
    (b"\x00\x01binary", "is a binary file"),
    ('{"a": 1}'.encode("utf-16"), "is UTF-16; save it as plain UTF-8"),
    (b"\xef\xbb\xbf{}", "UTF-8 with a byte-order mark"),
    (b"\xff\xfe\xfd not utf8", "UTF-16"),
    (b"caf\xe9", "is not a text file (byte 3 is not UTF-8)"),
    (b"[" * 100_000 + b"]" * 100_000, f"more than the {MAX_JSON_DEPTH} our files use"),
    (b'{"k": ' + b"9" * 5000 + b"}", "holds a value Python will not parse (Exceeds the limit (4300 digits)"),
    (b"", "is not valid JSON (line 1: Expecting value)"),
    (b"[1, 2]", "must hold a JSON object"),
    (b'{"fan_out": [1, 1], "k": {"a": 1, "a": 2}}', "gives the key 'a' twice in one object; keep one"),
])
def test_malformed_json_files_are_one_line_errors_naming_the_file(tmp_path, content, needle):
    p = tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        read_json_object(p, "plan file", "make one")
    msg = str(e.value)
    assert msg.startswith(f"plan file: {p}") and needle in msg and "\n" not in msg


def test_folders_devices_missing_and_oversized_files_are_refused(tmp_path):
    cases = [(tmp_path, "is a folder"), ("/dev/null", "is not a regular file"),
             (tmp_path / "nope.json", "does not exist; make one")]
    for path, needle in cases:
        with pytest.raises(ConfigError, match=needle):
            read_text_file(path, "trace", "make one")
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (2 * 2**20))
    with pytest.raises(ConfigError, match=r"is 2 MB, more than the 1 MB read at most"):
        read_text_file(big, "trace", "make one", max_mb=1)


def test_deep_but_legal_json_still_parses():
    assert parse_json("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, "x") is not None
    assert parse_json('{"s": "[[[[' + "[" * 500 + '"}', "x")["s"].startswith("[[[[")  # brackets inside strings


def test_writes_go_through_symlinks_and_refuse_folders_devices_and_paths_under_files(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old\n")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    save_json_atomic(link, "{}")
    assert link.is_symlink() and real.read_text() == "{}\n"
    for path, needle in ((tmp_path, "is a folder"), ("/dev/null", "not a regular file"),
                         (real / "x.json", f"{real} is a file, not a folder")):
        with pytest.raises(ConfigError, match=needle):
            check_writable(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]  # no temp or probe left


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "plan.json"
    target.write_text("old\n")
    w = AtomicWriter(target)

    def full(_text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(w._f, "write", full)
    with pytest.raises(ConfigError, match=r"\(No space left on device\); nothing was written"):
        w.write("new")
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_a_full_disk_mid_write_leaves_no_file_behind(tmp_path):
    # a real write failure: the file-size limit makes the kernel refuse the write (EFBIG), as a full disk would
    code = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))\n"
        "from ssd_sim.io.jsonfile import save_json_atomic\n"
        "from ssd_sim.io.errors import ConfigError\n"
        f"try:\n    save_json_atomic({str(tmp_path / 'out.json')!r}, 'x' * 100000)\n"
        "except ConfigError as e:\n    print(e); sys.exit(2)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert p.returncode == 2 and "nothing was written" in p.stdout
    assert list(tmp_path.iterdir()) == []


def test_a_key_given_twice_is_kept_last_only_where_unique_keys_is_not_asked():
    assert parse_json('{"a": 1, "a": 2}', "x") == {"a": 2}  # trace lines: json's own rule, at full speed
    with pytest.raises(ConfigError, match="gives the key 'a' twice"):
        parse_json('{"a": 1, "a": 2}', "x", unique_keys=True)
    assert parse_json('[{"a": 1}, {"a": 2}]', "x", unique_keys=True) == [{"a": 1}, {"a": 2}]  # one key per object


def test_an_empty_output_name_is_refused_in_one_line():
    with pytest.raises(ConfigError, match="output: is an empty file name; give a file name"):
        check_writable("")
