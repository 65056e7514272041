"""The dashboard's page: Dash lays out what :class:`~streaming.tools.dashboard.data.Model` holds,
with Plotly charts, and refreshes it on a timer."""

from __future__ import annotations

import io
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from streaming.tools import explain
from streaming.tools.dashboard.data import TRANSACTION_KINDS, Model, TablesError
from streaming.tools.states import BrokerState
from streaming.tools.status import headline, liveness
from streaming.tools.units import duration
from udfs.errors import ConfigError

log = logging.getLogger("faultline.dashboard")

COLORS = {
    BrokerState.ISOLATED: "#d62728",
    BrokerState.OUTLIER: "#9467bd",
    BrokerState.PANIC_KEPT: "#e377c2",
    BrokerState.PROBING: "#17becf",
    BrokerState.OUT_OF_ROUTE: "#7f7f7f",
}
"""The timeline's bar of each state other than available."""
FAILURE = "#ff7f0e"
BADGE = {"running": "#2ca02c", "stopped": "#555", "no batch yet": "#555"}
"""The liveness badge's colour per state (any other: red, the job may be gone)."""
SLOWEST = 5
"""The brokers the latency chart draws by default: the highest p99 over the window."""
PAGE = {"fontFamily": "system-ui, sans-serif", "margin": "0 1.5em", "fontSize": "14px"}
WINDOW_ROWS = 200
"""The most recent windows listed under the timeline (the chart has them all)."""
FIELD = {"display": "inline-block", "width": "10em"}
CELL = {
    "padding": "2px 8px",
    "borderBottom": "1px solid #ddd",
    "textAlign": "left",
    "whiteSpace": "nowrap",
    "verticalAlign": "top",
}
TEXT = {**CELL, "whiteSpace": "normal", "overflowWrap": "anywhere"}
"""A cell of free text (a reason): it wraps within the page's width."""


@dataclass(frozen=True)
class View:
    """What the person chose on the page, beside the cluster."""

    producers: tuple[str, ...] = ()
    """The producers whose own isolations the timeline adds."""
    every_broker: bool = False
    """Whether the latency chart draws every broker, not only the :data:`SLOWEST`."""


def iso(ms: Any) -> str:
    """An event time (epoch ms, maybe a missing value) as ``faultline explain`` prints it."""
    return explain.iso(None if ms is None or pd.isna(ms) else int(ms))


def _utc(ms: Any) -> Any:
    return pd.to_datetime(ms, unit="ms", utc=True)


def table(
    rows: list[list[Any]], header: list[str], id_: str, text: tuple[str, ...] = ()
) -> html.Table:
    """A plain HTML table: what a person reads, and what the browser test reads back. The
    columns named in ``text`` wrap (and the table takes the page's width at most)."""
    styles = [TEXT if h in text else CELL for h in header]
    return html.Table(
        [
            html.Thead(html.Tr([html.Th(h, style=CELL) for h in header])),
            html.Tbody(
                [
                    html.Tr([html.Td(str(c), style=st) for c, st in zip(r, styles, strict=True)])
                    for r in rows
                ]
            ),
        ],
        id=id_,
        style={"borderCollapse": "collapse", "margin": "0.5em 0", "maxWidth": "100%"},
    )


class Page:
    """The model behind the page, refreshed by at most one request at a time."""

    def __init__(self, output: Path, window_ms: int | None):
        self.output = output
        self.model = Model(output, window_ms)
        self.lock = threading.Lock()
        self.problem: str | None = None
        self.refresh_ms = 0.0

    def refresh(self) -> None:
        with self.lock:
            started = time.perf_counter()
            try:
                self.model.refresh()
                problem = None
            except TablesError as exc:
                problem = str(exc)
                self.model = Model(self.output, self.model.window_ms)  # start over once fixed
            except Exception as exc:  # a table mid-write, a file gone: keep the last view
                problem = f"could not read the tables of {self.output}: {exc}"
            if problem != self.problem and problem is not None:
                log.warning("faultline dashboard: %s", problem)
            self.problem = problem
            self.refresh_ms = (time.perf_counter() - started) * 1000


KEPT_DRAWINGS = 16
"""Drawings kept for the requests that come while another draws (per cluster and producers)."""


