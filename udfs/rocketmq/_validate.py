"""Client-side validation with RocketMQ's codes and texts.

Sources: ``Validators.java`` (client) and ``common``'s ``topic/TopicValidator.java`` (@4.9.7,
@HEAD; 4.7.1 keeps the whole check in ``Validators``).

``checkTopic`` starts with the blank check (null, empty or whitespace: "The specified topic is
blank"); then 4.7.1 checks the characters (``^[%|a-zA-Z0-9_-]+$``) before the length (at most
127), while 4.9.7 and 5.x check the length first and the characters with a 128-entry table, so
non-ASCII is illegal. These errors carry response code -1. ``checkMessage`` runs, in order: a
null message (13); ``checkTopic``; a topic the client may not send to ("Sending message to
topic[...] is forbidden.", -1); a null body, an empty body, a body over ``maxMessageSize``
4194304 bytes (all 13; exactly 4194304 passes); 5.x only, an ``INNER_MULTI_DISPATCH`` property
containing ``/`` (13). System topics other than the not-allowed ones pass ``checkMessage``.
Groups are checked as topics are, with the profile's length limit (:mod:`udfs.rocketmq._profiles`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from udfs.rocketmq._errors import MessageValidationError
from udfs.rocketmq._java import is_blank, utf16_length
from udfs.rocketmq._profiles import Profile

TOPIC_MAX_LENGTH = 127
MAX_MESSAGE_SIZE = 4194304
MESSAGE_ILLEGAL = 13
"""``ResponseCode.MESSAGE_ILLEGAL``; the other checks use -1 (``MQClientException(msg, null)``)."""

_LEGAL = re.compile(r"[%|a-zA-Z0-9_-]+")
_PATTERN_TEXT = "^[%|a-zA-Z0-9_-]+$"


def _check_name(
    profile: Profile, kind: str, name: str | None, max_length: int, length_text: str
) -> None:
    if is_blank(name):
        raise MessageValidationError(-1, f"{kind} is blank")
    assert name is not None
    too_long = MessageValidationError(-1, length_text)
    illegal = MessageValidationError(
        -1, f"{kind}[{name}] contains illegal characters, allowing only {_PATTERN_TEXT}"
    )
    checks = [
        (utf16_length(name) > max_length, too_long),
        (not _LEGAL.fullmatch(name), illegal),
    ]
    if profile.line == "4.7" and kind.startswith("The"):
        checks.reverse()  # 4.7.1 checkTopic: characters before length
    for failed, error in checks:
        if failed:
            raise error


def validate_topic(profile: Profile, topic: str | None) -> None:
    """``Validators.checkTopic``: blank, then length and characters (4.7.1: characters first).

    >>> from udfs.rocketmq import PROFILES
    >>> validate_topic(PROFILES["rocketmq-4.9"], "orders")
    >>> try:
    ...     validate_topic(PROFILES["rocketmq-4.9"], "a b")
    ... except MessageValidationError as e:
    ...     print(e.response_code, e)
    -1 The specified topic[a b] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$
    """
    _check_name(
        profile,
        "The specified topic",
        topic,
        TOPIC_MAX_LENGTH,
        f"The specified topic is longer than topic max length {TOPIC_MAX_LENGTH}.",
    )


def validate_group(profile: Profile, group: str | None) -> None:
    """``Validators.checkGroup``: blank, length (255; 5.x HEAD 120), then characters."""
    limit = profile.group_max_length
    _check_name(
        profile,
        "the specified group",
        group,
        limit,
        f"the specified group is longer than group max length {limit}.",
    )


def validate_message(
    profile: Profile,
    topic: str | None,
    body_length: int | None,
    max_message_size: int = MAX_MESSAGE_SIZE,
    properties: Mapping[str, str] | None = None,
) -> None:
    """``Validators.checkMessage`` in RocketMQ's order; ``body_length`` None is a null body.

    >>> from udfs.rocketmq import PROFILES
    >>> validate_message(PROFILES["rocketmq-5"], "orders", 4194304)
    >>> try:
    ...     validate_message(PROFILES["rocketmq-5"], "orders", 4194305)
    ... except MessageValidationError as e:
    ...     print(e.response_code, e)
    13 the message body size over max value, MAX: 4194304
    """
    validate_topic(profile, topic)
    assert topic is not None
    if topic in profile.not_allowed_send_topics:
        raise MessageValidationError(-1, f"Sending message to topic[{topic}] is forbidden.")
    if body_length is None:
        raise MessageValidationError(MESSAGE_ILLEGAL, "the message body is null")
    if body_length == 0:
        raise MessageValidationError(MESSAGE_ILLEGAL, "the message body length is zero")
    if body_length > max_message_size:
        raise MessageValidationError(
            MESSAGE_ILLEGAL, f"the message body size over max value, MAX: {max_message_size}"
        )
    if profile.line == "5" and properties:
        dispatch = properties.get("INNER_MULTI_DISPATCH")
        if dispatch is not None and "/" in dispatch:
            raise MessageValidationError(
                MESSAGE_ILLEGAL, f"INNER_MULTI_DISPATCH {dispatch} can not contains / character"
            )
