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


ANALYSIS_OBJECTS = ("steps", "phase_summary", "step_accounting", "op_costs", "roofline_kernels",
                    "roofline_by_category", "roofline_by_phase", "roofline_by_step", "gpu_specs", "gpu_peaks",
                    "category_patterns", "dtype_patterns")


def test_every_analysis_column_is_documented(tmp_path) -> None:
    import traceview
    from traceview.testing import llm_serving_spec, write_kineto

    trace = traceview.load(write_kineto(llm_serving_spec(), tmp_path / "s.json.gz")).analyze()
    text = (REPO / "docs" / "analysis.md").read_text()
    contract = set(trace.con.execute(
        "SELECT table_name || '.' || column_name FROM information_schema.columns").fetchall())
    schema = duckdb.connect()
    db.create_schema(schema)
    base = set(schema.execute("SELECT table_name || '.' || column_name FROM information_schema.columns").fetchall())
    added = {c[0] for c in contract - base if c[0].split(".")[0] in db.CONTRACT_TABLES}
    missing = [column for column in added if f"`{column}`" not in text]
    assert not missing, f"undocumented analysis columns on schema tables: {missing}"
    for name in ANALYSIS_OBJECTS:
        columns = [c for (c,) in trace.con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [name]).fetchall()]
        assert columns, name
        assert f"`{name}`" in text, f"{name} is undocumented"
        undocumented = [c for c in columns if f"`{c}`" not in text]
        assert not undocumented, f"{name}: {undocumented}"


def test_rules_md_is_current() -> None:
    from traceview.rules.docs import render_markdown

    expected = (REPO / "docs" / "rules.md").read_text()
    assert render_markdown() == expected, "run: python -c 'from traceview.rules.docs import render_markdown; print(render_markdown(), end=\"\")' > docs/rules.md"
