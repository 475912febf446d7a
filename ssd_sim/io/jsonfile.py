"""Reading and writing the project's JSON files: one-line errors in, atomic writes out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError


def read_text_file(path: str | Path, field: str, missing_hint: str) -> str:
    """A UTF-8 text file's content; missing, a folder, unreadable or binary is a one-line ConfigError.

    `field` names the input in the error ("plan file", "trace"); `missing_hint` says how to make one.
    """
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError as e:
        raise ConfigError(field, f"{p} does not exist; {missing_hint}") from e
    except IsADirectoryError as e:
        raise ConfigError(field, f"{p} is a folder; give a file") from e
    except UnicodeDecodeError as e:
        raise ConfigError(field, f"{p} is not a text file (byte {e.start} is not UTF-8)") from e
    except OSError as e:
        raise ConfigError(field, f"{p} cannot be read ({e.strerror})") from e


def read_json_object(path: str | Path, field: str, missing_hint: str) -> dict[str, Any]:
    """Parse a JSON file holding an object; a missing, unreadable, unparsable or non-object file is a one-line
    ConfigError. `field` names the input in the error ("plan file", "profile"); `missing_hint` says how to make one.
    """
    p = Path(path)
    text = read_text_file(p, field, missing_hint)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(field, f"{p} is not valid JSON (line {e.lineno}: {e.msg})") from e
    if not isinstance(data, dict):
        raise ConfigError(field, f"{p} must hold a JSON object")
    return data


def save_json_atomic(path: str | Path, text: str) -> None:
    """Write a file atomically (temp file + rename), so a failure never leaves half a file behind."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(text if text.endswith("\n") else text + "\n")
    tmp.replace(p)
