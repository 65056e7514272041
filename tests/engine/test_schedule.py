"""Delay queues in the engine: what enters ``SCHEDULE_TOPIC_XXXX``, when and where it leaves."""

from __future__ import annotations

import pandas as pd
import pytest

from tests.engine.conftest import T0, beat, beats, consume, failed, run, send, table
from udfs import engine
from udfs.rocketmq import DelayLevels
from udfs.schedule import DelayPolicy, kafka_topic

LEVELS = DelayLevels.parse()


def rows(step: engine.Step, name: str) -> pd.DataFrame:
    return table(step, name)


def test_every_level_waits_exactly_its_delay_then_leaves_in_queue_order() -> None:
    events = [
        send(f"d{level:02d}-{n}", n, "a", delay_level=level, queue_id=3)
        for level in range(1, 19)
        for n in range(3)
    ]
    step = run(events)
    entries = rows(step, "schedule_entries")
    assert len(entries) == 54
    for r in entries.itertuples():
        assert r.schedule_queue_id == r.delay_level - 1
        assert r.deliver_at == r.store_time + LEVELS.delay_ms(r.delay_level)
        assert (r.real_topic, r.real_queue_id, r.source) == ("T", 3, "delayed_send")
    assert rows(step, "redeliveries").empty
    state = step.state
    for level in range(1, 19):
        just_before = LEVELS.delay_ms(level) + 1  # the queue's last entry is due at delay + 2
        step = run([beat(f"hb{level}", just_before, "a")], state=state)
        out = rows(step, "redeliveries")
        assert set(out["delay_level"]) <= set(range(1, level + 1))
        assert list(out.loc[out["delay_level"] == level, "event_id"]) == [
            f"d{level:02d}-0",
            f"d{level:02d}-1",
        ], level
        state = step.state
        step = run([beat(f"hc{level}", just_before + 1, "a")], state=state)
        out = rows(step, "redeliveries")
        assert list(out["event_id"]) == [f"d{level:02d}-2"]
        assert out["deliver_at"].iloc[0] == T0 + 2 + LEVELS.delay_ms(level)
        state = step.state
    assert state.schedule == {}


@pytest.mark.parametrize(("asked", "level"), [(19, 18), (100, 18), (0, None), (-1, None)])
def test_levels_above_the_maximum_clamp_and_zero_or_negative_are_not_delayed(
    asked: int, level: int | None
) -> None:
    step = run([send("s", 0, "a", delay_level=asked)])
    entries = rows(step, "schedule_entries")
    if level is None:
        assert entries.empty
    else:
        assert list(entries["delay_level"]) == [level]
        assert list(entries["schedule_queue_id"]) == [level - 1]


def test_a_send_that_stays_on_its_topic_is_not_delayed() -> None:
    # a failed attempt with attempts left is a routing decision, not a delayed message
    step = run([send("s", 0, "a", "REMOTING_EXCEPTION", delay_level=3)])
    assert rows(step, "schedule_entries").empty


@pytest.mark.parametrize(
    ("times", "topic", "level", "delay"),
    [(0, "%RETRY%cg", 3, 10_000), (1, "%RETRY%cg", 4, 30_000), (15, "%RETRY%cg", 18, 7_200_000)],
)
def test_send_back_retries_with_the_level_of_its_reconsume_times(
    times: int, topic: str, level: int, delay: int
) -> None:
    step = run([consume("c", 0, times)])
    (entry,) = rows(step, "schedule_entries").itertuples()
    assert (entry.real_topic, entry.real_queue_id, entry.delay_level) == (topic, 0, level)
    assert entry.deliver_at - entry.store_time == delay
    assert (entry.source, entry.group, entry.attempt_count) == ("consume_retry", "cg", times + 1)
    assert rows(step, "redeliveries").empty
    later = run(beats(delay), state=step.state)
    (out,) = rows(later, "redeliveries").itertuples()
    assert (out.target_topic, out.kafka_topic, out.dlq) == (topic, kafka_topic(topic), False)


@pytest.mark.parametrize("profile", ["rocketmq-4.9", "rocketmq-5"])
def test_send_back_after_max_reconsume_times_goes_to_the_dlq_at_once(profile: str) -> None:
    step = run([consume("c", 0, 16, client_profile=profile)])
    assert rows(step, "schedule_entries").empty
    (out,) = rows(step, "redeliveries").itertuples()
    assert (out.target_topic, out.kafka_topic, out.dlq) == ("%DLQ%cg", ".25DLQ.25cg", True)
    assert (out.deliver_at, out.delay_level, out.schedule_queue_id) == (T0, 0, pd.NA)
    assert out.attempt_count == 17


