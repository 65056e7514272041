"""Errors of the RocketMQ core. All derive from :class:`udfs.errors.FaultlineError`."""

from __future__ import annotations

from udfs.errors import FaultlineError


class RocketMQError(FaultlineError):
    """Base class of the errors RocketMQ itself would raise."""


class MessageValidationError(RocketMQError):
    """``MQClientException`` from ``Validators``: RocketMQ's response code and message text."""

    def __init__(self, response_code: int, message: str) -> None:
        super().__init__(message)
        self.response_code = response_code
        self.message = message

    def __repr__(self) -> str:
        return f"MessageValidationError({self.response_code}, {self.message!r})"


class DelayLevelError(RocketMQError, ValueError):
    """A ``messageDelayLevel`` spec that RocketMQ's ``parseDelayLevel`` rejects (the broker then
    refuses to start), or a level the table does not have."""


class EmptyRouteError(RocketMQError, ArithmeticError):
    """Queue selection on an empty queue list: RocketMQ's ``ArithmeticException: / by zero``."""


class AllocationError(RocketMQError, ValueError):
    """``IllegalArgumentException`` from an allocation strategy."""
