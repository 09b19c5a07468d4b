"""The analysis as SQL modules: every stage is a .sql file whose header is its declaration, a malformed
header is an error naming the file, and an interval macro expands to intervals.py's own SQL."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from traceview.analysis import intervals, pipeline, sql_module
from traceview.errors import TraceviewError

MODULES = sorted(p.name.removesuffix(".sql")
                 for p in resources.files("traceview.analysis").joinpath("sql").iterdir() if p.name.endswith(".sql"))


def test_every_stage_is_a_module_whose_header_declares_it() -> None:
    assert len(MODULES) >= 10
    staged = {stage.name for stage in pipeline.STAGES}
    for name in MODULES:
        module = sql_module.load(name)
        assert module.requires and name in staged, name
        stage = next(stage for stage in pipeline.STAGES if stage.name == name)
        assert [r.name for r in stage.creates] == [r.name for r in module.creates], name
        for relation in module.creates:
            assert relation.columns and all(meaning.strip() for meaning in relation.columns.values()), relation.name


HEADER = "-- stage: demo\n-- Demo.\n-- requires: kernels\n-- creates: demo_table\n\n"
BLOCK = "-- table demo_table: one row per kernel\n--   rank: trace rank\n--   n: a count,\n--     continued\n"


def test_a_module_parses_into_its_declaration_and_statements() -> None:
    module = sql_module.parse("demo", HEADER + BLOCK + "CREATE TABLE demo_table AS SELECT rank, $n AS n FROM kernels;\n"
                              "-- section: later\nDROP TABLE demo_table;\n")
    (relation,) = module.creates
    assert (module.doc, module.requires, relation.row) == ("Demo.", ("kernels",), "kernel")
    assert relation.columns == {"rank": "trace rank", "n": "a count, continued"}
    assert [len(module.sections[""]), len(module.sections["later"])] == [1, 1]
    assert module.sections[""][0].parameters == {"n"}


@pytest.mark.parametrize("text, problem", [
    ("-- stage: other\n-- requires: kernels\n", "must open with '-- stage: demo'"),
    ("-- stage: demo\n-- creates: demo_table\n", "names no '-- requires:'"),
    (HEADER + "CREATE TABLE demo_table AS SELECT 1;\n", "'-- creates:' lists demo_table but the blocks document nothing"),
    (HEADER + BLOCK + "SELECT nope!((SELECT 1), (rank));\n", "unknown macro nope!"),
], ids=["stage", "requires", "undocumented", "macro"])
def test_a_malformed_module_is_an_error_that_says_what(text, problem) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        sql_module.parse("demo", text)


def test_a_missing_parameter_is_named() -> None:
    module = sql_module.parse("demo", HEADER + BLOCK + "CREATE TABLE demo_table AS SELECT $n AS n;\n")
    with pytest.raises(TraceviewError, match=r"no value for \$n"):
        module.run(None)


def test_an_interval_macro_is_intervals_own_sql() -> None:
    source = "SELECT rank, device_id, start_ns, end_ns FROM kernels WHERE name <> 'a, (b'"
    expanded = sql_module.expand(f"WITH u AS (busy_time!(({source}), (rank, device_id))) SELECT busy_before!(k, w.e)")
    assert expanded == (f"WITH u AS ({intervals.busy_time_sql(source, ('rank', 'device_id'))}) "
                        f"SELECT {intervals.busy_before_sql('k', 'w.e')}")


def test_the_statement_split_is_duckdbs_on_every_module() -> None:
    """The loader splits statements with its own scan (DuckDB's parser at import is slow): it must find the
    statements and the parameters DuckDB's parser finds."""
    import duckdb

    for name in MODULES:
        text = resources.files("traceview.analysis").joinpath("sql", f"{name}.sql").read_text(encoding="utf-8")
        ours = [s.parameters for section in sql_module.parse(name, text).sections.values() for s in section]
        body = sql_module.expand("\n".join(line for line in text.splitlines() if not line.startswith("-- section:")))
        theirs = [frozenset(s.named_parameters) for s in duckdb.extract_statements(body) if s.query.strip()]
        assert ours == theirs, name
