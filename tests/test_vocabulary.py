"""The closed vocabulary (``udfs.vocabulary``): the documentation lists exactly its words, the code
uses no others, and it loads without pandas, pyarrow or Spark."""

from __future__ import annotations

import re
import subprocess
import sys
from enum import StrEnum
from pathlib import Path

import pytest

from udfs.parse import REQUIRED
from udfs.schema import MILLIS, TABLES, TIME_COLUMNS
from udfs.vocabulary import (
    Decision,
    EventKind,
    ProducerState,
    ReasonCode,
    TableName,
    TransactionState,
)

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = "\n\n".join((DOCS / page).read_text() for page in ("tables.md", "events.md")) + "\n"
"""The pages that list the words: docs/tables.md ("Names") and docs/events.md."""


def _passage(pattern: str) -> str:
    """The one passage of the pages that ``pattern`` matches (its group 1)."""
    found = re.findall(pattern, PAGES, flags=re.DOTALL | re.MULTILINE)
    assert len(found) == 1, f"{pattern!r} matches {len(found)} passages of docs/"
    return str(found[0])


def _listed(pattern: str, word: str = r"[A-Z][A-Z_]+") -> set[str]:
    """The backquoted words of the passage ``pattern`` matches."""
    return set(re.findall(rf"`({word})`", _passage(pattern)))


_KINDS = r"^\*\*Event kinds\*\*, and their fields:\n\n(.*?)\n\n"
"""The table of event kinds: its first column names them."""

LISTS = {
    TableName: _listed(r"^- \*\*Tables\*\*:(.*?)^- ", word=r"[a-z_]+"),
    Decision: _listed(r"^- \*\*Decisions\*\* \(`broker_decisions.decision`\):(.*?)^- "),
    ProducerState: _listed(r"^- \*\*Producer states\*\* \(.*?\):(.*?)^- "),
    TransactionState: _listed(r"^- \*\*Transaction states\*\* \(`transactions.state`\):(.*?)^- "),
    EventKind: set(
        re.findall(
            r"`([a-z_]+)`",
            " ".join(re.findall(r"^\| ((?:`[a-z_]+`(?:, )?)+) \|", _passage(_KINDS), re.M)),
        )
    ),
    ReasonCode: set(
        re.findall(r"^- `([A-Z_]+)`", _passage(r"^\*\*Reason codes\*\* .*?:\n\n(.*?)\n\n"), re.M)
    ),
}
"""Where the documentation lists each vocabulary: the "Names" list of docs/tables.md (tables,
decisions, producer states, transaction states) and docs/events.md (event kinds, reason
codes)."""


@pytest.mark.parametrize("vocabulary", LISTS, ids=lambda v: v.__name__)
def test_the_docs_list_every_word_and_no_other(vocabulary: type[StrEnum]) -> None:
    assert LISTS[vocabulary] == {m.value for m in vocabulary}


def test_the_code_defines_its_words_by_the_vocabulary() -> None:
    assert set(REQUIRED) == set(EventKind)
    assert set(TABLES) | {TableName.BATCHES} == set(TableName)
    assert set(TIME_COLUMNS) == set(TABLES)
    assert set(MILLIS) == set(TableName)


def test_the_vocabulary_and_the_client_load_without_pandas_pyarrow_or_spark() -> None:
    heavy = ("numpy", "pandas", "pyarrow", "pyspark")
    script = (
        "import sys, streaming.client, udfs.vocabulary; "
        f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=root, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]"
