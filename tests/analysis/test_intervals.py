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


def test_busy_time_is_the_length_of_the_union() -> None:
    """Nested, touching, repeated and disjoint intervals against a union counted nanosecond by nanosecond."""
    import random

    from traceview.analysis.intervals import busy_islands_sql, busy_time_sql

    rng = random.Random(7)
    rows = [(key, start, start + rng.choice((0, 1, 5, 40, 200)))
            for key in range(6) for start in (rng.randrange(0, 1_000) for _ in range(rng.randrange(1, 60)))]
    rows += [(6, 10, 20), (6, 20, 30), (6, 0, 100), (6, 0, 100), (7, 5, 5)]
    con = duckdb.connect()
    con.execute("CREATE TABLE t (key INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    covered = {key: len({ns for k, lo, hi in rows if k == key for ns in range(lo, hi)}) for key, _, _ in rows}
    busy = dict(con.execute(f"SELECT key, busy_ns FROM ({busy_time_sql('SELECT * FROM t', ('key',))})").fetchall())
    assert busy == covered
    assert busy[6] == 100 and busy[7] == 0
    islands = dict(con.execute(f"SELECT key, sum(hi - lo) FROM ({busy_islands_sql('SELECT * FROM t', ('key',))}) "
                               "GROUP BY key").fetchall())
    assert busy == islands


def test_exposed_islands_are_the_island_less_its_overlap_with_the_cover() -> None:
    """Each island of the source keeps the nanoseconds no cover interval of its key's device runs in, against a
    count nanosecond by nanosecond; a key with no cover is exposed whole."""
    import random

    from traceview.analysis.intervals import exposed_islands_sql

    rng = random.Random(11)
    source = [(device, step, start, start + rng.choice((1, 7, 30, 120)))
              for device in range(3) for step in range(2) for start in (rng.randrange(0, 600) for _ in range(15))]
    cover = [(device, start, start + rng.choice((1, 10, 60))) for device in range(2)
             for start in (rng.randrange(0, 700) for _ in range(25))]
    con = duckdb.connect()
    con.execute("CREATE TABLE s (device INTEGER, step INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.execute("CREATE TABLE c (device INTEGER, start_ns BIGINT, end_ns BIGINT)")
    con.executemany("INSERT INTO s VALUES (?, ?, ?, ?)", source)
    con.executemany("INSERT INTO c VALUES (?, ?, ?)", cover)
    exposed_sql = exposed_islands_sql("SELECT * FROM s", ("device", "step"), "SELECT * FROM c", ("device",))
    rows = con.execute(f"SELECT * FROM ({exposed_sql}) ORDER BY ALL").fetchall()
    covered = {device: {ns for d, lo, hi in cover if d == device for ns in range(lo, hi)} for device in range(3)}
    for device, step, lo, hi, exposed in rows:
        assert exposed == sum(1 for ns in range(lo, hi) if ns not in covered[device])
    busy = {(d, s): {ns for dd, ss, lo, hi in source if (dd, ss) == (d, s) for ns in range(lo, hi)}
            for d, s, _, _ in source}
    assert {(d, s): sum(hi - lo for dd, ss, lo, hi, _ in rows if (dd, ss) == (d, s)) for d, s in busy} \
        == {key: len(ns) for key, ns in busy.items()}
    assert any(exposed == hi - lo for device, _, lo, hi, exposed in rows if device == 2)


def test_a_bucket_is_a_quarter_of_the_mean_stretch_between_starts_and_at_least_a_microsecond() -> None:
    """Four intervals over 80 ms: 5 ms buckets. Then a point join on (key, bucket), each interval listed in every
    bucket it touches (in_buckets_sql), finds exactly the pairs a join on the key alone finds."""
    import random

    from traceview.analysis.intervals import bucket_width_sql, in_buckets_sql

    con = duckdb.connect()
    spans = "SELECT * FROM (VALUES (0, 10_000_000), (20_000_000, 30_000_000), (40_000_000, 45_000_000), " \
            "(60_000_000, 80_000_000)) t(start_ns, end_ns)"
    assert con.execute(bucket_width_sql(spans)).fetchall() == [(5_000_000,)]
    assert con.execute(bucket_width_sql("SELECT 5 AS start_ns, 9 AS end_ns")).fetchall() == [(1_000,)]
    assert con.execute(bucket_width_sql("SELECT 1 AS start_ns, 2 AS end_ns WHERE false")).fetchall() == [(1_000,)]
    rng = random.Random(3)
    con.execute("CREATE TABLE r AS SELECT * FROM (VALUES " + ", ".join(
        f"({rng.randrange(2)}, {s}, {s + rng.choice((0, 500, 20_000, 400_000))})"
        for s in (rng.randrange(0, 2_000_000) for _ in range(300))) + ") t(key, start_ns, end_ns)")
    con.execute("CREATE TABLE p AS SELECT * FROM (VALUES " + ", ".join(
        f"({rng.randrange(2)}, {rng.randrange(0, 2_500_000)})" for _ in range(200)) + ") t(key, t)")
    joined = con.execute(f"""
        WITH z AS ({bucket_width_sql('SELECT start_ns, end_ns FROM r')}),
        b AS ({in_buckets_sql('SELECT * FROM r', 'SELECT ns FROM z')})
        SELECT p.key, p.t, b.start_ns, b.end_ns FROM p CROSS JOIN z
        JOIN b ON b.key = p.key AND b.b = p.t // z.ns AND b.start_ns <= p.t AND b.end_ns >= p.t
        ORDER BY ALL""").fetchall()
    plain = con.execute("""SELECT p.key, p.t, r.start_ns, r.end_ns FROM p JOIN r ON r.key = p.key
                           AND r.start_ns <= p.t AND r.end_ns >= p.t ORDER BY ALL""").fetchall()
    assert len(plain) > 20 and joined == plain