def build(page: Page, refresh_ms: int) -> Dash:
    """The Dash app: one callback refreshes the model and redraws every section."""
    app = Dash(__name__, title="faultline", update_title="")
    app.layout = html.Div(
        [
            html.Div(
                [
                    html.H2("faultline", style={"margin": "0.4em 1em 0.4em 0"}),
                    dcc.Dropdown(id="cluster", clearable=False, style={"width": "18em"}),
                    html.Span(id="badge", style={"marginLeft": "1.5em"}),
                    html.Span(id="status", style={"marginLeft": "1.5em", "color": "#555"}),
                ],
                style={"display": "flex", "alignItems": "center"},
            ),
            html.Div(id="problem"),
            html.H3("Now"),
            html.Div(id="now"),
            html.H3("Timeline"),
            html.Div(
                [
                    html.Span("Producers' own isolations: "),
                    dcc.Dropdown(id="producers", multi=True, style={"width": "30em"}),
                ],
                style={"display": "flex", "alignItems": "center"},
            ),
            dcc.Graph(id="timeline", config={"displaylogo": False}),
            html.Div(
                [
                    html.Span("Explain "),
                    dcc.Input(
                        id="explain-broker", placeholder="broker", debounce=True, style=FIELD
                    ),
                    html.Span(" at "),
                    dcc.Input(
                        id="explain-at",
                        placeholder="2026-11-21 10:02:00 (UTC)",
                        debounce=True,
                        style={**FIELD, "width": "16em"},
                    ),
                    html.Span(" scope "),
                    dcc.Input(id="explain-scope", value="cluster", debounce=True, style=FIELD),
                    html.Button("explain", id="explain-go", style={"marginLeft": "0.5em"}),
                    html.Span(
                        " (or click a bar or a failure on the timeline)", style={"color": "#555"}
                    ),
                ]
            ),
            html.Pre(
                id="explain",
                style={"background": "#f6f6f6", "padding": "0.5em", "whiteSpace": "pre-wrap"},
            ),
            html.Div(id="windows"),
            html.H3("Send latency and failures per minute"),
            dcc.Checklist(
                id="latency-all",
                options=[{"label": " every broker", "value": "all"}],
                value=[],
                inline=True,
            ),
            html.Div(id="latency-shown", style={"color": "#555"}),
            dcc.Graph(id="latency", config={"displaylogo": False}),
            dcc.Graph(id="failures", config={"displaylogo": False}),
            html.H3("Routing decisions per minute (cluster scope)"),
            dcc.Graph(id="routing", config={"displaylogo": False}),
            html.Div(id="retries"),
            html.H3("Delay levels (SCHEDULE_TOPIC_XXXX)"),
            html.Div(id="delays"),
            dcc.Graph(id="delay-chart", config={"displaylogo": False}),
            html.H3("Transactional messages"),
            html.Div(id="transactions"),
            dcc.Graph(id="transaction-chart", config={"displaylogo": False}),
            html.H3("Quarantine and late events"),
            html.Div(id="rejected"),
            html.H3("Job health"),
            html.Div(id="health-text"),
            dcc.Graph(id="health", config={"displaylogo": False}),
            dcc.Interval(id="tick", interval=refresh_ms),
        ],
        style=PAGE,
    )

    drawing = threading.Lock()
    drawn: dict[tuple[str | None, View], list[Any]] = {}

    @app.callback(
        Output("cluster", "options"),
        Output("cluster", "value"),
        Output("producers", "options"),
        Output("problem", "children"),
        *[Output(name, "figure" if name in FIGURES else "children") for name in SECTIONS],
        Output("tick", "interval"),
        Input("tick", "n_intervals"),
        Input("cluster", "value"),
        Input("producers", "value"),
        Input("latency-all", "value"),
    )
    def redraw(
        _: Any, cluster: str | None, producers: list[str] | None, every: list[str] | None
    ) -> list[Any]:
        """A tick that comes while the browser waits for an answer makes it drop that answer,
        so a page slower to draw than --refresh (a busy machine, large tables) would never
        change. A request that comes while another draws is answered at once with the last
        drawing for its inputs, and the ticks slow down to twice the time a drawing takes."""
        view = View(tuple(producers or ()), "all" in (every or ()))
        inputs = (cluster, view)
        if not drawing.acquire(blocking=False):
            if inputs in drawn:
                return drawn[inputs]
            drawing.acquire()  # nothing drawn for these inputs yet: wait for the draw under way
        try:
            started = time.perf_counter()
            result = _redraw(cluster, view)
            took = (time.perf_counter() - started) * 1000
            result.append(max(refresh_ms, round(2 * took)))
            if len(drawn) >= KEPT_DRAWINGS:
                drawn.clear()
            drawn[inputs] = result
            return result
        finally:
            drawing.release()

    def _redraw(cluster: str | None, view: View) -> list[Any]:
        page.refresh()
        clusters = page.model.clusters()
        if cluster not in clusters:
            cluster = clusters[0] if clusters else None
        problem = (
            html.Div(
                page.problem,
                id="problem-text",
                style={"background": "#fde2e1", "padding": "0.6em", "border": "1px solid #d62728"},
            )
            if page.problem
            else None
        )
        if cluster is None:
            blank = [go.Figure() if name in FIGURES else None for name in SECTIONS]
            blank[list(SECTIONS).index("now")] = _nothing()
            blank[list(SECTIONS).index("badge")] = _badge(page)
            return [[], None, [], problem, *blank]
        options = [{"label": p, "value": p} for p in page.model.producers(cluster)]
        drawn = sections(page, cluster, view)
        return [[{"label": c, "value": c} for c in clusters], cluster, options, problem, *drawn]

    @app.callback(
        Output("explain-broker", "value"),
        Output("explain-at", "value"),
        Output("explain-scope", "value"),
        Input("timeline", "clickData"),
        prevent_initial_call=True,
    )
    def clicked(click: dict[str, Any] | None) -> tuple[Any, Any, Any]:
        if not click or not click.get("points"):
            return no_update, no_update, no_update
        broker, scope, at = click["points"][0]["customdata"][:3]
        return broker, iso(at), scope

    @app.callback(
        Output("explain", "children"),
        Input("explain-go", "n_clicks"),
        Input("explain-broker", "value"),
        Input("explain-at", "value"),
        Input("explain-scope", "value"),
        State("cluster", "value"),
        prevent_initial_call=True,
    )
    def explained(_: Any, broker: str, at: str, scope: str, cluster: str | None) -> str:
        if ctx.triggered_id != "explain-go" and not (broker and at):
            return ""
        if not broker or not at:
            return "give a broker and a time"
        try:
            answer = explain.broker_at(
                page.output, broker, explain.parse_time(at), cluster, scope or "cluster"
            )
        except explain.ExplainError as exc:
            return str(exc)
        out = io.StringIO()
        explain.print_broker(answer, out)
        return out.getvalue()

    return app


