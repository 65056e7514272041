"""The routing tables as readers want them: every row with its whole ``selectable`` list.

Since table format 3, a ``producer`` scope row of ``routing_table`` does not list its queues:
its ``selectable`` is null unless the producer's own queue list differs from what its route
gives, and ``route`` names the route in force, which the ``routes`` table records once per
change (``writable``: its queues in the order of ``selectable``). The whole list is then the
route's writable queues without the row's ``isolated`` brokers, and an empty list when the row
has no route. Since format 4, a change of a route that leaves a producer's isolated brokers as
they were writes no row for it: its list at an instant is its last row's, with the route in
force *then* (:func:`in_force`). :func:`whole` puts the lists back; :func:`read` reads a job's
rows with them. Rows of a format-2 table (no ``route`` column, every list whole) come back as
they are, so every format, and a table holding several, read alike.

    >>> import pyarrow as pa
    >>> from udfs.schema import TABLES
    >>> queues = [{"broker_name": b, "queue_id": q} for b in "ab" for q in range(2)]
    >>> routes = pa.Table.from_pylist(
    ...     [{"route": "r1", "writable": queues}], schema=TABLES["routes"])
    >>> rows = pa.Table.from_pylist(
    ...     [{"route": "r1", "isolated": [{"broker_name": "a", "until": 9}]}],
    ...     schema=TABLES["routing_table"])
    >>> whole(rows, routes)["selectable"].to_pylist()
    [[{'broker_name': 'b', 'queue_id': 0}, {'broker_name': 'b', 'queue_id': 1}]]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from udfs.errors import FaultlineError
from udfs.schema import TABLES
from udfs.vocabulary import TableName

SELECTABLE = TABLES[TableName.ROUTING_TABLE].field("selectable").type


class RoutingTableError(FaultlineError):
    """The routing-table rows refer to a route the ``routes`` table does not hold."""


def whole(rows: pa.Table, routes: pa.Table | None) -> pa.Table:
    """``routing_table`` rows (of any table format) with every ``selectable`` list: the row's
    own where it has one, else the ``writable`` queues of its ``route`` (a row of ``routes``)
    without its ``isolated`` brokers, or an empty list when it has no route. The rows keep
    their order; a ``route`` column is added to rows without one (format 2). Raises
    :class:`RoutingTableError` when a row's route is not in ``routes``."""
    if "route" not in rows.column_names:
        rows = rows.append_column("route", pa.nulls(len(rows), pa.string()))
    given = rows["selectable"].combine_chunks()
    missing = np.flatnonzero(given.is_null().to_numpy(zero_copy_only=False))
    if not len(missing):
        return rows
    refs = rows["route"].take(missing).to_pylist()
    groups: dict[str | None, list[int]] = {}
    for i, ref in enumerate(refs):
        groups.setdefault(ref, []).append(i)
    writable = _writable(routes, {r for r in groups if r is not None}, rows, missing, refs)
    isolated = rows["isolated"].take(missing).combine_chunks()
    index = np.arange(len(rows))
    pieces = [given]
    size = len(given)
    for ref, where in groups.items():
        at = np.asarray(where)
        # as the given column is typed (a list read from Delta names its item "element")
        pieces.append(_without(writable.get(ref), isolated.take(at)).cast(given.type))
        index[missing[at]] = size + np.arange(len(at))
        size += len(at)
    column = pa.concat_arrays(pieces).take(pa.array(index))
    return rows.set_column(rows.schema.get_field_index("selectable"), "selectable", column)


def _writable(
    routes: pa.Table | None, wanted: set[str], rows: pa.Table, missing: Any, refs: list[Any]
) -> dict[str | None, pa.Array]:
    """The writable queues of each route in ``wanted``, from ``routes``."""
    found: dict[str | None, pa.Array] = {}
    if routes is not None and wanted:
        chosen = routes.filter(pc.is_in(routes["route"], pa.array(sorted(wanted), pa.string())))
        lists = chosen["writable"].combine_chunks()
        for i, ref in enumerate(chosen["route"].to_pylist()):
            found.setdefault(ref, lists[i].values)
    lost = sorted(wanted - found.keys())
    if lost:
        i = refs.index(lost[0])
        topic = rows["topic"][int(missing[i])].as_py()
        raise RoutingTableError(
            f"routing_table rows refer to {len(lost)} route(s) the routes table does not hold "
            f"(the first: {lost[0]}, of topic {topic}); read both tables of the same output "
            "folder, and the routes table whole"
        )
    return found


