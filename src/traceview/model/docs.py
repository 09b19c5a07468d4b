"""docs/schema.md, generated from the comments in schema.sql, the readers' declarations and the staging
contract (db.STAGING_TABLES), so the reference cannot drift.

Run `python -m traceview.model.docs > docs/schema.md`; a test fails when the file is stale.
"""

from __future__ import annotations

import re

from traceview import ingest
from traceview.model.db import (
    CONTRACT_TABLES,
    SCHEMA_COLUMN,
    STAGING_TABLES,
    schema_sql,
)

TABLE = re.compile(r"^CREATE TABLE (\w+) \($")

PREAMBLE = """# The traceview schema

Every input format ({formats}) lands in these tables with the same names and columns;
`traceview query TRACE "SQL"` and `traceview.load(path).sql("SQL")` run SQL over them.
Times are integer nanoseconds on one time base per trace (`trace_info.time_base`): durations are exact,
never rounded to microseconds. Every table has `rank`, so a directory of per-rank traces is one database.

How each source maps in (each format's column is declared by its reader, src/traceview/ingest/<format>.py):

{mapping}

`launch_kind` is `graph` when the launch call is a graph launch (`cudaGraphLaunch`, `cuGraphLaunch`,
`hipGraphLaunch`), or the kernel carries a graph node id, or ROCm marks it `Dispatch Task`. A kernel's
`pid` is the process that launched it; in a Kineto file that is the launching call's pid, not the GPU row.
"""


def mapping_table() -> str:
    """Which source rows fill each contract table, per input format, from the readers' declarations."""
    lines = ["| table | " + " | ".join(reader.title for reader in ingest.READERS) + " |",
             "|---|" + "---|" * len(ingest.READERS)]
    for table in CONTRACT_TABLES:
        cells = []
        for reader in ingest.READERS:
            cell = reader.sources[table]
            if table == "kernels":
                cell += f", launch call on {reader.launch_link.value}"
            cells.append(cell.replace("|", "/"))
        lines.append(f"| {table} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def preamble() -> str:
    return PREAMBLE.format(formats="; ".join(reader.title for reader in ingest.READERS), mapping=mapping_table())


READER_CONTRACT = """## What a reader must produce

A reader (`src/traceview/ingest/<format>.py`, one line in `READERS`) inserts the file's `trace_info` rows
(`source_format` is its name; `start_ns` and `end_ns` stay NULL), its `devices` and its `diagnostics`
directly, and stages its events in the temporary tables below (`db.STAGING_TABLES`;
`db.create_staging_tables(con)` creates them empty). After each read, ingest checks that every table is
there with these columns, each of its type or one the type takes (any integer type for INTEGER and BIGINT,
any number for DOUBLE; an all-NULL column fits any), and fails naming the reader, the table and the column
where one is not: a reader bug. Other columns are ignored. Finishing then fills the rest of each table the
same way for every format.
"""


def reader_contract() -> list[str]:
    """The staged tables and their columns, from db.STAGING_TABLES (meanings from schema.sql unless staging differs)."""
    lines = [READER_CONTRACT]
    for stage in STAGING_TABLES:
        lines += [f"### `{stage.name}` → `{stage.table}`", "", "| column | type | meaning |", "|---|---|---|"]
        lines += [f"| `{c.name}` | {c.type} | {c.meaning.replace('|', '/')} |" for c in stage.columns]
        lines += ["", "Finishing fills " + ", ".join(f"`{column}`" for column in stage.finished()) + ".", ""]
    return lines


def render() -> str:
    formats = ", ".join(f"'{reader.name}' ({reader.title})" for reader in ingest.READERS)
    lines = [preamble()]
    description: list[str] = []
    for raw in schema_sql().splitlines():
        if match := TABLE.match(raw):
            lines += [f"## `{match.group(1)}`", "", " ".join(description), "", "| column | type | meaning |", "|---|---|---|"]
            description = []
        elif match := SCHEMA_COLUMN.match(raw):
            name, sql_type, meaning = match.groups()
            lines.append(f"| `{name}` | {sql_type} | {meaning.replace('{formats}', formats).replace('|', '/')} |")
        elif raw.startswith(");"):
            lines.append("")
        elif raw.startswith("-- "):
            description.append(raw[3:])
        elif not raw.strip():
            description = []
    return "\n".join(lines + reader_contract()).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
