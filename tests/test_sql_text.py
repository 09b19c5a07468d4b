"""No Python value is spliced into SQL text anywhere in src/: values are bound parameters or values tables.

An f-string that builds SQL may interpolate only an identifier checked by `db.ident`/`db.idents`, or an SQL
fragment, named so by the `_sql` suffix of the variable or function it comes from. A number, string, regex or
tuple formatted into a statement is what this test finds, with its file and line; `.format()` and `%` on
SQL text are found the same way.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from traceview.model import db

SRC = Path(__file__).resolve().parents[1] / "src" / "traceview"
SQL = re.compile(r"\b(SELECT|INSERT INTO|CREATE|DELETE FROM|WHERE|JOIN|LIMIT|GROUP BY|ORDER BY|DROP|ALTER|VALUES|"
                 r"PARTITION BY|CASE WHEN)\b")
IDENTIFIER_CALLS = {"ident", "idents"}


def _allowed(expression: ast.expr) -> bool:
    if isinstance(expression, ast.Call):
        function = expression.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        return name in IDENTIFIER_CALLS or name.endswith("_sql")
    if isinstance(expression, ast.Attribute):
        return expression.attr.endswith("_sql")
    return isinstance(expression, ast.Name) and expression.id.endswith("_sql")


def splices(source: str, label: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.JoinedStr):
            text = "".join(v.value for v in node.values if isinstance(v, ast.Constant))
            if SQL.search(text):
                found += [f"{label}:{node.lineno}: {{{ast.unparse(v.value)}}}"
                          for v in node.values if isinstance(v, ast.FormattedValue) and not _allowed(v.value)]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and isinstance(node.func.value, ast.Constant) and SQL.search(str(node.func.value.value))):
            found.append(f"{label}:{node.lineno}: .format() on SQL")
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
              and SQL.search(str(node.left.value))):
            found.append(f"{label}:{node.lineno}: % on SQL")
    return found


def test_no_python_value_is_spliced_into_sql_text() -> None:
    found = [line for path in sorted(SRC.rglob("*.py"))
             for line in splices(path.read_text(encoding="utf-8"), str(path.relative_to(SRC)))]
    assert found == [], "\n".join(found)


def test_the_scan_finds_a_value_spliced_into_sql() -> None:
    sample = ('limit = 3\nq = f"SELECT * FROM kernels LIMIT {limit}"\n'
              'ok = f"SELECT * FROM {db.ident(table)} WHERE {where_sql}"\n'
              'old = "SELECT {} FROM kernels".format(limit)\n')
    assert splices(sample, "sample.py") == ["sample.py:2: {limit}", "sample.py:4: .format() on SQL"]


def test_an_identifier_is_checked_before_it_reaches_sql() -> None:
    assert db.ident("kernels") == "kernels" and db.idents(["rank", "k.device_id"]) == "rank, k.device_id"
    for bad in ("kernels; DROP TABLE x", "1 OR 1=1", "name'", ""):
        try:
            db.ident(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} passed as an identifier")
