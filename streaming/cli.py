"""``faultline``: run the streaming job, or write a scenario's events."""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import traceback
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from udfs.errors import ConfigError, FaultlineError
from udfs.vocabulary import TableName

JOB_EXTRA = "pip install 'faultline[job]'"
"""What installs the job's commands: ``pip install faultline`` alone is a producer's client."""

try:
    # the settings are light; Spark, pandas and the rest are imported inside the commands'
    # functions, so that `faultline --help` answers at once
    from streaming.config import add_setting_flags, duration_flag, load_job_config, load_scenario
except ModuleNotFoundError as missing:  # the client's install (streaming.client) only
    print(
        f"faultline: the job's commands need its dependencies ({missing.name} is not installed): "
        f"{JOB_EXTRA}",
        file=sys.stderr,
    )
    raise SystemExit(2) from None


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: ``--out`` is not ``--output``; an unknown command is named with
    the one it resembles."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(allow_abbrev=False, **kwargs)

    def error(self, message: str) -> NoReturn:
        choice = re.match(
            r"argument command: invalid choice: '(.*?)' \(choose from (.*)\)$", message
        )
        if choice is not None:
            commands = re.findall(r"'([^']+)'", choice[2])
            close = difflib.get_close_matches(choice[1], commands, n=1, cutoff=0.6)
            message = f"unknown command {choice[1]!r}" + (
                f"; did you mean {close[0]}?"
                if close
                else f"; the commands are: {', '.join(commands)}"
            )
        super().error(message)


def _unknown(given: str, parser: argparse.ArgumentParser) -> str:
    """``unrecognized argument --ouput; did you mean --output?``"""
    flags = [f for a in parser._actions for f in a.option_strings if f.startswith("--")]
    close = difflib.get_close_matches(given.split("=", 1)[0], flags, n=1, cutoff=0.6)
    return f"unrecognized argument {given}" + (f"; did you mean {close[0]}?" if close else "")


def _version() -> str:
    try:
        return metadata.version("faultline")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _output(command: argparse.ArgumentParser) -> None:
    """``--output``, where a command reads a job's tables: the job's own default, as everywhere."""
    command.add_argument(
        "--output",
        default="output",
        help="a job's (or a replay's) output folder (default: output, as faultline run's)",
    )


