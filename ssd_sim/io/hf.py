"""Hugging Face model ids as the Hub spells them, and the id a local hub-cache path holds (no hub access)."""

from __future__ import annotations

import re
from pathlib import Path

HF_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")  # organisation/name


def cache_id(path: str | Path) -> str | None:
    """The id of a model in a Hugging Face hub cache (.../models--ORG--NAME/snapshots/<rev>/...), else None."""
    for part in reversed(Path(path).parts):
        if part.startswith("models--") and part.count("--") >= 2:
            org, name = part[len("models--"):].split("--", 1)
            return f"{org}/{name}"
    return None