def _without(queues: pa.Array | None, isolated: pa.ListArray) -> pa.ListArray:
    """Per row of ``isolated`` (a list of isolated brokers), ``queues`` without the queues of
    those brokers; empty lists when there is no route (``queues`` None)."""
    rows = len(isolated)
    if queues is None or len(queues) == 0:
        return pa.ListArray.from_arrays(
            pa.array(np.zeros(rows + 1, np.int32)), pa.array([], SELECTABLE.value_type), SELECTABLE
        )
    names, codes = np.unique(
        queues.field("broker_name").to_numpy(zero_copy_only=False), return_inverse=True
    )
    place = {str(b): i for i, b in enumerate(names)}
    out = np.zeros((rows, len(names)), dtype=bool)
    brokers = pc.list_flatten(isolated).field("broker_name").to_pylist()
    parents = pc.list_parent_indices(isolated).to_numpy()
    for row, broker in zip(parents.tolist(), brokers, strict=True):
        if broker in place:
            out[row, place[broker]] = True
    keep = ~out[:, codes]
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(keep.sum(axis=1), out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise RoutingTableError("more than 2**31 queues at once: read fewer rows at a time")
    values = queues.take(pa.array(np.nonzero(keep)[1]))
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), values, SELECTABLE)


def read(output: Path, where: Any = None) -> pa.Table:
    """The ``routing_table`` rows of a job's (or a replay's) output that match ``where`` (a
    ``pyarrow.dataset`` expression, pushed down: only matching files and row groups are read),
    with their whole lists: each as it was when the row was written."""
    return whole(*_compact(output, where))


def in_force(output: Path, at: int, scope: str, scope_key: str) -> list[dict[str, Any]]:
    """A scope key's routing table of each topic at the instant ``at``, whole, by topic: its
    last row at or before it, where it lists no queue with the route in force at ``at``."""
    import pyarrow.dataset as ds

    where = (
        (ds.field("scope") == scope)
        & (ds.field("scope_key") == scope_key)
        & (ds.field("effective_at") <= at)
    )
    rows, routes = _compact(output, where)
    chosen = rows.take(_last(rows, ["topic"]))
    listed: list[dict[str, Any]] = whole(_route_at(chosen, routes, at), routes).to_pylist()
    return sorted(listed, key=lambda r: r["topic"])


def _last(rows: pa.Table, keys: list[str]) -> pa.Array:
    """The position of the last row of each ``keys``, in the order the rows were written: by
    ``effective_at``, then batch (a stable sort: the rows of a batch at one instant keep the
    order the job wrote them in)."""
    order = pc.sort_indices(rows, [("effective_at", "ascending"), ("batch_id", "ascending")])
    named = zip(*(rows[k].take(order).to_pylist() for k in keys), strict=True)
    last = dict(zip(named, order.to_pylist(), strict=True))
    return pa.array(list(last.values()), pa.int64())


def _route_at(rows: pa.Table, routes: pa.Table | None, at: int) -> pa.Table:
    """The rows (one per topic) that list no queue, with the route of their topic in force at
    ``at`` (the last ``routes`` row at or before it): a producer's row stays in force across
    route changes that leave its isolated brokers as they were."""
    if routes is None:
        return rows
    recorded = routes.filter(pc.less_equal(routes["effective_at"], at))
    now = recorded.take(_last(recorded, ["cluster", "topic"]))
    route = dict(
        zip(
            zip(now["cluster"].to_pylist(), now["topic"].to_pylist(), strict=True),
            now["route"].to_pylist(),
            strict=True,
        )
    )
    refs = [
        route.get((c, t), ref) if missing else ref
        for c, t, ref, missing in zip(
            rows["cluster"].to_pylist(),
            rows["topic"].to_pylist(),
            rows["route"].to_pylist(),
            rows["selectable"].is_null().to_pylist(),
            strict=True,
        )
    ]
    return rows.set_column(
        rows.schema.get_field_index("route"), "route", pa.array(refs, pa.string())
    )


def _compact(output: Path, where: Any) -> tuple[pa.Table, pa.Table | None]:
    """The ``routing_table`` rows as stored, and the ``routes`` their compact rows need."""
    from deltalake import DeltaTable

    table = DeltaTable(str(output / TableName.ROUTING_TABLE))
    rows = table.to_pyarrow_dataset().to_table(filter=where)
    routes = None
    if "route" in rows.column_names and rows["selectable"].null_count:
        routes = DeltaTable(str(output / TableName.ROUTES)).to_pyarrow_table(
            columns=["cluster", "topic", "route", "effective_at", "batch_id", "writable"]
        )
    return rows, routes
