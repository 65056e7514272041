"""``udfs.rocketmq._delay``: consumer send-back, retry topics and the DLQ."""

from __future__ import annotations

import random

import pytest

from tests.core.conftest import P5, P47, P49
from udfs.rocketmq import DelayLevels, Profile, send_back


@pytest.mark.parametrize(
    ("reconsume", "level", "queue"),
    [(0, 3, 2), (1, 4, 3), (7, 10, 9), (14, 17, 16), (15, 18, 17)],
)
def test_broker_path_escalates_one_level_per_reconsume(profile, reconsume, level, queue) -> None:  # type: ignore[no-untyped-def]
    back = send_back(profile, "g", reconsume, 0)
    assert (back.topic, back.queue_id, back.delay_level) == ("%RETRY%g", 0, level)
    assert back.parked_in == ("SCHEDULE_TOPIC_XXXX", queue)
    assert back.reconsume_times == reconsume + 1
    assert not back.dlq and not back.dropped


@pytest.mark.parametrize(
    ("p", "parked"), [(P47, ("SCHEDULE_TOPIC_XXXX", 17)), (P49, None), (P5, None)]
)
def test_broker_path_dlq_at_16(p: Profile, parked) -> None:  # type: ignore[no-untyped-def]
    back = send_back(p, "g", 16, 0)
    assert (back.topic, back.queue_id, back.reconsume_times) == ("%DLQ%g", 0, 17)
    assert back.dlq
    # 4.7.1 keeps the DELAY the message already carries (18 from its last send-back), so the DLQ
    # copy waits in SCHEDULE_TOPIC_XXXX first; later versions set DELAY=0
    assert back.parked_in == parked
    assert back.delay_level == (18 if p is P47 else 0)


def test_negative_level_goes_straight_to_the_dlq(profile: Profile) -> None:
    back = send_back(profile, "g", 0, -1)
    assert back.dlq and back.parked_in is None  # never consumed before: no DELAY to keep


def test_positive_level_is_kept_and_the_store_clamps_it(profile: Profile) -> None:
    assert send_back(profile, "g", 0, 5).delay_level == 5
    back = send_back(profile, "g", 0, 25)
    assert back.delay_level == 25 and back.parked_in == ("SCHEDULE_TOPIC_XXXX", 17)


def test_custom_max_and_missing_max(profile: Profile) -> None:
    assert send_back(profile, "g", 3, 0, max_reconsume_times=3).dlq
    assert not send_back(profile, "g", 2, 0, max_reconsume_times=3).dlq
    assert not send_back(profile, "g", 15, 0, max_reconsume_times=None).dlq
    assert send_back(profile, "g", 16, 0, max_reconsume_times=None).dlq


def test_no_retry_queues_drops_the_message(profile: Profile) -> None:
    back = send_back(profile, "g", 0, 0, retry_queue_nums=0)
    assert back.dropped and back.topic is None


def test_several_retry_queues_draw_from_the_generator(profile: Profile) -> None:
    queues = {
        send_back(profile, "g", 0, 0, retry_queue_nums=4, rng=random.Random(s)).queue_id
        for s in range(30)
    }
    assert queues == {0, 1, 2, 3}
    with pytest.raises(ValueError, match="seeded rng"):
        send_back(profile, "g", 0, 0, retry_queue_nums=4)


def test_custom_delay_table_clamps_to_its_maximum(profile: Profile) -> None:
    back = send_back(profile, "g", 5, 0, levels=DelayLevels.parse("1s 2s 3s 4s"))
    assert back.delay_level == 8 and back.parked_in == ("SCHEDULE_TOPIC_XXXX", 3)


# --- client path ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("p", "dlq_at"),
    [(P47, 15), (P49, 15), (P5, 16)],  # 4.x: RECONSUME_TIME >= max; 5.x: > max
)
def test_client_path_reaches_the_dlq_one_attempt_earlier_in_4x(p: Profile, dlq_at: int) -> None:
    first_dlq = next(r for r in range(20) if send_back(p, "g", r, 0, path="client").dlq)
    assert first_dlq == dlq_at
    last_retry = send_back(p, "g", dlq_at - 1, 0, path="client")
    assert last_retry.topic == "%RETRY%g" and last_retry.reconsume_times == dlq_at


@pytest.mark.parametrize(
    ("p", "reconsume", "level", "parked"),
    [
        (P47, 15, 18, ("SCHEDULE_TOPIC_XXXX", 17)),
        (P49, 15, 18, ("SCHEDULE_TOPIC_XXXX", 17)),
        (P5, 16, -1, None),
    ],
)
def test_client_path_dlq_copy_delay(p: Profile, reconsume: int, level: int, parked) -> None:  # type: ignore[no-untyped-def]
    back = send_back(p, "g", reconsume, 0, path="client")
    assert back.dlq and back.delay_level == level and back.parked_in == parked


def test_client_path_sets_delay_from_reconsume_times(profile: Profile) -> None:
    back = send_back(profile, "g", 2, 7, path="client")  # the requested level is ignored
    assert (back.topic, back.delay_level, back.reconsume_times) == ("%RETRY%g", 5, 3)


@pytest.mark.parametrize(("p", "dlq"), [(P47, False), (P49, False), (P5, True)])
def test_5_client_path_orderly_locks_force_the_dlq(p: Profile, dlq: bool) -> None:
    assert send_back(p, "g", 0, 0, path="client", orderly_locked=True).dlq is dlq