def _checkpoint(command: argparse.ArgumentParser, what: str) -> None:
    command.add_argument(
        "--checkpoint", default="checkpoints", help=f"{what} (default: checkpoints, as the job's)"
    )


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="faultline", description=__doc__)
    parser.add_argument("--version", action="version", version=f"faultline {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = commands.add_parser("run", help="run the streaming job")
    run.add_argument("--config", help="YAML settings (default conf/faultline.yaml)")
    add_setting_flags(run)
    rep = commands.add_parser(
        "replay", help="re-run batches of a job from its checkpoint, into tables of their own"
    )
    _checkpoint(rep, "the job's checkpoint (a copy will do)")
    rep.add_argument(
        "--output", default="replay", help="a new folder for the replay's tables (default: replay)"
    )
    rep.add_argument("--from-batch", type=int, required=True, help="the first batch to re-run")
    rep.add_argument("--to-batch", type=int, help="the last one (default: the last committed)")
    rep.add_argument("--config", help="what-if: YAML settings over the ones the job ran with")
    rep.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="what-if: one setting"
    )
    rep.add_argument("--source-path", help="where the source files are now (files, simulator)")
    ex = commands.add_parser(
        "explain", help="why a broker was isolated, a message's path, or a transaction's"
    )
    _output(ex)
    ex.add_argument("--broker", help="the broker")
    ex.add_argument("--at", help="the instant: 2026-11-21T10:02:28 (UTC) or epoch ms")
    ex.add_argument("--cluster", help="the RocketMQ cluster (when the output has several)")
    ex.add_argument("--scope", default="cluster", help="cluster (default) or producer:ID")
    ex.add_argument("--message-id", help="a message: its attempts, delay levels and redelivery")
    ex.add_argument(
        "--transaction", metavar="ID", help="a transactional message: its states, checks, answers"
    )
    ex.add_argument("--json", action="store_true", help="JSON instead of text")
    su = commands.add_parser(
        "status", help="a job's state now (running, stopped, stalled), from its tables alone"
    )
    _output(su)
    su.add_argument("--json", action="store_true", help="JSON instead of text")
    st = commands.add_parser("state", help="print the operator state after a batch")
    _checkpoint(st, "the job's checkpoint")
    st.add_argument("--batch", type=int, help="default: the last committed batch")
    db = commands.add_parser("dashboard", help="a live web page over a job's Delta tables")
    _output(db)
    db.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    db.add_argument("--port", type=int, default=8050, help="default 8050")
    db.add_argument("--refresh", default="5s", help="how often the page reads new rows (5s)")
    db.add_argument(
        "--window", default="24h", help="event time shown before the latest clock (24h), or all"
    )
    ev = commands.add_parser(
        "evaluate", help="run a scenario's incidents under each way of picking queues"
    )
    ev.add_argument("--scenario", default="default", help="conf/scenarios/NAME.yaml or a path")
    ev.add_argument(
        "--delay",
        help="from a decision to producers acting on it (the scenario's); a list "
        "(500ms,1s,2s,4s) prints the sweep",
    )
    ev.add_argument("--plot", metavar="FILE.png", help="draw the figures against the delay")
    ev.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="runs side by side (default: this machine's cores)",
    )
    ev.add_argument("--config", help="YAML settings (default conf/faultline.yaml)")
    mt = commands.add_parser(
        "maintain", help="compact, checkpoint and vacuum a job's Delta tables (safe while it runs)"
    )
    mt.add_argument("--output", help="the job's output folder (default: the configuration's)")
    mt.add_argument("--config", help="YAML settings: the maintenance block is used")
    jr = commands.add_parser(
        "jars", help="fetch the jars of Spark's Kafka source, Delta Lake and the Kafka broker"
    )
    jr.add_argument("action", choices=("fetch", "list"), help="fetch into the cache, or list it")
    jr.add_argument("sets", nargs="*", metavar="SET", help="default: every set")
    sim = commands.add_parser("simulate", help="write a scenario's events without running the job")
    sim.add_argument("--scenario", default="default", help="conf/scenarios/NAME.yaml or a path")
    sim.add_argument(
        "--output", "--out", dest="out", help="a folder for JSON-lines files (--out: the same)"
    )
    sim.add_argument(
        "--reporting",
        choices=("full", "summary"),
        help="how producers and consumers report: every send, or summaries of what cannot "
        "change a decision (default: the scenario's own)",
    )
    sim.add_argument(
        "--config", help="YAML settings: kafka_bootstrap, topic and kafka_options are used"
    )
    sim.add_argument("--kafka-bootstrap", help="Kafka: HOST:PORT[,...]")
    sim.add_argument("--topic", help="Kafka: the topic to publish to")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # named by the command it was given to, with the flag it most resembles
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        command = commands.choices[args.command]
        command.error(_unknown(unknown[0], command))
    code = _main(args)
    if args.command != "simulate":
        # native threads (the JVM gateway's, delta-rs's) can abort an orderly interpreter exit
        # after the job has finished; leave at once with the job's own exit code
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _main(args: argparse.Namespace) -> int:
    """Run the command; its exit code. Output goes to the ``sys.stdout`` of the moment (a caller
    that redirects it, such as the tests' in-process runner, gets it)."""
    try:
        if args.command == "simulate":
            return _simulate(args)
        if args.command == "replay":
            from streaming.tools.replay import replay_command

            return replay_command(args, sys.stdout)
        if args.command == "explain":
            from streaming.tools.explain import explain_command

            return explain_command(args, sys.stdout)
        if args.command == "evaluate":
            from streaming.tools.evaluate import evaluate_command

            return evaluate_command(args, sys.stdout)
        if args.command == "dashboard":
            return _dashboard(args)
        if args.command == "maintain":
            return _maintain(args)
        if args.command == "jars":
            return _jars(args)
        if args.command == "status":
            from streaming.tools.status import status_command

            return status_command(args, sys.stdout)
        if args.command == "state":
            from streaming.tools.replay import state_command

            return state_command(args, sys.stdout)
        return _run(args)
    except FaultlineError as exc:
        print(f"faultline: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a one-line reason, not a traceback
        print(f"faultline: failed: {_reason(exc)}", file=sys.stderr)
        return 1


def _reason(exc: BaseException) -> str:
    """The first line of ``exc``'s message; for one without a message (a bare ``TimeoutError``),
    its type and the line of faultline's code that raised or passed it on.

    >>> def fails() -> None:
    ...     raise TimeoutError
    >>> try:
    ...     fails()
    ... except TimeoutError as exc:
    ...     _reason(exc)
    'TimeoutError (in fails, <doctest streaming.cli._reason[0]>:2)'
    """
    text = str(exc).strip()
    if text:
        return text.splitlines()[0]
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "site-packages" not in f.filename] or frames
    if not ours:
        return type(exc).__name__
    where = ours[-1]
    filename = where.filename
    root = str(Path(__file__).resolve().parent.parent) + os.sep
    if filename.startswith(root):
        filename = filename[len(root) :]
    return f"{type(exc).__name__} (in {where.name}, {filename}:{where.lineno})"


