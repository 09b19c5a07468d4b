"""The step budget's one statement: its ASOF joins, and the cursor it runs on."""

from __future__ import annotations

import traceview
from conftest import REPO
from traceview.analysis import budget


def test_past_the_loop_bound_the_budget_sorts_its_joins_then_leaves_the_cursor_as_it_was() -> None:
    """The sample's 53 windows have 106 span ends, past DuckDB's 64-row loop bound: the budget runs sorted on its
    cursor, gives the figures the loops give, and the cursor keeps DuckDB's own bound for the stages after it."""
    with traceview.load(REPO / "sample_traces" / "llm_serving.pt.trace.json.gz") as trace:
        trace.analyze()
        cursor = trace.con.cursor()
        default = cursor.execute("SELECT current_setting('asof_loop_join_threshold')").fetchall()[0][0]
        assert 2 * cursor.execute("SELECT count(*) FROM step_windows").fetchall()[0][0] >= default == 64
        sorted_rows = cursor.execute("SELECT * FROM step_budget ORDER BY ALL").fetchall()
        budget.build_step_budget(cursor)
        assert cursor.execute("SELECT current_setting('asof_loop_join_threshold')").fetchall()[0][0] == default
        assert cursor.execute("SELECT * FROM step_budget ORDER BY ALL").fetchall() == sorted_rows
        budget._build(cursor)  # DuckDB's own choice: loops where it thinks the left side small
        assert cursor.execute("SELECT * FROM step_budget ORDER BY ALL").fetchall() == sorted_rows
        assert len(sorted_rows) == 27 and sum(row[5] for row in sorted_rows) > 0
