"""Configuration errors name the file, key and value, and never print a secret."""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from streaming import jars
from streaming.cli import _parser
from streaming.config import (
    CONF_DIR,
    DEFAULT_CONFIG,
    ENGINE_NAMES,
    Duration,
    JobConfig,
    PoliciesConfig,
    add_setting_flags,
    duration_flag,
    engine_config,
    load_job_config,
    setting_fields,
)
from udfs.engine import BrokerTransactions, EngineConfig, Policies
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
    assert "exactly one of topic (--topic) and subscribe_pattern (--subscribe-pattern)" in message


def test_docker_compose_creates_the_topics_the_job_uses() -> None:
    compose = yaml.safe_load((PROJECT / "docker-compose.yml").read_text())
    assert "9092:9092" in compose["services"]["kafka"]["ports"]
    # the Kafka the tests run (conf/jars/pom.xml)
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{jars.version('kafka')}"
    command = " ".join(compose["services"]["topics"]["command"])
    decisions = JobConfig().decisions_topic
    assert f"--topic {decisions} --partitions 1 --replication-factor 1" in command
    assert "cleanup.policy=compact" in command.split(f"--topic {decisions}")[1]
    kafka = (PROJECT / "docs" / "kafka.md").read_text()
    assert "--topic faultline.events" in command and "--topic faultline.events" in kafka
    events = command.split("--topic faultline.events")[1].split("&&")[0]
    assert "--config message.timestamp.type=LogAppendTime" in events


def test_the_shipped_configuration_has_every_setting_and_every_flag_sets_one() -> None:
    """conf/faultline.yaml lists every setting with its default, and each flag of ``faultline
    run`` is the key of its name (docs/running.md promises both)."""
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


def _given(*flags: str) -> dict[str, Any]:
    """The settings ``faultline run`` takes from ``flags``."""
    settings: dict[str, Any] = _parser().parse_args(["run", *flags]).settings
    return settings


def test_every_setting_has_a_flag_that_its_field_reads() -> None:
    """One flag of ``faultline run`` per setting, a block's keys too, with the field's description
    for its help; every default, given as text on the command line, reads back as itself."""
    commands = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = commands.choices["run"]._actions
    defaults = JobConfig()
    values = {}
    for name, value in defaults:
        if isinstance(value, BaseModel):  # a block: policies, maintenance, transactions
            values |= {f"{name}.{key}": v for key, v in value}
        else:
            values[name] = value
    flags = []
    for key, value in values.items():
        [action] = [a for a in actions if getattr(a, "key", None) == key]
        assert action.option_strings[0] == "--" + key.replace("_", "-")
        assert action.help, f"{key} has no description"
        if isinstance(value, bool):  # --once, --no-once
            flags.append(action.option_strings[0 if value else 1])
        elif value is not None:
            text = json.dumps(value) if isinstance(value, dict) else str(value)
            flags += [action.option_strings[0], text]
    given = _given(*flags)
    assert set(given) == {key for key, value in values.items() if value is not None}
    assert load_job_config(None, given) == defaults


def test_flags_win_over_the_file_and_a_block_keeps_its_other_keys(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("once: true\npolicies:\n  enabled: false\n  isolation_cap: 0.4\n")
    config = load_job_config(
        path,
        _given(
            *("--max-records-per-batch", "200", "--no-once", "--scope", "cluster"),
            *("--trigger-interval", "1.5s", "--transactions.check-interval", "40s"),
            *("--policies.latency-outlier-window", "5s", "--policies.no-fault-aware-release"),
            *("--kafka-options", "{security.protocol: SSL}"),
        ),
    )
    assert (config.max_records_per_batch, config.once, config.scope) == (200, False, "cluster")
    assert (config.trigger_interval, config.transactions.check_interval) == (1_500, 40_000)
    assert config.policies == PoliciesConfig(
        enabled=False, isolation_cap=0.4, latency_outlier_window=5_000, fault_aware_release=False
    )
    assert config.kafka_options == {"security.protocol": "SSL"}
    with pytest.raises(ConfigError) as caught:
        load_job_config(path, _given("--policies.isolation-cap", "1.5"))
    assert str(caught.value).startswith(
        "command line --policies.isolation-cap: policies.isolation_cap = '1.5': "
    )


class _Wider(JobConfig):
    grace: Duration = 1_000
    """How long to wait."""


def test_a_new_setting_gets_its_flag_from_its_field() -> None:
    parser = argparse.ArgumentParser()
    add_setting_flags(parser, _Wider)
    [action] = [a for a in parser._actions if "--grace" in a.option_strings]
    assert (action.metavar, action.help) == ("DURATION", "How long to wait. (default: 1s)")
    assert _Wider.model_validate(parser.parse_args(["--grace", "2s"]).settings).grace == 2_000


def test_each_engine_name_is_of_a_setting_and_of_the_engine() -> None:
    """A misspelt name in ENGINE_NAMES would leave the engine with its own default."""
    engine = {"": EngineConfig, "policies.": Policies, "transactions.": BrokerTransactions}
    keys = {key for key, _ in setting_fields()}
    for key, name in ENGINE_NAMES.items():
        block = key.rpartition(".")[0] + "." if "." in key else ""
        assert key in keys and name in {f.name for f in dataclasses.fields(engine[block])}, key


def test_the_command_line_starts_without_spark_or_pandas() -> None:
    """``faultline --help`` builds every flag from the settings, without waiting for Spark."""
    code = (
        "import sys; from streaming.cli import _parser; _parser(); "
        "print(sorted({m.split('.')[0] for m in sys.modules} & "
        "{'pyspark', 'py4j', 'pandas', 'pyarrow', 'deltalake', 'confluent_kafka'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_metrics_endpoint_is_off_unless_a_port_is_set(tmp_path: Path) -> None:
    assert JobConfig().metrics.port is None
    assert JobConfig().metrics.host == "127.0.0.1"
    message = _error(tmp_path, "metrics:\n  port: 70000\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: metrics.port = 70000: ")
    assert load_job_config(None, {"metrics": {"linger": "30s"}}).metrics.linger == 30_000


def test_the_brokers_release_is_one_faultline_knows(tmp_path: Path) -> None:
    config = load_job_config(None, {"transactions": {"broker_release": "5.3.3"}})
    assert engine_config(config).transactions.broker_release == "5.3.3"
    message = _error(tmp_path, "transactions:\n  broker_release: 5.4.0\n")
    assert message.startswith(f"{tmp_path / 'job.yaml'}: transactions.broker_release = '5.4.0': ")
    assert "give 4.x.y, 5.0.0 to 5.3.3, or develop" in message
