"""One error type for bad user input: it names the field and the fix in one line."""

from __future__ import annotations


class ConfigError(ValueError):
    """Bad configuration: `field` is the offending key, the message says how to fix it."""

    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")
