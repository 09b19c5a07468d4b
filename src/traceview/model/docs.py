"""docs/schema.md, generated from the comments in schema.sql and the readers' declarations, so the reference cannot drift.

Run `python -m traceview.model.docs > docs/schema.md`; a test fails when the file is stale.
"""

from __future__ import annotations

import re

from traceview import ingest
from traceview.model.db import CONTRACT_TABLES, schema_sql

TABLE = re.compile(r"^CREATE TABLE (\w+) \($")
COLUMN = re.compile(r"^\s+(\w+) (\w+(?:\(\d+(?:,\d+)?\))?),?\s*--\s*(.+)$")

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


def render() -> str:
    lines = [preamble()]
    description: list[str] = []
    for raw in schema_sql().splitlines():
        if match := TABLE.match(raw):
            lines += [f"## `{match.group(1)}`", "", " ".join(description), "", "| column | type | meaning |", "|---|---|---|"]
            description = []
        elif match := COLUMN.match(raw):
            name, sql_type, meaning = match.groups()
            lines.append(f"| `{name}` | {sql_type} | {meaning.replace('|', '/')} |")
        elif raw.startswith(");"):
            lines.append("")
        elif raw.startswith("-- "):
            description.append(raw[3:])
        elif not raw.strip():
            description = []
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(render(), end="")
