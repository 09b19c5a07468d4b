"""The schema reference is generated from schema.sql and documents every column."""

from __future__ import annotations

import duckdb

from conftest import REPO
from traceview.model import db, docs


def test_schema_md_is_current() -> None:
    assert (REPO / "docs" / "schema.md").read_text() == docs.render(), "run: python -m traceview.model.docs > docs/schema.md"


def test_every_contract_column_is_documented() -> None:
    con = duckdb.connect()
    db.create_schema(con)
    columns = con.execute("SELECT table_name, column_name FROM information_schema.columns").fetchall()
    rendered = docs.render()
    assert {table for table, _ in columns} == set(db.CONTRACT_TABLES)
    for table, column in columns:
        section = rendered.split(f"## `{table}`")[1].split("\n## ")[0]
        assert f"| `{column}` |" in section, f"{table}.{column} is undocumented"
