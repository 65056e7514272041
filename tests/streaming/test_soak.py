"""The soak benchmark, shortened to four days of event time in 120 micro-batches: it prints its
figures every 10 batches, and over the second half the checkpoint, the state and every table
(files, bytes, Delta log) stay within 10% of their mid-run peak, because maintenance deletes the
days older than ``keep`` (one day here), VACUUM the replaced files, and Spark the old state and
offsets (its maintenance every 200 ms here, every minute by default).

Batch times and memory are printed but not held to the goal here: on a machine shared with the
rest of the suite they vary more than 10%; ``python -m streaming.bench.soak`` measures them
over 3,000 batches."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.bench import soak

ROOT = Path(__file__).parents[2]
NOISY = ("batch time p50", "read one hour", "RSS")
"""The figures a busy machine moves without a leak (times, and resident memory, which the collector
and the allocator hand back when they like): the test does not hold them. The JVM's live heap it
holds (``streaming.bench.soak.SETTLED``): a leak shows there first."""


def test_the_episodes_cover_the_days_with_unique_ids_rotating_brokers_and_restarts() -> None:
    events = list(soak.soak_events(2))
    ids = [e["event_id"] for e in events]
    assert len(ids) == len(set(ids))
    times = [e["event_time"] for e in events]
    assert times == sorted(times)
    assert soak.START <= times[0] < times[-1] < soak.START + 2 * soak.DAY
    sends = [e for e in events if e["kind"] == "send_result"]
    night = sum(
        soak.START + 3 * soak.HOUR <= e["event_time"] < soak.START + 4 * soak.HOUR for e in sends
    )
    peak = sum(
        soak.START + 14 * soak.HOUR <= e["event_time"] < soak.START + 15 * soak.HOUR for e in sends
    )
    assert 4 * night < peak  # the day's cycle: 0.2 of the peak rate at night
    # each producer restarts once a day under a new instance id
    assert {e["producer_id"] for e in sends} == {
        f"{name}@{generation}" for name, *_ in soak.PRODUCERS for generation in (-1, 0, 1)
    }
    assert any(e["kind"] == "transaction_check" for e in events)
    assert any(e["outcome"] != "SEND_OK" for e in sends)  # the day's incidents
    later = list(soak.soak_events(soak.ROTATE_DAYS + 1))
    routes = {b["broker_name"] for e in later if e["kind"] == "route" for b in e["brokers"]}
    assert routes == {f"broker-{n:03d}" for n in range(soak.BROKERS + 1)}


@pytest.mark.jvm
def test_four_days_in_120_batches_hold_every_resource_to_its_mid_run_peak(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYSPARK_SUBMIT_ARGS": "--conf spark.sql.streaming.stateStore.maintenanceInterval=200ms "
        "pyspark-shell",
    }
    argv = ["--days", "4", "--batches", "120", "--every", "10", "--maintain-every", "10"]
    argv += ["--keep", "1d", "--retain", "10", "--checkpoint-interval", "10"]
    argv += ["--vacuum-retention", "2s", "--log-commits", "4", "--state-store", "hdfs"]
    done = subprocess.run(
        [sys.executable, "-m", "streaming.bench.soak", *argv],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = done.stdout
    assert done.returncode in (0, 1), done.stderr[-3000:]
    lines = [ln for ln in out.splitlines() if re.match(r"\s+\d+\s+\d+\.\d\s", ln)]
    assert [int(ln.split()[0]) for ln in lines] == list(range(10, 121, 10)), (
        out + done.stderr[-3000:]
    )  # a run that stopped early says why on stderr
    assert re.search(r"[1-9]\d* rows expired", out), out  # days older than keep went
    verdicts = re.findall(r"^  (ok  |GREW) (.+?)\s{2,}", out, re.M)
    assert len(verdicts) > 50, out
    grew = [name for state, name in verdicts if state == "GREW"]
    assert [n for n in grew if not n.endswith(NOISY)] == [], out
    assert done.returncode == (1 if grew else 0)
