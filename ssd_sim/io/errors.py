"""One error type for bad user input: it names the field and the fix in one line."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad configuration: `field` is the offending key, the message says how to fix it."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def path_error(err: OSError) -> ConfigError | None:
    """The one-line ConfigError for an OSError that only a path the user gave can cause (a name over the file
    system's limits: 255 bytes a component, 4096 a path), or None for any other OSError."""
    import errno

    if err.errno != errno.ENAMETOOLONG:
        return None
    name = str(err.filename or "")
    shown = name if len(name) <= 60 else f"{name[:40]}...{name[-17:]}"
    return ConfigError("path", f"{shown!r} ({len(name.encode())} bytes) is a name too long for the file system (255 "
                               "bytes a folder or file name, 4096 a path): give a shorter path")