def _run(args: argparse.Namespace) -> int:
    from streaming.job.run import run

    return run(load_job_config(args.config, args.settings), sys.stdout)


def _maintain(args: argparse.Namespace) -> int:
    from streaming.job import sink
    from streaming.job.maintain import maintain, print_reports, table_properties
    from streaming.tools import OUTPUT_HINT

    config = load_job_config(args.config, {"output": args.output})
    output = Path(config.output).resolve()
    if not (output / TableName.BATCHES / "_delta_log").is_dir():
        raise ConfigError(f"--output {output}: no faultline tables here; {OUTPUT_HINT}")
    properties = table_properties(config.maintenance, config.trigger_interval)
    sink.create_tables(output, properties)  # as the job starts
    reports = maintain(output, config.maintenance)
    for r in reports:
        print(
            f"  {r.name:<18} {r.files_before:>6} -> {r.files_after:<6} files, "
            f"{r.compacted} compacted, {r.vacuumed} vacuumed, {r.expired} rows expired, "
            f"{r.seconds:.2f} s"
        )
    print_reports(reports, sys.stdout, f"faultline: maintained {output}")
    return 0


def _jars(args: argparse.Namespace) -> int:
    from streaming import jars

    if args.action == "fetch":
        jars.fetch(args.sets, sys.stdout)
    for name in jars.known(args.sets):
        where = jars.folder(name)
        count = len(list(where.glob("*.jar")))
        print(f"{name:<13} {f'{count} jars in {where}' if count else 'not fetched'}")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    from streaming.tools.dashboard.app import serve

    refresh = duration_flag("--refresh", args.refresh)
    window = None if args.window == "all" else duration_flag("--window", args.window)
    return serve(Path(args.output), args.host, args.port, max(refresh, 200), window)


def _simulate(args: argparse.Namespace) -> int:
    from streaming.sim.simulator import simulate, write_jsonl

    usage = (
        "simulate needs either --output DIR or --kafka-bootstrap HOST:PORT --topic T (which may "
        "also come from --config)"
    )
    if args.out and (args.kafka_bootstrap or args.topic):
        raise ConfigError(usage)
    config = None
    if not args.out:
        kafka = {"kafka_bootstrap": args.kafka_bootstrap, "topic": args.topic}
        config = load_job_config(args.config, kafka)
        if not config.kafka_bootstrap or not config.topic:
            raise ConfigError(usage)
    scenario = load_scenario(args.scenario)
    if args.reporting is not None:
        scenario = scenario.model_copy(update={"reporting": args.reporting})
    events = simulate(scenario)
    if config is None:
        paths = write_jsonl(events, Path(args.out))
        print(f"faultline: {len(events)} events of {args.scenario} in {len(paths)} files")
        return 0
    from streaming.job.publish import check_reachable, publish_events

    check_reachable(config.kafka_conf())
    sent = publish_events(events, config.kafka_conf(), str(config.topic))
    print(f"faultline: {sent} events of {args.scenario} published to {config.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
