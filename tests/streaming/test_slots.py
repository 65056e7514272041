"""Where Spark runs the shards of a cluster: each in a task of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
import pytest
from pyspark import TaskContext

from streaming.job.query import SLOT, slots
from tests.streaming.conftest import settings

pytestmark = pytest.mark.jvm

CLUSTERS = ["FleetCluster", "QuickCluster", "DefaultCluster", "default", "a", "b", "c1", "c2"]


@pytest.fixture
def spark(spark: Any) -> Iterator[Any]:
    """The worker's session with 3 shuffle partitions and, as in a streaming query, no
    coalescing of them."""
    with settings(
        spark, spark__sql__shuffle__partitions="3", spark__sql__adaptive__enabled="false"
    ):
        yield spark


def _tasks(spark: Any, slots: Any, shards: int) -> dict[str, list[int]]:
    """The task that runs each (cluster, slot) group, per cluster, as the job groups them."""
    rows = spark.createDataFrame([(c,) for c in CLUSTERS], "key string")

    def where(frame: pd.DataFrame) -> pd.DataFrame:
        context = TaskContext.get()
        assert context is not None
        return frame.head(1).assign(task=context.partitionId())[["key", "task"]]

    grouped = rows.withColumn(SLOT, slots).groupBy("key", SLOT)
    found: dict[str, list[int]] = {}
    for r in grouped.applyInPandas(where, "key string, task int").collect():
        found.setdefault(r.key, []).append(r.task)
    assert sorted(found) == sorted(CLUSTERS) and all(len(t) == shards for t in found.values())
    return found


@pytest.mark.parametrize("shards", [2, 3])
def test_a_clusters_shards_run_in_distinct_tasks(spark: Any, shards: int) -> None:
    placed = _tasks(spark, slots(shards, 3), shards)
    assert all(len(set(tasks)) == shards for tasks in placed.values()), placed


def test_without_placement_some_shards_would_share_a_task(spark: Any) -> None:
    """What the placement is for: slots 0 and 1 alone fall where the hash puts them."""
    from pyspark.sql import functions as F

    naive = _tasks(spark, F.explode(F.sequence(F.lit(0), F.lit(1))), 2)
    assert any(len(set(tasks)) == 1 for tasks in naive.values()), naive
