"""The root of every error faultline raises on purpose."""

from __future__ import annotations

__all__ = ["ConfigError", "FaultlineError", "InputError"]


class FaultlineError(Exception):
    """Base class: catch this to catch every error faultline raises deliberately."""


class ConfigError(FaultlineError):
    """A configuration value is wrong; the message names the file, the key, the value and
    what is allowed. The job stops before it starts."""


class InputError(FaultlineError):
    """An input record cannot be used; ``code`` is the quarantine reason code."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