def _nothing() -> html.Div:
    return html.Div("nothing yet: no batch has written these tables", style={"color": "#555"})


def _badge(page: Page) -> html.Span:
    """Whether the job runs, as ``faultline status`` says it (:func:`~streaming.tools.status.
    liveness`): live, stalled (no sign of the job and no end recorded) or stopped."""
    b = page.model.batches
    last = b["committed_at"].max() if len(b) else None
    live = liveness(page.output, None if last is None or pd.isna(last) else int(last))
    seen = "" if live["seen_s"] is None else f"the job's last sign {duration(live['seen_s'])} ago"
    color = BADGE.get(live["state"], "#d62728")
    return html.Span(
        headline(live),
        id="badge-text",
        title=seen,
        style={
            "color": "white",
            "background": color,
            "padding": "0.2em 0.6em",
            "borderRadius": "0.8em",
            "fontWeight": "bold",
            "whiteSpace": "nowrap",
        },
    )


def _status(page: Page, cluster: str) -> str:
    model = page.model
    clock = model.clock(cluster)
    text = f"clock {iso(clock)} UTC"
    if len(model.batches):
        last = model.batches.iloc[-1]
        text += f" · last batch {int(last['batch_id'])}"
        if pd.notna(last["committed_at"]):
            text += f" committed {iso(last['committed_at'])} UTC"
    return text + f" · refreshed in {page.refresh_ms:.0f} ms"


