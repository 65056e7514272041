"""Configuration errors name the file, key and value, and never print a secret."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from streaming.cli import _parser
from streaming.config import (
    CONF_DIR,
    DEFAULT_CONFIG,
    JobConfig,
    PoliciesConfig,
    duration_flag,
    load_job_config,
)
from udfs.engine import Policies
from udfs.errors import ConfigError

PROJECT = CONF_DIR.parent


def _error(tmp_path: Path, text: str) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_job_config(path)
    return str(caught.value)


def test_a_bad_delay_level_table_names_file_key_value_and_level(tmp_path: Path) -> None:
    message = _error(tmp_path, "delay_levels: 1s 5s 1.5s\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: delay_levels = '1s 5s 1.5s': ")
    assert "level 3 is '1.5s'" in message


def test_kafka_settings_with_secrets_are_never_printed(tmp_path: Path) -> None:
    message = _error(
        tmp_path,
        "kafka_options:\n  sasl.password: 12345678\n  sasl.username: 42\n  ssl.key.password: 987\n",
    )
    assert "12345678" not in message and "987" not in message
    assert "kafka_options.sasl.password = '***'" in message
    assert "kafka_options.sasl.username = 42" in message


def test_the_kafka_source_needs_its_settings(tmp_path: Path) -> None:
    assert "needs kafka_bootstrap" in _error(tmp_path, "source: kafka\ntopic: t\n")
    message = _error(tmp_path, "source: kafka\nkafka_bootstrap: k:9092\n")
    assert "exactly one of topic, subscribe_pattern" in message


def test_docker_compose_creates_the_topics_the_job_uses() -> None:
    compose = yaml.safe_load((PROJECT / "docker-compose.yml").read_text())
    assert "9092:9092" in compose["services"]["kafka"]["ports"]
    command = " ".join(compose["services"]["topics"]["command"])
    decisions = JobConfig().decisions_topic
    assert f"--topic {decisions} --partitions 1 --replication-factor 1" in command
    assert "cleanup.policy=compact" in command.split(f"--topic {decisions}")[1]
    readme = (PROJECT / "README.md").read_text()
    assert "--topic faultline.events" in command and "--topic faultline.events" in readme
    events = command.split("--topic faultline.events")[1].split("&&")[0]
    assert "--config message.timestamp.type=LogAppendTime" in events


def test_the_shipped_configuration_has_every_setting_and_every_flag_sets_one() -> None:
    """conf/faultline.yaml lists every setting with its default, and each flag of ``faultline
    run`` is the key of its name (the README promises both)."""
    shipped = yaml.safe_load(DEFAULT_CONFIG.read_text())
    assert set(shipped) == set(JobConfig.model_fields)
    assert set(shipped["policies"]) == set(PoliciesConfig.model_fields)
    assert JobConfig.model_validate(shipped) == JobConfig()
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    flags = {a.dest for a in commands.choices["run"]._actions} - {"help", "config"}
    assert flags <= set(shipped), flags - set(shipped)
    assert {"path", "once", "kafka_bootstrap", "topic", "starting_offsets"} <= flags


def test_the_trigger_interval_is_a_duration_above_zero(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("trigger_interval: 1s\n")
    assert load_job_config(path).trigger_interval == 1000
    assert load_job_config(None, {"trigger_interval": "250ms"}).trigger_interval == 250
    assert JobConfig().trigger_interval == 500
    message = _error(tmp_path, "trigger_interval: 0\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: trigger_interval = 0: ")
    assert "more than 0 ms" in message
    assert "trigger_interval = '0ms': " in _error(tmp_path, "trigger_interval: 0ms\n")


def test_a_duration_may_have_a_fraction_that_makes_whole_ms(tmp_path: Path) -> None:
    assert load_job_config(None, {"trigger_interval": "0.5s"}).trigger_interval == 500
    assert duration_flag("--delay", "1.5m") == 90_000
    message = _error(tmp_path, "trigger_interval: 0.0005s\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: trigger_interval = '0.0005s': ")
    assert "that makes whole ms" in message
    with pytest.raises(ConfigError, match="--delay '1,5s': a duration is"):
        duration_flag("--delay", "1,5s")


def test_producers_are_forgotten_only_after_their_longest_isolation(tmp_path: Path) -> None:
    assert JobConfig().evict_silent_producers_after == 3_600_000
    assert (
        load_job_config(None, {"evict_silent_producers_after": "15m"}).evict_silent_producers_after
        == 900_000
    )
    message = _error(tmp_path, "evict_silent_producers_after: 10m\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: evict_silent_producers_after = '10m': ")
    assert "longer than the longest isolation (600000 ms)" in message


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("policies:\n  isolation_cap: 1.5\n", "policies.isolation_cap = 1.5: "),
        ("policies:\n  latency_outlier_factor: 0.5\n", "policies.latency_outlier_factor = 0.5: "),
        ("policies:\n  recovery_probe_share: 0\n", "policies.recovery_probe_share = 0: "),
        ("policies:\n  latency_outlier_window: 0s\n", "policies.latency_outlier_window = '0s': "),
        ("policies:\n  probing: true\n", "policies.probing = True: "),
    ],
)
def test_a_bad_policy_setting_names_its_key(tmp_path: Path, text: str, shown: str) -> None:
    message = _error(tmp_path, text)
    assert message.startswith(f"{tmp_path / 'job.yaml'}: {shown}"), message


def test_the_policies_are_on_by_default_and_one_setting_turns_them_off() -> None:
    from streaming.config import engine_config
    from streaming.tools.evaluate import POLICIES

    policies = engine_config(load_job_config(None)).policies
    assert None not in (policies.isolation_cap, policies.outlier_factor, policies.probe_share)
    assert policies.fault_aware_release and not policies.report_queue_swaps
    # the values evaluate's `faultline + <policy>` rows take when the configuration has none
    for setting in POLICIES.values():
        assert {k: getattr(policies, k) for k in setting} == setting
    # conf/rocketmq-only.yaml: `policies: {enabled: false}`, whatever the other keys say
    assert engine_config(load_job_config(CONF_DIR / "rocketmq-only.yaml")).policies == Policies()
    assert load_job_config(CONF_DIR / "rocketmq-only.yaml").policies.isolation_cap == 0.5
