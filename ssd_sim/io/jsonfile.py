"""The project's one input layer and its writers: one-line errors in, atomic writes out.

Every file the project reads (plan, profile, trace, prompts, model config) goes through read_text_file /
read_json_object / parse_json: any OS, encoding, size or structure problem becomes a ConfigError that names the
file and the problem (the CLIs print it as one line and exit 2). Every file it writes goes through
check_writable (before long work) and save_text_atomic / AtomicWriter (temp file in the same folder, renamed
over the target; the temp file is removed on any failure; a symlink target is written through, not replaced).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.values import first_repeat

MAX_INPUT_MB = 512  # the largest file read (a b = 16 x 2,048-token trace with logged distributions is ~25 MB)
MAX_JSON_DEPTH = 64  # our files nest a few levels; deeper is not one of them (and would exhaust the stack)


def read_text_file(path: str | Path, field: str, missing_hint: str, max_mb: float = MAX_INPUT_MB) -> str:
    """A UTF-8 text file's content; missing, a folder, a device, too large, unreadable or binary is a one-line
    ConfigError. `field` names the input in the error ("plan file", "trace"); `missing_hint` says how to make one.
    """
    p = Path(path)
    try:
        st = p.stat()
        if p.is_dir():
            raise ConfigError(field, f"{p} is a folder; give a file")
        if not p.is_file():
            raise ConfigError(field, f"{p} is not a regular file (a device or pipe); give a file")
        if st.st_size > max_mb * 2**20:
            raise ConfigError(field, f"{p} is {st.st_size / 2**20:.0f} MB, more than the {max_mb:g} MB read at most; "
                                     "is it the right file?")
        data = p.read_bytes()
    except ConfigError:
        raise
    except FileNotFoundError as e:
        raise ConfigError(field, f"{p} does not exist; {missing_hint}") from e
    except OSError as e:
        raise ConfigError(field, f"{p} cannot be read ({e.strerror or e})") from e
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or data[:3] == b"\xef\xbb\xbf":
        enc = "UTF-8 with a byte-order mark" if data[:3] == b"\xef\xbb\xbf" else "UTF-16"
        raise ConfigError(field, f"{p} is {enc}; save it as plain UTF-8")
    if b"\x00" in data[:4096]:
        raise ConfigError(field, f"{p} is a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(field, f"{p} is not a text file (byte {e.start} is not UTF-8)") from e


class DuplicateKey(ValueError):
    """A JSON object names one key twice (json.loads keeps the last silently)."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) < len(pairs):
        raise DuplicateKey(first_repeat(k for k, _ in pairs))
    return out


def parse_json(text: str, what: str, unique_keys: bool = False) -> Any:
    """json.loads with every failure as a one-line ConfigError naming `what` (a file, or a file and line).
    unique_keys: a key given twice in one object is an error (a hand-edited file's second value would win silently);
    the files users write (plan, profile, GPU, arrivals, probe, config) are read so, the traces' lines are not."""
    depth = _max_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise ConfigError("json", f"{what} nests {depth} levels deep, more than the {MAX_JSON_DEPTH} our files use")
    try:  # NaN / Infinity parse (json.dumps writes them); fields that must be finite check
        return json.loads(text, object_pairs_hook=_unique_pairs) if unique_keys else json.loads(text)
    except DuplicateKey as e:
        raise ConfigError("json", f"{what} gives the key {str(e)!r} twice in one object; keep one") from e
    except json.JSONDecodeError as e:
        raise ConfigError("json", f"{what} is not valid JSON (line {e.lineno}: {e.msg})") from e
    except ValueError as e:  # e.g. an integer of more than 4,300 digits
        raise ConfigError("json", f"{what} holds a value Python will not parse ({str(e).split(';')[0]})") from e
    except RecursionError as e:
        raise ConfigError("json", f"{what} nests too deeply") from e


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')  # a JSON string literal (its brackets do not nest)


def _max_depth(text: str) -> int:
    """Bracket nesting depth outside strings (a cheap pre-check before json.loads recurses): strings removed by
    one regex, then a running sum of +1 per opening and -1 per closing bracket (numpy, no Python loop)."""
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return 0
    codes = np.frombuffer(_JSON_STRING.sub("", text).encode("utf-8", "replace"), dtype=np.uint8)
    step = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


