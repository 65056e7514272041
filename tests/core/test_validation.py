"""``udfs.rocketmq._validate``: Validators with RocketMQ's codes and texts."""

from __future__ import annotations

import pytest

from tests.core.conftest import P5, P47, P49
from udfs.rocketmq import (
    MessageValidationError,
    Profile,
    validate_group,
    validate_message,
    validate_topic,
)

ILLEGAL = "contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
TOO_LONG = "The specified topic is longer than topic max length 127."


def _error(fn, *args, **kwargs) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(MessageValidationError) as info:
        fn(*args, **kwargs)
    return info.value.response_code, str(info.value)


@pytest.mark.parametrize("topic", [None, "", "   ", "\t\n", "\u2003"])
def test_blank_topic(profile: Profile, topic: str | None) -> None:
    assert _error(validate_topic, profile, topic) == (-1, "The specified topic is blank")


def test_no_break_space_is_not_blank_but_illegal(profile: Profile) -> None:
    code, text = _error(validate_topic, profile, "\u00a0")
    assert code == -1 and text == f"The specified topic[\u00a0] {ILLEGAL}"


@pytest.mark.parametrize(
    ("p", "expected"),
    [(P47, f"The specified topic[{'é' * 128}] {ILLEGAL}"), (P49, TOO_LONG), (P5, TOO_LONG)],
)
def test_check_order_differs_for_a_long_illegal_topic(p: Profile, expected: str) -> None:
    assert _error(validate_topic, p, "é" * 128) == (-1, expected)


def test_length_limit_is_127_utf16_units(profile: Profile) -> None:
    validate_topic(profile, "t" * 127)
    assert _error(validate_topic, profile, "t" * 128) == (-1, TOO_LONG)


@pytest.mark.parametrize("topic", ["orders", "%RETRY%g", "a|b", "A-Z_09", "TBW102"])
def test_legal_topics(profile: Profile, topic: str) -> None:
    validate_topic(profile, topic)
    validate_message(profile, topic, 1)


@pytest.mark.parametrize("topic", ["a b", "a.b", "tópico", "a/b", "line\n"])
def test_illegal_characters(profile: Profile, topic: str) -> None:
    assert _error(validate_topic, profile, topic) == (-1, f"The specified topic[{topic}] {ILLEGAL}")


@pytest.mark.parametrize(
    ("topic", "forbidden_in"),
    [
        ("SCHEDULE_TOPIC_XXXX", {"4.7", "4.9", "5"}),
        ("RMQ_SYS_TRANS_HALF_TOPIC", {"4.9", "5"}),
        ("SELF_TEST_TOPIC", {"4.9", "5"}),
        ("OFFSET_MOVED_EVENT", {"4.9", "5"}),
        ("RMQ_SYS_TRACE_TOPIC", set()),  # a system topic, but sending to it is allowed
    ],
)
def test_not_allowed_send_topics(topic: str, forbidden_in: set[str]) -> None:
    for p in (P47, P49, P5):
        if p.line in forbidden_in:
            assert _error(validate_message, p, topic, 10) == (
                -1,
                f"Sending message to topic[{topic}] is forbidden.",
            )
        else:
            validate_message(p, topic, 10)


def test_body_checks_in_order(profile: Profile) -> None:
    assert _error(validate_message, profile, "t", None) == (13, "the message body is null")
    assert _error(validate_message, profile, "t", 0) == (13, "the message body length is zero")
    validate_message(profile, "t", 4194304)
    assert _error(validate_message, profile, "t", 4194305) == (
        13,
        "the message body size over max value, MAX: 4194304",
    )
    assert _error(validate_message, profile, "t", 101, max_message_size=100) == (
        13,
        "the message body size over max value, MAX: 100",
    )
    # the topic is checked before the body
    assert _error(validate_message, profile, "", None)[1] == "The specified topic is blank"


@pytest.mark.parametrize(("p", "rejected"), [(P47, False), (P49, False), (P5, True)])
def test_inner_multi_dispatch_is_checked_in_5_only(p: Profile, rejected: bool) -> None:
    props = {"INNER_MULTI_DISPATCH": "a/b"}
    if rejected:
        assert _error(validate_message, p, "t", 1, properties=props) == (
            13,
            "INNER_MULTI_DISPATCH a/b can not contains / character",
        )
    else:
        validate_message(p, "t", 1, properties=props)
    validate_message(p, "t", 1, properties={"INNER_MULTI_DISPATCH": "a,b"})


@pytest.mark.parametrize(("p", "limit"), [(P47, 255), (P49, 255), (P5, 120)])
def test_group_length_limit(p: Profile, limit: int) -> None:
    validate_group(p, "g" * limit)
    assert _error(validate_group, p, "g" * (limit + 1)) == (
        -1,
        f"the specified group is longer than group max length {limit}.",
    )
    assert _error(validate_group, p, " ") == (-1, "the specified group is blank")
    assert _error(validate_group, p, "g g")[1] == f"the specified group[g g] {ILLEGAL}"
