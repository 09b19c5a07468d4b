"""The interval building blocks on rows whose order matters."""

from __future__ import annotations

import duckdb

from traceview.analysis.intervals import with_prev_end_sql

# two intervals start and end together after a gap; the source lists the higher id first
TIED = "SELECT * FROM (VALUES (0, 2, 300, 400), (0, 1, 300, 400), (0, 0, 0, 100)) t(rank, id, start_ns, end_ns)"


def test_the_tiebreak_decides_which_tied_interval_ends_a_gap() -> None:
    """Of intervals with one start and end, only the first in the window's order ends the gap before them; with
    the ids as tiebreak that is the lowest id, not the row the scan or a thread met first (a real 16-rank trace's
    idle kinds changed from run to run before gpu_activity broke its ties)."""
    con = duckdb.connect()
    rows = con.execute(f"SELECT id, prev_end_ns FROM ({with_prev_end_sql(TIED, ('rank',), tiebreak=('id',))}) "
                       "ORDER BY id").fetchall()
    assert rows == [(0, None), (1, 100), (2, 400)]
    for threads in (1, 4):
        con.execute(f"SET threads = {threads}")
        ended = con.execute(f"SELECT id FROM ({with_prev_end_sql(TIED, ('rank',), tiebreak=('id',))}) "
                            "WHERE start_ns > prev_end_ns").fetchall()
        assert ended == [(1,)]
