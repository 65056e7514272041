"""The job's Prometheus metrics, scraped by a real Prometheus (Debian's ``prometheus``), and
faultline's alert rules under ``promtool``."""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from deltalake import DeltaTable

from streaming.job.metrics import Metrics
from streaming.sim.kafka_broker import free_ports
from tests.engine.test_gauges import read
from tests.streaming.conftest import start
from udfs.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "conf" / "prometheus" / "alerts.yaml"
RULE_TESTS = Path(__file__).with_name("alerts_test.yaml")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["promtool", *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_shipped_rules_and_configuration_pass_promtool() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    config = promtool("check", "config", str(RULES.with_name("prometheus.yaml")))
    assert config.returncode == 0, config.stdout + config.stderr


def test_docker_compose_runs_the_shipped_prometheus_on_the_documented_port() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    service = compose["services"]["prometheus"]
    assert "./conf/prometheus:/etc/prometheus/faultline:ro" in service["volumes"]
    assert "--config.file=/etc/prometheus/faultline/prometheus.yaml" in service["command"]
    shipped = yaml.safe_load(RULES.with_name("prometheus.yaml").read_text())
    assert shipped["rule_files"] == [RULES.name]
    targets = shipped["scrape_configs"][0]["static_configs"][0]["targets"]
    assert targets == ["127.0.0.1:9464"]
    assert "--metrics.port 9464" in (ROOT / "docs" / "metrics.md").read_text()


def test_every_alert_fires_on_a_series_of_its_own() -> None:
    tested = promtool("test", "rules", str(RULE_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case["exp_alerts"]
    }
    assert fired == {a["alert"] for a in alerts}
    for alert in alerts:  # each says what and where to look
        assert alert["annotations"]["summary"]
        page = f"docs/runbook/{alert['alert']}.md"
        assert alert["annotations"]["runbook"].startswith(f"{page}: ")
        assert (ROOT / page).is_file(), page


def _counter_row(cluster: str, shard: int, figures: dict[str, Any], **counts: int) -> Any:
    meta = dict.fromkeys(("valid", "late", "quarantined", "duplicates"), 0) | counts
    return {
        "table": None,
        "clock": 1_800_000_000_000,
        "state_bytes": 100,
        **meta,
        "figures": json.dumps(
            {"cluster": cluster, "shard": shard, "held": [], "publish_failures": 0, **figures}
        ),
    }


def _scrape(metrics: Metrics) -> dict[str, float]:
    server = metrics.serve("127.0.0.1", 0)
    try:
        text = urllib.request.urlopen(server.url, timeout=10).read().decode()
    finally:
        server.stop()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("faultline_")
    }


def test_a_batch_counts_once_and_its_shards_add_up() -> None:
    metrics = Metrics(clock=lambda: 1_800_000_060.0)
    rows = [
        _counter_row(
            "c",
            0,
            {
                "held": [["cluster", "PANIC", 1], ["producer", "ISOLATE", 2]],
                "brokers": {"b1": "PANIC"},
                "topics": {"orders": [3, 1]},
                "halves": 4,
                "quarantine": [["MALFORMED_JSON", 3]],
                "broker_decisions": [["cluster", "PANIC", 1]],
            },
            valid=10,
            quarantined=3,
        ),
        _counter_row("c", 1, {"held": [["producer", "ISOLATE", 5]], "publish_failures": 2}),
    ]
    metrics.committed(rows, new=True)
    metrics.committed(rows, new=False)  # the same batch replayed after its commit
    got = _scrape(metrics)
    assert got['faultline_records_total{cluster="c",outcome="valid"}'] == 10
    assert got['faultline_records_total{cluster="c",outcome="quarantined"}'] == 3
    assert got['faultline_quarantined_records_total{cluster="c",reason="MALFORMED_JSON"}'] == 3
    assert got['faultline_decisions_total{cluster="c",decision="PANIC",scope="cluster"}'] == 1
    assert got["faultline_batches_total"] == 1
    assert got["faultline_kafka_publish_failures_total"] == 2
    assert got['faultline_brokers_isolated{cluster="c",decision="ISOLATE",scope="producer"}'] == 7
    assert got['faultline_brokers_isolated{cluster="c",decision="PANIC",scope="cluster"}'] == 1
    assert got['faultline_brokers_isolated{cluster="c",decision="ISOLATE",scope="cluster"}'] == 0
    assert got['faultline_broker_isolated{broker="b1",cluster="c",decision="PANIC"}'] == 1
    assert got['faultline_topic_isolated_brokers{cluster="c",topic="orders"}'] == 1
    assert got['faultline_half_messages_waiting{cluster="c"}'] == 4
    assert got['faultline_state_bytes{cluster="c"}'] == 200
    assert got['faultline_event_time_lag_seconds{cluster="c"}'] == 60


def test_kafka_outage_seconds_add_up_while_it_does_not_answer() -> None:
    now = [100.0]
    metrics = Metrics(clock=lambda: now[0])
    for t, reachable in ((100, True), (105, False), (110, False), (115, True), (120, True)):
        now[0] = float(t)
        metrics.kafka(reachable, None if reachable else 105.0)
        if t == 110:
            assert _scrape(metrics)["faultline_kafka_unreachable_seconds"] == 5
    got = _scrape(metrics)
    assert got["faultline_kafka_outage_seconds_total"] == 10
    assert got["faultline_kafka_unreachable_seconds"] == 0


def test_a_port_taken_stops_the_job_before_it_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"metrics.port {port}: cannot listen on 127"):
            Metrics().serve("127.0.0.1", port)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A real Prometheus scraping ``127.0.0.1:<job port>`` every second; yields its API's address
    and the job's port."""
    job, web = free_ports(2)
    config = tmp_path / "prometheus.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s"},
                "scrape_configs": [
                    {
                        "job_name": "faultline",
                        "static_configs": [{"targets": [f"127.0.0.1:{job}"]}],
                    }
                ],
            }
        )
    )
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    api = f"http://127.0.0.1:{web}"
    try:
        for _ in range(60):
            try:
                urllib.request.urlopen(f"{api}/-/ready", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        else:
            raise AssertionError((tmp_path / "prometheus.log").read_text()[-2000:])
        yield api, job
    finally:
        proc.terminate()
        proc.wait(30)


def query(api: str, expr: str, **params: str) -> list[dict[str, Any]]:
    path = "query_range" if "step" in params else "query"
    url = f"{api}/api/v1/{path}?" + urllib.parse.urlencode({"query": expr, **params})
    body = json.loads(urllib.request.urlopen(url, timeout=10).read())
    assert body["status"] == "success", body
    return list(body["data"]["result"])


@pytest.mark.jvm
def test_prometheus_sees_what_the_tables_hold(tmp_path: Path, prometheus: tuple[str, int]) -> None:
    """The default scenario, in batches of 4,000 records, scraped every second: the decision
    and record counts equal the tables; at every scrape, the brokers the cluster scope holds out
    are those the rows of the batches committed by then hold out."""
    api, port = prometheus
    began = time.time()
    job = start(
        "run",
        "--metrics.port",
        str(port),
        "--metrics.linger",
        "60s",
        "--max-records-per-batch",
        "4000",
        cwd=tmp_path,
    )
    assert job.stdout is not None
    lines = []
    for line in job.stdout:  # bounded: the simulator's run ends, then lingers
        lines.append(line)
        if "serving http://127.0.0.1" in line:
            break
    else:
        raise AssertionError("".join(lines[-40:]))
    time.sleep(3)  # two more scrapes of the last figures
    try:
        output = tmp_path / "output"
        decisions = DeltaTable(str(output / "broker_decisions")).to_pyarrow_table().to_pylist()
        batches = DeltaTable(str(output / "batches")).to_pandas()
        counted = {
            (r["metric"]["scope"], r["metric"]["decision"]): int(r["value"][1])
            for r in query(api, "faultline_decisions_total")
        }
        assert counted == Counter((r["scope"], r["decision"]) for r in decisions)
        totals = query(api, "faultline_records_total")
        records = {r["metric"]["outcome"]: int(r["value"][1]) for r in totals}
        assert records == {"valid": int(batches["valid"].sum())}  # nothing else in this scenario
        assert int(query(api, "faultline_batches_total")[0]["value"][1]) == len(batches)
        timed = query(api, "faultline_batch_duration_seconds_count")
        assert int(timed[0]["value"][1]) == len(batches)  # Spark's progress of each batch

        # what the rows of batches 0..k hold out, for every k
        after = {-1: {}} | {
            k: read([r for r in decisions if r["batch_id"] <= k])[0]
            for k in sorted(batches["batch_id"])
        }
        end = str(time.time())
        held = query(api, "faultline_broker_isolated", start=str(began), end=end, step="1")
        count = query(api, "faultline_batches_total", start=str(began), end=end, step="1")
        seen: dict[float, dict[str, str]] = {t: {} for t, _ in count[0]["values"]}
        for series in held:
            for t, _ in series["values"]:
                seen.setdefault(t, {})[series["metric"]["broker"]] = series["metric"]["decision"]
        done = dict(count[0]["values"])
        for t, brokers in seen.items():  # a scrape in a commit may see the batch before
            k = int(done[t]) - 1
            assert brokers in (after[k], after[k - 1] if k >= 0 else {}), (t, k, brokers)
        assert any(seen.values())  # some isolation was scraped while it lasted
        final = query(api, 'faultline_brokers_isolated{scope="cluster"}')
        assert sum(int(r["value"][1]) for r in final) == len(after[max(after)])
        routes = query(api, "faultline_topic_writable_brokers")
        assert [(r["metric"]["topic"], r["value"][1]) for r in routes] == [("orders", "6")]
    finally:
        job.kill()
        job.wait(30)
