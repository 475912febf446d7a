"""Outputs that never destroy inputs and runs that never share a file.

check_outputs is the one check every CLI makes before its work starts: each output must be writable
(jsonfile.check_writable), must not be the same file as any input of the command (same inode, so a symlink, a hard
link and another spelling of the path are all caught) and must not be the same file as another output.

claim_outputs makes a process the only writer of its outputs while it runs: an exclusive flock on a lock file
beside each output (`.NAME.lock`, removed on release; the kernel drops the lock when the process dies, so a killed
run never blocks the next). A second run naming the same output is refused in one line; a default name that is
taken gets the next free suffix (NAME-2, NAME-3, ...) instead. Claims are re-entrant within a process.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import check_writable

try:
    import fcntl
except ImportError:  # not POSIX: claims fall back to the lock file's exclusive create
    fcntl = None

PathLike = str | Path
Inputs = Mapping[str, PathLike | Iterable[PathLike] | None]
MAX_FOLDER_FILES = 10_000  # files of an input folder (a model folder holds a handful) compared with the outputs


def _file_id(path: PathLike) -> tuple[int, int] | None:
    """(device, inode) of the regular file `path` names, symlinks followed; None if it is not one."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _printed_to(path: PathLike) -> str | None:
    """"stdout" / "stderr" when `path` is the regular file that stream is redirected to (`-o /dev/stdout > f`, or
    `-o f > f`: the output's atomic rename would swap the file under the printed report), else None."""
    target = _file_id(path)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if target is not None and stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == target:
            return name
    return None


def _input_files(inputs: Inputs) -> Iterator[tuple[str, Path]]:
    """(field, file) for every input file; a folder (a model folder) stands for every regular file under it."""
    for field, value in inputs.items():
        if value is None:
            continue
        for path in [value] if isinstance(value, str | Path) else value:
            p = Path(path)
            if p.is_dir():
                files = (f for f in p.rglob("*") if f.is_file())
                yield from ((field, f) for _, f in zip(range(MAX_FOLDER_FILES), files, strict=False))
            else:
                yield field, p


def _flag(field: str) -> str:
    return "-o" if field == "output" else "--" + field.replace("_", "-")


def check_outputs(outputs: Mapping[str, PathLike | None], inputs: Inputs) -> dict[str, Path]:
    """Check every output before the work: writable, not an input of the command, not another output.

    `outputs` maps a field ("output", "trace", "chrome_trace") to its path (None = not written); `inputs` maps a
    field to a path, a list of paths or a folder. Returns {field: resolved path}; ConfigError (one line naming the
    output's field and the fix) otherwise.
    """
    given = {f: p for f, p in outputs.items() if p is not None}
    resolved = {f: check_writable(p, f) for f, p in given.items()}
    ids = {_file_id(p): (f, p) for f, p in _input_files(inputs)}
    ids.pop(None, None)
    for field, path in resolved.items():
        hit = ids.get(_file_id(path))
        if hit is not None:
            same = "" if str(hit[1]) == str(given[field]) else f"the same file as {hit[1]}, "
            name = hit[0].replace("_", "-")
            raise ConfigError(field, f"{given[field]} is {same}the {name} input of this command: writing it would "
                                     f"destroy that input; give {_flag(field)} another file")
        stream = _printed_to(path)
        if stream:
            raise ConfigError(field, f"{given[field]} is the file this command's {stream} goes to: the report printed "
                                     f"there would be lost; give {_flag(field)} another file")
    seen: dict[object, str] = {}
    for field, path in resolved.items():
        key = _file_id(path) or os.path.realpath(path)
        if key in seen:
            raise ConfigError(field, f"{given[field]} is also the {seen[key]} output of this command; give "
                                     f"{_flag(field)} another file")
        seen[key] = field
    return resolved


# ---- one writer per output ---------------------------------------------------------------------------------
_HELD: dict[str, _Claim] = {}  # realpath of an output -> this process's claim on it


class _Claim:
    """This process's lock on one output path (see the module docstring)."""

    def __init__(self, path: Path, fd: int):
        self.path, self.fd, self.count = path, fd, 1

    @property
    def lock(self) -> Path:
        return lock_path(self.path)

    def release(self) -> None:
        self.count -= 1
        if self.count:
            return
        _HELD.pop(os.path.realpath(self.path), None)
        with contextlib.suppress(OSError):
            if _file_id(self.lock) == _fd_id(self.fd):  # unlink while locked: a waiter re-checks the inode
                self.lock.unlink()
        os.close(self.fd)


def lock_path(path: PathLike) -> Path:
    """The lock file that claims `path`: `.NAME.lock` in its folder (symlinks followed)."""
    p = Path(os.path.realpath(path))
    return p.with_name(f".{p.name}.lock")


def _fd_id(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _try_lock(path: Path) -> _Claim | None:
    """Take the lock on `path`, or None when another live process holds it."""
    held = _HELD.get(os.path.realpath(path))
    if held is not None:
        held.count += 1
        return held
    lock = lock_path(path)
    while True:
        flags = os.O_RDWR | os.O_CREAT | (0 if fcntl else os.O_EXCL)
        try:
            fd = os.open(lock, flags, 0o644)
        except FileExistsError:
            return None
        try:
            if fcntl:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        if _file_id(lock) == _fd_id(fd):  # still the file at that name (not one a releasing owner just unlinked)
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            claim = _HELD[os.path.realpath(path)] = _Claim(path, fd)
            return claim
        os.close(fd)


def _numbered(path: Path, n: int) -> Path:
    return path if n == 1 else path.with_name(f"{path.stem}-{n}{path.suffix}")


def _claim_one(field: str, path: Path, unique: bool) -> _Claim:
    try:
        lock_path(path).parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(field, f"cannot create the folder {lock_path(path).parent} ({e.strerror or e})") from e
    for n in range(1, 1000 if unique else 2):
        candidate = _numbered(path, n)
        if unique and (candidate.exists() or lock_path(candidate).exists()):  # a default name: never reuse one
            continue
        try:
            claim = _try_lock(candidate)
        except OSError as e:
            raise ConfigError(field, f"cannot create the lock file {lock_path(candidate)} ({e.strerror or e})") from e
        if claim is not None:
            return claim
    raise ConfigError(field, f"another run{_holder(path)} is writing {path} now; give {_flag(field)} another file or "
                             "wait for it to finish")


def _holder(path: Path) -> str:
    """" (process PID)" of the run holding `path`'s lock; "" while the holder has locked but not yet written its pid,
    or when the lock file is gone or unreadable."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        pid = lock_path(path).read_text().strip()
        if pid.isdigit():
            return f" (process {pid})"
    return ""


@contextlib.contextmanager
def claim_outputs(outputs: Mapping[str, PathLike | None], unique: Iterable[str] = ()) -> Iterator[dict[str, Path]]:
    """Hold the only right to write each output for the `with` block; yields {field: path}. A field in `unique`
    (a default name) that another run holds moves on to NAME-2, NAME-3, ...; any other is ConfigError in one line.
    """
    claims: dict[str, _Claim] = {}
    try:
        for field, path in outputs.items():
            if path is not None:
                claims[field] = _claim_one(field, Path(path), field in set(unique))
        yield {field: c.path for field, c in claims.items()}
    finally:
        for c in reversed(claims.values()):
            c.release()
