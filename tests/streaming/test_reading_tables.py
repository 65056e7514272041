"""The examples of ``docs/reading-tables.md`` work: each code block, as a user pastes it, runs on
the tables of the default run (the quick start's command, ``default_run``) and its own assertions
hold. The Spark example runs on this worker's Spark session, which has Delta Lake: its builder's
``getOrCreate`` returns that session."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.streaming.conftest import DefaultRun, settings

pytestmark = pytest.mark.jvm

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reading-tables.md"
READERS = ("deltalake", "pandas", "polars", "Spark")


def examples() -> dict[str, list[str]]:
    """The page's Python blocks, by the heading of their section (``## deltalake``, ...)."""
    text = PAGE.read_text()
    found: dict[str, list[str]] = {}
    for title, body in re.findall(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.S | re.M):
        blocks = re.findall(r"^```python\n(.*?)^```", body, re.S | re.M)
        if blocks:
            found[title] = blocks
    return found


def run(reader: str, output: Path, **names: Any) -> None:
    """Runs the reader's examples with ``output/`` where the default run wrote its tables (an
    absolute path: Spark resolves a relative one against the JVM's folder, not Python's)."""
    for number, example in enumerate(examples()[reader]):
        code = example.replace('"output/', f'"{output}/')
        assert code != example, f"{reader}'s example {number} reads no table under output/"
        exec(compile(code, f"{PAGE}, {reader}, example {number}", "exec"), {**names})


def test_the_page_has_an_example_for_each_reader() -> None:
    assert tuple(examples()) == READERS


@pytest.mark.parametrize("reader", ["deltalake", "pandas", "polars"])
def test_the_example_reads_the_default_run(reader: str, default_run: DefaultRun) -> None:
    run(reader, default_run.output)


def test_the_spark_example_reads_the_default_run(default_run: DefaultRun, spark: Any) -> None:
    with settings(
        spark, spark__sql__session__timeZone=spark.conf.get("spark.sql.session.timeZone")
    ):
        run("Spark", default_run.output)
