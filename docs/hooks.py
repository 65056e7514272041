"""MkDocs hook: writes the reference pages from the code's own definitions, so they cannot drift.

- ``reference/tables.md``: every table's Delta schema (``streaming.job.sink.table_schema``), its
  time and partition columns (``udfs.schema``) and what the schema's docstrings say of it;
- ``reference/events.md``: the fields the parser reads (``udfs.parse``), the required ones per
  kind (``udfs.parse.REQUIRED``), and the closed vocabulary (``udfs.vocabulary``) with each
  word's docstring;
- ``reference/settings.md``: every setting of ``conf/faultline.yaml`` with its flag, its value,
  its default and its help, from the fields of ``streaming.config.JobConfig``, as
  ``faultline run --help`` makes them.

The pages exist only in the built site (``mkdocs build``); nothing is written into ``docs/``.
"""

from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `mkdocs build` from a checkout that is not installed
    sys.path.insert(0, str(ROOT))

GENERATED = "This page is generated from the code when the site is built (`docs/hooks.py`).\n"


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, text in (
        ("reference/tables.md", tables_page()),
        ("reference/events.md", events_page()),
        ("reference/settings.md", settings_page()),
    ):
        files.append(File.generated(config, path, content=text))
    return files


# --- docstrings that Python does not keep ---------------------------------------------------


def attribute_docs(module: Any) -> dict[str, str]:
    """The docstrings written under a module's (or its classes') assignments, by name
    (``Class.NAME`` for a class's), which Python does not keep at run time."""
    tree = ast.parse(inspect.getsource(module))
    found: dict[str, str] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node, after in zip(body, [*body[1:], None], strict=True):
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")
            target = None
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                target = node.targets[0].id
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                target = node.target.id
            if (
                target
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                found[prefix + target] = inspect.cleandoc(after.value.value)

    walk(tree.body, "")
    return found


def rst_to_md(text: str) -> str:
    """Sphinx's inline marks as Markdown: ````x```` and ``:data:`x``` become `` `x` ``."""
    import re

    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def one_line(text: str) -> str:
    return " ".join(rst_to_md(text).split()).replace("|", "\\|")


# --- the tables -------------------------------------------------------------------------------


def tables_page() -> str:
    from streaming.job.sink import table_schema
    from udfs import schema
    from udfs.vocabulary import TableName

    docs = attribute_docs(schema)
    paragraphs = {}
    for paragraph in docs["TABLES"].split("\n\n")[1:]:  # each starts with ``name``:
        name = paragraph.split("``")[1]
        paragraphs[name] = paragraph
    paragraphs[TableName.BATCHES] = docs["BATCHES"]
    lines = [
        "# Tables",
        "",
        GENERATED,
        f"The tables are Delta tables of format {schema.TABLE_FORMAT} (each table's description"
        f" says `faultline table format {schema.TABLE_FORMAT}`). Every time column (epoch ms)"
        " has a `timestamp` twin named `<column>_ts` (UTC). Every table but `batches` is"
        f" partitioned by `{schema.PARTITION}`, the UTC date of its time column. What each"
        " table holds, in words: [Output tables](../tables.md).",
        "",
    ]
    for name in TableName:
        lines += [f"## `{name}`", ""]
        time_column = schema.TIME_COLUMNS.get(name)
        if time_column:
            lines += [
                f"Time column `{time_column}`; partitioned by `{schema.PARTITION}`.",
                "",
            ]
        else:
            lines += ["Not partitioned.", ""]
        if name in paragraphs:
            lines += [rst_to_md(paragraphs[name]), ""]
        lines += ["| column | type |", "|---|---|"]
        lines += [f"| `{f.name}` | `{f.type}` |" for f in table_schema(name)]
        lines.append("")
    return "\n".join(lines)


# --- the events -------------------------------------------------------------------------------


def events_page() -> str:
    from udfs import parse, schema, vocabulary

    lines = [
        "# Events",
        "",
        GENERATED,
        "The fields the parser reads, with the type it reads them as, and the kinds that"
        " require each (`udfs.parse`). Every event requires `event_id` and `event_time`. Times are"
        " epoch milliseconds, or ISO-8601 text. Fields the parser does not know are ignored."
        " What each field means: [Input events](../events.md).",
        "",
        "## Fields",
        "",
        "| field | read as | required by |",
        "|---|---|---|",
    ]
    read = {f.name: f.type for f in parse._READ}
    for name in parse.TYPED_FIELDS:
        kinds = [f"`{k}`" for k, fields in parse.REQUIRED.items() if name in fields]
        if name in ("event_id", "event_time"):
            kinds = ["every kind"]
        lines.append(f"| `{name}` | `{read[name]}` | {', '.join(kinds)} |")
    lines += [
        "",
        f"The parsed events have {len(schema.EVENTS)} columns (`udfs.schema.EVENTS`); those"
        " beyond the fields above are the parser's own: "
        + ", ".join(f"`{n}`" for n in schema.EVENTS.names if n not in read)
        + ".",
        "",
        "## The closed vocabulary",
        "",
        rst_to_md(inspect.getdoc(vocabulary) or "").split("\n\n")[0],
        "",
    ]
    docs = attribute_docs(vocabulary)
    for enum in _enums(vocabulary):
        lines += [f"### `{enum.__name__}`", "", rst_to_md(inspect.getdoc(enum) or ""), ""]
        lines += ["| word | note |", "|---|---|"]
        for member in enum:
            note = docs.get(f"{enum.__name__}.{member.name}", "")
            lines.append(f"| `{member.value}` | {one_line(note)} |")
        lines.append("")
    return "\n".join(lines)


def _enums(module: Any) -> Iterator[type[StrEnum]]:
    for name in module.__all__:
        yield getattr(module, name)


# --- the settings -----------------------------------------------------------------------------


def settings_page() -> str:
    from pydantic import BaseModel

    from streaming import config

    lines = [
        "# Settings",
        "",
        GENERATED,
        "Every setting of the job, as `conf/faultline.yaml` lists it, with the flag of"
        " `faultline run` that sets it (a flag wins over the file), the value it takes, its"
        " default and its help. A duration is a whole number of milliseconds or a text such as"
        " `500ms`, `30s`, `10m`, `1h`. A bad value stops the job before it starts, naming the"
        " file, the key, the value and what is allowed.",
        "",
    ]
    rows: dict[str, list[str]] = {}  # per block of the YAML ("": the top level), in order
    for key, field in config.setting_fields(config.JobConfig):
        head, dot, name = key.rpartition(".")
        parts = [*config._parts(field.annotation), *field.metadata]
        yes_no, metavar = bool in parts, config._metavar(parts)
        flags = [f"--{key}"] + ([f"--{head}{dot}no-{name}"] if yes_no else [])
        flag = " / ".join(f"`{f.replace('_', '-')}`" for f in flags)
        default = config._shown_default(field, metavar, yes_no).replace("%%", "%")
        value = "on / off" if yes_no else metavar.replace("|", "\\|")
        help_text = one_line(field.description or "") + default
        rows.setdefault(head, []).append(f"| `{key}` | {flag} | `{value}` | {help_text} |")
    for head, block in rows.items():
        if head:
            model = config.JobConfig.model_fields[head].annotation
            assert isinstance(model, type) and issubclass(model, BaseModel)
            lines += [f"## `{head}:`", "", rst_to_md(inspect.getdoc(model) or "")]
        else:
            lines += ["## The top level"]
        lines += ["", "| setting | flag | value | help |", "|---|---|---|---|", *block, ""]
    return "\n".join(lines) + "\n"
