"""The one stateful operator: ``applyInPandasWithState`` keyed by cluster, calling
:func:`udfs.engine.advance`, then handing each table's rows to the sink's file writer. What goes
back to Spark is only the files' metadata and the counters, so rows never travel back to the
JVM or to the driver."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import TaskContext

from streaming.sink import META, write_file
from udfs import engine
from udfs.schema import EVENTS

STATE_SCHEMA = "state string"
BATCH_ID = "streaming.sql.batchId"
"""The local property Spark sets on every task of a micro-batch."""


def state_function(
    config: engine.EngineConfig, output: str, app_id: str
) -> Callable[[tuple[Any, ...], Iterator[pd.DataFrame], Any], Iterator[pd.DataFrame]]:
    """The function handed to Spark. Spark's contract: it is called once per cluster that has
    rows in the micro-batch, with the rows in no particular order (the engine sorts them); the
    state is one JSON string; there are no timeouts (the engine's clock is event time)."""
    root = Path(output)

    def advance(
        key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any
    ) -> Iterator[pd.DataFrame]:
        context = TaskContext.get()
        assert context is not None, "called outside a Spark task"
        batch_id = int(str(context.getLocalProperty(BATCH_ID)))
        parts = list(frames)
        events = pd.concat(parts, ignore_index=True) if parts else EVENTS.empty_table().to_pandas()
        previous = engine.loads(state.get[0]) if state.exists else None
        step = engine.advance(str(key[0]), previous, events, config)
        state.update((engine.dumps(step.state),))
        metas = [
            write_file(root, name, frame, batch_id, app_id) for name, frame in step.tables.items()
        ]
        metas.append({"table": None, **step.stats, "clock": step.state["clock"]})
        # every column, also when no table got a row (a batch of heartbeats, say)
        yield pd.DataFrame(metas, columns=META.names)

    return advance