def _now(model: Model, cluster: str) -> Any:
    now = model.now(cluster)
    if now.empty:
        return html.Div(f"Every broker available at {iso(model.clock(cluster))}.")
    rows = [
        [
            "cluster" if r["scope"] == "cluster" else f"producer {r['scope_key']}",
            r["broker_name"],
            r["state"],
            iso(r["start"]),
            _until(r),
            "; ".join(x for x in (r["reason"], r["band"], r["profile"]) if x),
        ]
        for r in now.to_dict("records")
    ]
    header = ["scope", "broker", "state", "since", "until", "why"]
    return table(rows, header, "now-table", text=("why",))


def _until(window: dict[Any, Any]) -> str:
    if window["state"] == BrokerState.OUT_OF_ROUTE:
        return "its next heartbeat"
    if window["state"] == BrokerState.PANIC_KEPT:
        return "room under the isolation cap"
    return iso(window["until"])


def _label(row: dict[Any, Any]) -> str:
    scope = "" if row["scope"] == "cluster" else f" · {row['scope_key']}"
    return f"{row['broker_name']}{scope}"


def _timeline(model: Model, cluster: str, producers: list[str]) -> go.Figure:
    windows = model.windows(cluster, producers)
    clock = model.clock(cluster)
    fig = go.Figure()
    for kind, color in COLORS.items():
        w = windows[windows["state"] == kind]
        if w.empty:
            continue
        end = w["end"].fillna(max(clock or 0, 0)).astype("int64")
        records = w.to_dict("records")
        fig.add_trace(
            go.Bar(
                name=kind,
                orientation="h",
                y=[_label(r) for r in records],
                base=_utc(w["start"]),
                x=(end - w["start"]).clip(lower=200),
                marker_color=color,
                customdata=[
                    [
                        r["broker_name"],
                        "cluster" if r["scope"] == "cluster" else f"producer:{r['scope_key']}",
                        r["start"],
                    ]
                    for r in records
                ],
                hovertext=[
                    f"{kind} {iso(r['start'])} - {iso(r['end'])}<br>{r['reason']}" for r in records
                ],
                hoverinfo="text",
            )
        )
    marks = model.failed_sends(cluster)
    if not marks.empty:
        span = int(marks["span"].iloc[0])
        per = {1_000: "second", 60_000: "minute", 600_000: "10 minutes"}.get(span, "hour")
        fig.add_trace(
            go.Scatter(
                name=f"failed sends (per {per})",
                mode="markers",
                x=_utc(marks["at"]),
                y=marks["broker_name"],
                marker={"color": FAILURE, "symbol": "x", "size": 7},
                customdata=[
                    [b, "cluster", t]
                    for b, t in zip(marks["broker_name"], marks["at"], strict=True)
                ],
                hovertext=[
                    f"{n} failed sends in the {per} from {iso(t)}"
                    for n, t in zip(marks["failures"], marks["at"], strict=True)
                ],
                hoverinfo="text",
            )
        )
    brokers = model.latency(cluster)["broker_name"]
    labels = sorted({*map(_label, windows.to_dict("records")), *brokers, *marks["broker_name"]})
    if labels and clock is not None:  # a row for every broker, also one never isolated
        fig.add_trace(
            go.Scatter(
                x=_utc([clock] * len(labels)),
                y=labels,
                mode="markers",
                marker={"opacity": 0},
                showlegend=False,
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        barmode="overlay",
        height=140 + 28 * max(len(labels), 1),
        margin={"l": 10, "r": 10, "t": 10, "b": 30},
        xaxis={"type": "date", "title": "event time (UTC)"},
        yaxis={"categoryorder": "array", "categoryarray": labels[::-1]},
        legend={"orientation": "h"},
    )
    return fig


def _windows(model: Model, cluster: str, producers: list[str]) -> html.Div:
    every = model.windows(cluster, producers)
    w = every.sort_values("start", kind="stable").tail(WINDOW_ROWS)
    w = w.sort_values(["broker_name", "start"], kind="stable")
    rows = [
        [
            r["broker_name"],
            "cluster" if r["scope"] == "cluster" else f"producer {r['scope_key']}",
            r["state"],
            iso(r["start"]),
            iso(r["end"]) if pd.notna(r["end"]) else "running",
            "" if pd.isna(r["end"]) else duration((r["end"] - r["start"]) / 1000),
            r["extends"],
            r["reason"],
        ]
        for r in w.to_dict("records")
    ]
    header = ["broker", "scope", "state", "from", "to", "length", "extended", "first reason"]
    shown = f"the last {len(w)} of {len(every)} windows" if len(w) < len(every) else ""
    return html.Div([html.Div(shown), table(rows, header, "windows-table", text=("first reason",))])


def _per_broker_lines(frame: pd.DataFrame, column: str, dash_: str | None) -> list[go.Scatter]:
    return [
        go.Scatter(
            name=f"{broker} {column}",
            x=_utc(part["minute"]),
            y=part[column],
            mode="lines+markers",
            line={"dash": dash_} if dash_ else {},
        )
        for broker, part in frame.groupby("broker_name")
    ]


def _drawn_brokers(model: Model, cluster: str, view: View) -> list[str]:
    slowest = model.slowest(cluster)
    return slowest if view.every_broker else slowest[:SLOWEST]


def _latency_shown(model: Model, cluster: str, view: View) -> str:
    slowest = model.slowest(cluster)
    if len(slowest) <= SLOWEST:
        return ""
    if view.every_broker:
        return f"all {len(slowest)} brokers"
    return (
        f"the {SLOWEST} of {len(slowest)} brokers with the highest p99 in the window "
        f"({', '.join(slowest[:SLOWEST])}); tick 'every broker' for the rest"
    )


def _latency(model: Model, cluster: str, view: View) -> go.Figure:
    lat = model.latency(cluster)
    lat = lat[lat["broker_name"].isin(_drawn_brokers(model, cluster, view))]
    fig = go.Figure([*_per_broker_lines(lat, "p50", None), *_per_broker_lines(lat, "p99", "dot")])
    fig.update_layout(
        height=320,
        margin={"l": 10, "r": 10, "t": 30, "b": 30},
        title="send latency per minute, p50 (solid) and p99 (dotted), ms",
        yaxis={"type": "log"},
    )
    return fig


def _per_minute(
    frame: pd.DataFrame, by: list[str], value: str, name: str, title: str, mode: str = "stack"
) -> go.Figure:
    """Bars per minute, one series per group of ``by`` (named by ``name`` formatted with the
    group's values)."""
    fig = go.Figure(
        [
            go.Bar(name=name.format(*key), x=_utc(part["minute"]), y=part[value])
            for key, part in frame.groupby(by)
        ]
    )
    margin = {"l": 10, "r": 10, "t": 30, "b": 30}
    fig.update_layout(barmode=mode, height=260, margin=margin, title=title)
    return fig


def _failures(model: Model, cluster: str) -> go.Figure:
    lat = model.latency(cluster)
    failed = lat[lat["failures"] > 0]
    return _per_minute(failed, ["broker_name"], "failures", "{}", "failed sends per minute")


def _routing(model: Model, cluster: str) -> go.Figure:
    r = model.routing_minutes(cluster)
    per = r.groupby(["selected_broker", "minute"], as_index=False)[["decisions"]].sum()
    title = "retries per minute, by the broker the next attempt goes to"
    return _per_minute(per, ["selected_broker"], "decisions", "to {}", title)


def _retries(model: Model, cluster: str) -> html.Table:
    r = model.routing_minutes(cluster)
    per = (
        r.groupby(["failed_broker", "selected_broker", "rule"], as_index=False)[["decisions"]]
        .sum()
        .sort_values("decisions", ascending=False)
    )
    rows = [
        [x["failed_broker"], x["selected_broker"], x["rule"], x["decisions"]]
        for x in per.to_dict("records")
    ]
    return table(rows, ["failed on", "retried on", "rule", "decisions"], "retries-table")


def _delays(model: Model, cluster: str) -> html.Table:
    levels = model.delay_levels(cluster)
    rows = [
        [
            "DLQ at once" if r["delay_level"] == 0 else f"level {r['delay_level']}",
            r["scheduled"],
            r["released"],
            r["waiting"],
            r["dlq"],
        ]
        for r in levels.to_dict("records")
    ]
    header = ["level", "scheduled", "released", "waiting", "to DLQ"]  # the run summary's order
    return table(rows, header, "delay-table")


def _delay_chart(model: Model, cluster: str) -> go.Figure:
    title = "messages per minute into (scheduled) and out of (released, to DLQ) each level"
    by = ["delay_level", "what"]
    return _per_minute(model.delay_minutes(cluster), by, "messages", "level {} {}", title, "group")


def _transactions(model: Model, cluster: str) -> html.Div:
    totals = model.transaction_totals(cluster)
    waiting = model.transactions_waiting(cluster)
    if totals["all"] == 0 and waiting.empty:
        return html.Div("No transactional messages.", id="transactions-none")
    clock = model.clock(cluster)
    rows = [
        [
            r["broker_name"],
            r["waiting"],
            iso(r["born_at"]),
            "-" if pd.isna(r["age"]) else duration(r["age"] / 1000),
            iso(r["next_check_at"]),
        ]
        for r in waiting.to_dict("records")
    ]
    header = ["broker", "half messages waiting", "oldest born", "age of the oldest", "next check"]
    kinds = list(dict.fromkeys(TRANSACTION_KINDS.values()))
    waiting_now = (
        [
            html.Div(f"Half messages waiting for an end or a check at the clock, {iso(clock)}:"),
            table(rows, header, "transactions-waiting-table"),
        ]
        if rows
        else [html.Div(f"No half message waiting at {iso(clock)}.", id="transactions-waiting")]
    )
    return html.Div(
        [
            *waiting_now,
            html.Div("In the window (per minute below):", style={"marginTop": "0.5em"}),
            table([[totals[k] for k in kinds]], kinds, "transactions-totals-table"),
        ]
    )


def _transaction_chart(model: Model, cluster: str) -> go.Figure:
    per = model.transaction_minutes(cluster)
    title = "per minute: the brokers' checks, half messages discarded or skipped, ends sent to an "
    title += "unavailable broker (likely lost), ends rejected"
    fig = _per_minute(per, ["what"], "rows", "{}", title, "group")
    if per.empty:
        fig.update_layout(height=160)
        fig.add_annotation(text="no check, discard or lost end in the window", showarrow=False)
    return fig


def _rejected(model: Model, cluster: str) -> html.Div:
    q = model.quarantined.sort_values("records", ascending=False)
    rows = [
        [
            r["reason_code"],
            r["records"],
            " | ".join(
                f"{e['origin']}: {e['raw']}"
                for e in model.quarantine_examples.get(r["reason_code"], [])
            ),
        ]
        for r in q.to_dict("records")
    ]
    late = model.late_total[model.late_total["cluster"] == cluster]
    late_rows = [
        [
            r["kind"],
            r["events"],
            " | ".join(
                f"{e['origin']}: event {iso(e['event_time'])} at clock {iso(e['clock'])}"
                for e in model.late_examples.get((cluster, r["kind"]), [])
            ),
        ]
        for r in late.to_dict("records")
    ]
    return html.Div(
        [
            table(rows, ["reason code", "records", "examples"], "quarantine-table")
            if rows
            else html.Div("No record quarantined.", id="quarantine-table"),
            table(late_rows, ["late events", "events", "examples"], "late-table")
            if late_rows
            else html.Div("No late event.", id="late-table"),
        ]
    )


def _health_text(model: Model) -> str:
    b = model.batches
    if b.empty:
        return "no batch yet"
    last = b.iloc[-1]
    lag = (
        f"; the clock is {duration((last['committed_at'] - last['clock']) / 1000)} behind wall time"
        if pd.notna(last["committed_at"]) and pd.notna(last["clock"])
        else ""
    )
    spark = ""
    done = b[b["processed_rows_per_second"].notna()]
    if len(done):  # Spark's progress comes with the next batch
        p = done.iloc[-1]
        spark = (
            f"; Spark, batch {int(p['batch_id'])}: {p['processed_rows_per_second']:,.0f} "
            f"rows/s processed, {int(p['batch_ms'])} ms, state {int(p['state_rows'])} rows in "
            f"{p['state_memory_bytes'] / 1e6:,.2f} MB"
        )
    covered = last.get("messages")
    covered = (
        f" standing for {int(covered):,} messages"
        if pd.notna(covered) and int(covered) != int(last["valid"])
        else ""
    )  # producers that report in summaries
    return (
        f"{len(b)} batches shown; last: batch {int(last['batch_id'])}, {int(last['input'])} "
        f"records{covered} in {int(last['write_ms'] + last['commit_ms'])} ms{lag}{spark}"
    )


def _health(model: Model) -> go.Figure:
    b = model.batches
    fig = go.Figure(
        [
            go.Bar(name="records", x=b["batch_id"], y=b["input"], yaxis="y"),
            go.Scatter(
                name="batch duration (ms)",
                x=b["batch_id"],
                y=b["write_ms"] + b["commit_ms"],
                yaxis="y2",
                mode="lines+markers",
            ),
            go.Scatter(
                name="messages covered",
                x=b["batch_id"],
                y=b["messages"],
                yaxis="y4",
                mode="lines+markers",
            ),
            go.Scatter(
                name="processed rows/s (Spark)",
                x=b["batch_id"],
                y=b["processed_rows_per_second"],
                yaxis="y3",
                mode="lines",
                visible="legendonly",
            ),
            go.Scatter(
                name="lag: wall time - clock (s)",
                x=b["batch_id"],
                y=(b["committed_at"] - b["clock"]) / 1000,
                yaxis="y3",
                mode="lines",
                visible="legendonly",
            ),
        ]
    )
    fig.update_layout(
        height=280,
        margin={"l": 10, "r": 10, "t": 30, "b": 30},
        xaxis={"title": "batch", "type": "category"},
        yaxis={"title": "records"},
        yaxis2={"title": "ms", "overlaying": "y", "side": "right"},
        yaxis3={"overlaying": "y", "side": "right", "visible": False},
        yaxis4={"overlaying": "y", "side": "left", "visible": False, "rangemode": "tozero"},
        legend={"orientation": "h"},
    )
    return fig


SECTIONS: dict[str, Callable[[Page, str, View], Any]] = {
    "badge": lambda page, _, __: _badge(page),
    "status": lambda page, c, _: _status(page, c),
    "now": lambda page, c, _: _now(page.model, c),
    "timeline": lambda page, c, view: _timeline(page.model, c, list(view.producers)),
    "windows": lambda page, c, view: _windows(page.model, c, list(view.producers)),
    "latency-shown": lambda page, c, view: _latency_shown(page.model, c, view),
    "latency": lambda page, c, view: _latency(page.model, c, view),
    "failures": lambda page, c, _: _failures(page.model, c),
    "routing": lambda page, c, _: _routing(page.model, c),
    "retries": lambda page, c, _: _retries(page.model, c),
    "delays": lambda page, c, _: _delays(page.model, c),
    "delay-chart": lambda page, c, _: _delay_chart(page.model, c),
    "transactions": lambda page, c, _: _transactions(page.model, c),
    "transaction-chart": lambda page, c, _: _transaction_chart(page.model, c),
    "rejected": lambda page, c, _: _rejected(page.model, c),
    "health-text": lambda page, _, __: _health_text(page.model),
    "health": lambda page, _, __: _health(page.model),
}
"""Each section of the page (the id of its element) and what draws it for a cluster."""
FIGURES = {
    "timeline",
    "latency",
    "failures",
    "routing",
    "delay-chart",
    "transaction-chart",
    "health",
}
"""The sections that are charts (their ``figure`` changes, not their ``children``)."""


def sections(page: Page, cluster: str, view: View) -> list[Any]:
    """Every section of the page for a cluster, in :data:`SECTIONS` order."""
    return [draw(page, cluster, view) for draw in SECTIONS.values()]


def serve(output: Path, host: str, port: int, refresh_ms: int, window_ms: int | None) -> int:
    """Serve the page until interrupted; a port that cannot be bound stops it first, in one line."""
    check_port(host, port)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    page = Page(output, window_ms)
    page.refresh()
    app = build(page, refresh_ms)
    print(f"faultline dashboard: http://{host}:{port}/ over {output}", flush=True)
    app.run(host=host, port=port, debug=False)
    return 0


def check_port(host: str, port: int) -> None:
    """Bind ``host:port`` once, before anything is printed or read: a port in use (another
    dashboard, the job's metrics) is a :class:`ConfigError` that says what to do."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); "
                "give another --port, or stop what holds it"
            ) from None
