"""A list column given as picked items is the list of each row's items, taken at once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from udfs.engine._output import Out, Picked
from udfs.schema import TABLES
from udfs.vocabulary import TableName

_QUEUE = TABLES[TableName.ROUTING_TABLE].field("selectable").type.value_type
_ROUTES = [
    pa.array([{"broker_name": f"{name}-{i % 3}", "queue_id": i} for i in range(n)], _QUEUE)
    for name, n in (("a", 5), ("b", 7))
]
_PICKS = st.one_of(
    st.none(),
    st.tuples(st.sampled_from([0, 1]), st.lists(st.integers(0, 4), max_size=5, unique=True)),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(_PICKS, min_size=1, max_size=12))
def test_picked_queues_are_each_rows_queues(picks: list[tuple[int, list[int]] | None]) -> None:
    out = Out()
    rows = []
    for i, pick in enumerate(picks):
        value = None if pick is None else Picked(_ROUTES[pick[0]], np.array(sorted(pick[1]), int))
        rows.append(
            {
                "scope": "cluster",
                "scope_key": "c",
                "cluster": "c",
                "topic": "T",
                "effective_at": i,
                "cause_event_id": f"e{i}",
                "selectable": value,
                "isolated": [],
                "route": None,
            }
        )
    out.rows(TableName.ROUTING_TABLE, rows)
    table = out.frames()[TableName.ROUTING_TABLE]
    assert table.schema == TABLES[TableName.ROUTING_TABLE]
    expected = [
        None if p is None else _ROUTES[p[0]].take(pa.array(sorted(p[1]), pa.int64())).to_pylist()
        for p in picks
    ]
    assert table.column("selectable").to_pylist() == expected
