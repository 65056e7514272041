"""What the ``faultline`` process says when it refuses to run: exit code 2 and one line naming
what to change, before Spark starts (no JVM)."""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path

from streaming import cli
from streaming.job import publish
from streaming.tools import OUTPUT_HINT
from tests.streaming.conftest import faultline


def test_bad_configuration_stops_before_spark_and_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(
        "scope: everything\nmax_records_per_batch: 0\nunknown_key: 1\ndelay_levels: 1s 5s 10x\n"
        "policies:\n  isolaton_cap: 0.5\nonce: maybe\n"
    )
    result = faultline("run", "--config", str(config), cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    # in the project's words, never pydantic's
    assert f"{config}: scope = 'everything': must be 'cluster', 'producer' or 'both'\n" in (
        result.stderr
    )
    assert f"{config}: max_records_per_batch = 0: must be more than 0\n" in result.stderr
    assert f"{config}: once = 'maybe': must be true or false\n" in result.stderr
    assert f"{config}: unknown_key = 1: unknown key\n" in result.stderr
    assert (
        f"{config}: policies.isolaton_cap = 0.5: unknown key; did you mean isolation_cap?\n"
        in result.stderr
    )
    assert "Input should" not in result.stderr and "Value error" not in result.stderr
    assert f"{config}: delay_levels = '1s 5s 10x': " in result.stderr
    assert "level 3 is '10x'" in result.stderr
    flag = faultline("run", "--scope", "all", cwd=tmp_path, timeout=60)
    assert flag.returncode == 2 and "command line --scope: scope = 'all'" in flag.stderr
    assert not (tmp_path / "output").exists()


def test_a_checkpoint_is_not_resumed_with_another_source(tmp_path: Path) -> None:
    """The quick start's default run, then a Kafka or files run on the same checkpoint: refused,
    before Spark starts, naming both sources."""
    mark = tmp_path / "checkpoints" / "faultline" / "faultline-source.json"
    mark.parent.mkdir(parents=True)
    mark.write_text(json.dumps({"source": "simulator", "scenario": "default"}))
    result = faultline("run", "--source", "files", "--path", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    assert f"checkpoint {mark.parent} belongs to {{'source': 'simulator'" in result.stderr
    assert "give this source its own --checkpoint" in result.stderr
    assert not (tmp_path / "output").exists()


def test_an_unreachable_bootstrap_server_fails_fast_with_one_line(tmp_path: Path) -> None:
    """A refused connection stops the job at once; a server that accepts and never answers, after
    the check's few seconds. Neither leaves a file behind."""
    kafka = ("run", "--source", "kafka", "--topic", "t")
    refused = faultline(*kafka, "--kafka-bootstrap", "127.0.0.1:9", cwd=tmp_path, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "faultline: faultline kafka: cannot reach 127.0.0.1:9: 127.0.0.1:9/bootstrap: Connect to "
        "ipv4#127.0.0.1:9 failed: Connection refused (after 0ms in state CONNECT); is Kafka "
        "running there, and are --kafka-bootstrap and the kafka_options right?"
    ]
    with socket.socket() as silent:  # takes the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        where = f"127.0.0.1:{silent.getsockname()[1]}"
        began = time.monotonic()
        mute = faultline(*kafka, "--kafka-bootstrap", where, cwd=tmp_path, timeout=60)
        took = time.monotonic() - began
    assert mute.returncode == 2 and took >= publish.REACH_TIMEOUT_S
    lines = mute.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"faultline: faultline kafka: cannot reach {where} within 4 s: ")
    assert sorted(tmp_path.iterdir()) == []


def test_a_jar_set_not_fetched_stops_the_job_naming_the_command(tmp_path: Path) -> None:
    """Spark's Kafka source and Delta Lake need jars from Maven Central (conf/jars/pom.xml):
    with an empty jar cache the job stops before Spark starts, naming the command that fetches
    them, and writes nothing; ``faultline jars list`` says what the cache holds."""
    empty = {"FAULTLINE_JARS": str(tmp_path / "jars")}
    cases = [
        (("--source", "kafka", "--kafka-bootstrap", "127.0.0.1:9", "--topic", "t"), "spark-kafka",
         "source: kafka"),
        (("--scenario", "quick", "--sink", "delta-spark"), "delta", "sink: delta-spark"),
    ]  # fmt: skip
    for flags, name, setting in cases:
        result = faultline("run", *flags, cwd=tmp_path, env=empty, timeout=60)
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines() == [
            f"faultline: {setting} needs the jar set '{name}' (conf/jars/pom.xml), not found "
            f"under {tmp_path / 'jars'}: fetch it once with `faultline jars fetch {name}` (Maven, "
            "from Maven Central), or point FAULTLINE_JARS at a folder where it was fetched"
        ]
        assert not (tmp_path / "output").exists() and not (tmp_path / "checkpoints").exists()
    listed = faultline("jars", "list", cwd=tmp_path, env=empty, timeout=60)
    assert listed.returncode == 0
    assert [line.split()[0] for line in listed.stdout.splitlines()] == [
        "spark-kafka",
        "delta",
        "kafka-broker",
        "rocketmq-server",
        "rocketmq-4.7",
        "rocketmq-4.9",
        "rocketmq-5",
        "rocketmq-spring",
    ]
    assert all(line.endswith("not fetched") for line in listed.stdout.splitlines())
    unknown = faultline("jars", "fetch", "kafka", cwd=tmp_path, env=empty, timeout=60)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == (
        "faultline: no jar set kafka; the sets are: spark-kafka, delta, kafka-broker, "
        "rocketmq-server, rocketmq-4.7, rocketmq-4.9, rocketmq-5, rocketmq-spring"
    )


def test_flags_are_never_abbreviated_and_a_misspelled_one_is_named(tmp_path: Path) -> None:
    version = faultline("--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("faultline ")
    for flag in ("--ouput", "--out"):  # --out was --output, abbreviated
        result = faultline("run", flag, "O", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr.splitlines()[-1] == (
            f"faultline run: error: unrecognized argument {flag}; did you mean --output?"
        )
    unknown = faultline("explain", "--output", "O", "--nothing-like-it", cwd=tmp_path)
    assert unknown.stderr.splitlines()[-1] == (
        "faultline explain: error: unrecognized argument --nothing-like-it"
    )
    for flag in ("--output", "--out"):  # simulate: --output, as everywhere; --out stays
        written = faultline("simulate", "--scenario", "quick", flag, f"e{flag}", cwd=tmp_path)
        assert written.returncode == 0 and list((tmp_path / f"e{flag}").glob("*.jsonl"))
    assert not (tmp_path / "O").exists()


def test_what_the_source_reads_is_checked_before_anything_is_made(tmp_path: Path) -> None:
    """One line naming the setting, its value and what to do; no table, no checkpoint."""
    cases = {
        ("--source", "files"): "command line --source: source files needs path (--path DIR): "
        "the folder of JSON-lines or Parquet files",
        ("--source", "files", "--path", "/no/such/folder"): "path /no/such/folder: no such "
        "folder; the files source reads the JSON-lines or Parquet files of a folder (--path DIR)",
        ("--scenario", "quik"): "scenario 'quik': no file ",
    }
    for args, said in cases.items():
        result = faultline("run", *args, "--output", "O", "--checkpoint", "C", cwd=tmp_path)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2
        assert len(lines) == 1 and lines[0].startswith(f"faultline: {said}"), result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_dashboard_on_a_taken_port_stops_in_one_line_before_it_serves(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = faultline(
            "dashboard", "--output", str(tmp_path), "--port", str(port), cwd=tmp_path
        )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"faultline: --port {port}: cannot listen on 127.0.0.1:{port} (Address already in use); "
        "give another --port, or stop what holds it"
    ]


BAD_INPUTS = {
    # every command, given what an operator mistypes: exit 2, and the last line of what it says
    "frobnicate": "faultline: error: unknown command 'frobnicate'; the commands are: run, replay, "
    "explain, status, state, dashboard, evaluate, maintain, jars, simulate",
    "explian --output O": "faultline: error: unknown command 'explian'; did you mean explain?",
    "explain": f"faultline: --output output: no such folder; {OUTPUT_HINT}",  # the job's default
    "replay --from-batch 0": "faultline: --checkpoint checkpoints: not a faultline checkpoint (no "
    "offsets log in it); give the folder the job ran with --checkpoint (checkpoints by default)",
    "replay": "faultline replay: error: the following arguments are required: --from-batch",
    "explain --output nope --broker b": f"faultline: --output nope: no such folder; {OUTPUT_HINT}",
    "dashboard --output . --refresh 5x": "faultline: --refresh '5x': a duration is a whole "
    "number of ms, or a number with ms, s, m, h or d that makes whole ms",
    "replay --checkpoint nope --output R --from-batch 0": "faultline: --checkpoint nope: not a "
    "faultline checkpoint (no offsets log in it); give the folder the job ran with --checkpoint "
    "(checkpoints by default)",
    "state --checkpoint nope": "faultline: --checkpoint nope: not a faultline checkpoint (no "
    "offsets log in it); give the folder the job ran with --checkpoint (checkpoints by default)",
    "evaluate --delay 1x": "faultline: --delay '1x': a duration is a whole number of ms, or a "
    "number with ms, s, m, h or d that makes whole ms",
    "simulate --scenario quick": "faultline: simulate needs either --output DIR or "
    "--kafka-bootstrap HOST:PORT --topic T (which may also come from --config)",
    "run --max-records-per-batch 0": "faultline: command line --max-records-per-batch: "
    "max_records_per_batch = '0': must be more than 0",
    "run --source kafka": "faultline: command line --source: source kafka needs kafka_bootstrap "
    "(--kafka-bootstrap HOST:PORT)",
    "run --ouput O": "faultline run: error: unrecognized argument --ouput; did you mean --output?",
}


def test_every_command_says_what_to_change_in_one_line(tmp_path: Path) -> None:
    """The table of what each command says to a bad input; none makes a file or a folder."""
    for args, said in BAD_INPUTS.items():
        result = faultline(*args.split(), cwd=tmp_path, timeout=60)
        assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (2, said), args
    assert sorted(tmp_path.iterdir()) == []


def test_every_command_answers_help_and_run_groups_its_settings_with_defaults(
    tmp_path: Path,
) -> None:
    parser = cli._parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(commands.choices) >= {"run", "status", "explain", "dashboard", "simulate"}
    for name in commands.choices:
        result = faultline(name, "--help", cwd=tmp_path)
        assert result.returncode == 0 and result.stdout.startswith(f"usage: faultline {name} ")
    run = " ".join(faultline("run", "--help", cwd=tmp_path).stdout.split())  # unwrapped
    for block in ("settings", "policies settings", "maintenance settings", "metrics settings"):
        assert f" {block}: " in run
    assert "--max-records-per-batch INT Records per micro-batch at most. (default: 20000)" in run
    assert "goes to late_events. (default: 1m)" in run  # a duration in its largest whole unit
    assert "--once, --no-once Process what is there, then stop. (default: off)" in run