def test_4_7_dlq_copy_keeps_its_delay_and_waits_in_the_schedule_topic_first() -> None:
    """Send-back (``udfs.rocketmq._delay``): 4.7.1 does not reset DELAY on the way to the DLQ
    (ISSUE #2724)."""
    step = run([consume("c", 0, 16, client_profile="rocketmq-4.7")])
    (entry,) = rows(step, "schedule_entries").itertuples()
    assert (entry.real_topic, entry.delay_level, entry.dlq) == ("%DLQ%cg", 18, True)
    assert rows(step, "redeliveries").empty
    later = run(beats(LEVELS.delay_ms(18)), state=step.state)
    (out,) = rows(later, "redeliveries").itertuples()
    assert (out.target_topic, out.dlq, out.delay_level) == ("%DLQ%cg", True, 18)


def test_send_back_profile_comes_from_cluster_profile_without_client_profile() -> None:
    four_seven = engine.EngineConfig(cluster_profile="rocketmq-4.7")
    parked = run([consume("c", 0, 16)], four_seven)
    direct = run([consume("c", 0, 16)])
    assert len(rows(parked, "schedule_entries")) == 1
    assert rows(direct, "schedule_entries").empty


def test_send_back_honours_the_consumers_level_max_times_and_negative_level() -> None:
    step = run(
        [
            consume("asked", 0, 0, delay_level=5),
            consume("few", 0, 2, max_reconsume_times=2),
            consume("never", 0, 0, delay_level=-1),
        ]
    )
    entries = rows(step, "schedule_entries").set_index("event_id")
    assert entries.loc["asked", "delay_level"] == 5
    dlq = rows(step, "redeliveries").set_index("event_id")
    assert set(dlq.index) == {"few", "never"}
    assert dlq["dlq"].all()


def test_failed_messages_escalate_level_by_level_and_end_in_the_dlq() -> None:
    config = engine.EngineConfig(delays=DelayPolicy(max_redeliveries=4))
    state, t, seen = None, 0, []
    for count in range(5):
        step = run([failed(f"f{count}", t, count, message_id="m")], config, state)
        state = step.state
        entries = rows(step, "schedule_entries")
        if count < 4:
            (entry,) = entries.itertuples()
            assert (entry.source, entry.real_topic, entry.delay_level) == (
                "send_failure",
                "T",
                3 + count,
            )
            assert entry.real_queue_id is pd.NA and entry.attempt_count == count + 1
            t = int(entry.deliver_at) - T0
            step = run([beat(f"hb{count}", t, "a")], config, state)
            state = step.state
        out = rows(step, "redeliveries")
        seen += list(zip(out["target_topic"], out["delay_level"], out["dlq"], strict=True))
    escalated = [("T", level, False) for level in (3, 4, 5, 6)]
    assert seen == [*escalated, ("%DLQ%pg", 0, True)]


def test_calls_that_time_out_are_failed_messages_too() -> None:
    step = run([send("t", 0, "a", "CALL_TIMEOUT", attempt=1, latency=0)])
    (entry,) = rows(step, "schedule_entries").itertuples()
    assert (entry.source, entry.delay_level, entry.group) == ("send_failure", 3, "DEFAULT_PRODUCER")


def test_nothing_disappears_scheduled_equals_released_plus_waiting() -> None:
    events = [failed(f"f{i}", i * 1000, i % 3) for i in range(20)]
    events += [consume(f"c{i}", i * 1000, i % 17) for i in range(20)]
    events += [send(f"d{i}", i * 1000, "a", delay_level=i % 20) for i in range(20)]
    events.sort(key=lambda e: e["event_time"])
    state, entries, out = None, 0, 0
    for begin in range(0, 60, 7):
        step = run(
            [*events[begin : begin + 7], beat(f"hb{begin}", begin * 1000 + 20_000, "a")],
            state=state,
        )
        state = step.state
        entries += len(rows(step, "schedule_entries"))
        out += int((rows(step, "redeliveries")["schedule_queue_id"].notna()).sum())
    waiting = sum(len(q) for q in state.schedule.values())
    assert entries > 30 and waiting > 0 and out > 0
    assert entries == out + waiting


def test_kafka_topic_names_are_legal_and_one_to_one() -> None:
    names = ["orders", "%RETRY%cg", "%DLQ%cg", "a|b", "a%7Cb", "_25RETRY_25cg", "x" * 127]
    names += ["%DLQ%" + "g" * 255, "%DLQ%" + "g" * 254 + "h"]
    mapped = [kafka_topic(n) for n in names]
    assert len(set(mapped)) == len(names)
    for m in mapped:
        assert 0 < len(m) <= 249 and m not in (".", "..")
        assert all(c.isascii() and (c.isalnum() or c in "._-") for c in m)