def read_json_object(path: str | Path, field: str, missing_hint: str) -> dict[str, Any]:
    """Parse a JSON file holding an object; a missing, unreadable, unparsable or non-object file is a one-line
    ConfigError. `field` names the input in the error ("plan file", "profile"); `missing_hint` says how to make one.
    """
    p = Path(path)
    text = read_text_file(p, field, missing_hint)
    try:
        data = parse_json(text, str(p), unique_keys=True)
    except ConfigError as e:
        raise ConfigError(field, str(e).split(": ", 1)[1]) from e
    if not isinstance(data, dict):
        raise ConfigError(field, f"{p} must hold a JSON object")
    return data


def resolve_output(path: str | Path) -> Path:
    """Where writing `path` lands: a symlink is followed (we write through it, not over it)."""
    p = Path(path)
    return Path(os.path.realpath(p)) if p.is_symlink() else p


def check_writable(path: str | Path, field: str = "output") -> Path:
    """Fail now, in one line, if `path` cannot be written (before hours of work): its folder must exist or be
    creatable and writable, and the path must not be a folder or a device. Returns the resolved path."""
    if not str(path).strip():
        raise ConfigError(field, "is an empty file name; give a file name")
    p = resolve_output(path)
    if p.is_dir():
        raise ConfigError(field, f"{path} is a folder; give a file name")
    if p.exists() and not p.is_file():
        raise ConfigError(field, f"{path} is not a regular file (a device or pipe); give a file name")
    parent = p.parent
    blocker = next((a for a in [parent, *parent.parents] if a.exists() and not a.is_dir()), None)
    if blocker is not None:
        raise ConfigError(field, f"cannot write {path}: {blocker} is a file, not a folder")
    missing = [a for a in [parent, *parent.parents] if not a.exists()]
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(field, f"cannot create the folder {parent} ({e.strerror or e})") from e
    probe = parent / f".{p.name}.{os.getpid()}.probe"
    try:
        if p.exists() and not os.access(p, os.W_OK):
            raise ConfigError(field, f"{path} is read-only")
        try:  # the only sure test of a folder (permissions, read-only file systems, quotas): write in it
            probe.open("w").close()
            probe.unlink()
        except OSError as e:
            raise ConfigError(field, f"cannot create a file in {parent} ({e.strerror or e})") from e
    except ConfigError:
        for folder in missing:  # leave no folder behind that only this failed check created
            try:
                folder.rmdir()
            except OSError:
                break
        raise
    return p


class AtomicWriter:
    """A text file written to a temp file beside the target and renamed over it on commit(); abort() (or any
    exception inside a `with` block) removes the temp file, so a failure never leaves a half or empty file."""

    def __init__(self, path: str | Path, field: str = "output"):
        self.field, self.name = field, str(path)
        self.path = check_writable(path, field)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self._f = self.tmp.open("w", encoding="utf-8")
        except OSError as e:
            raise ConfigError(field, f"cannot write {self.name} ({e.strerror or e})") from e

    def write(self, text: str) -> None:
        try:
            self._f.write(text)
        except OSError as e:
            self.abort()
            raise ConfigError(self.field, f"cannot write {self.name} ({e.strerror or e}); nothing was written") from e

    def commit(self) -> Path:
        try:
            self._f.flush()
            os.fsync(self._f.fileno())
            self._f.close()
            replace_regular(self.tmp, self.path, self.field)
        except OSError as e:
            self.abort()
            raise ConfigError(self.field, f"cannot write {self.name} ({e.strerror or e}); nothing was written") from e
        except ConfigError:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        try:
            if not self._f.closed:
                self._f.close()  # may raise again on a full disk (flushing the buffer)
        except OSError:
            pass
        finally:
            self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> AtomicWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def replace_regular(src: Path, dst: Path, field: str = "output") -> None:
    """os.replace(src, dst), refusing to rename over anything but a regular file (a device node or folder that
    appeared at dst since check_writable stays as it is)."""
    if dst.exists() and not dst.is_file():
        raise ConfigError(field, f"{dst} is not a regular file (a device, pipe or folder); nothing was written there")
    os.replace(src, dst)


def save_text_atomic(path: str | Path, text: str, field: str = "output") -> Path:
    """Write a text file atomically (see AtomicWriter): complete or untouched, never half written."""
    with AtomicWriter(path, field) as w:
        w.write(text if text.endswith("\n") else text + "\n")
    return w.path


def save_json_atomic(path: str | Path, text: str, field: str = "output") -> Path:
    """Write a JSON text atomically (save_text_atomic)."""
    return save_text_atomic(path, text, field)
