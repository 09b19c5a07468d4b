"""Interval arithmetic in SQL: busy time as the union of overlapping GPU activity.

Summing kernel durations double-counts kernels that overlap on different streams; the busy time of a
GPU is the length of the union of its activity intervals. Everything here rests on one window,
`prev_end_ns`: the latest end among the intervals that started before this one. An interval that
starts after it opens a new island (and closes an idle gap). No Python loop, exact integer
nanoseconds, no timestamp rounding. This is the only place that window is written: Python stages compose these
fragments, and the .sql modules invoke them as macros (`busy_time!(...)`, analysis/sql_module.py).
"""

from __future__ import annotations

from traceview.model.db import ident, idents


def with_prev_end_sql(source_sql: str, keys: tuple[str, ...], tiebreak: tuple[str, ...] = ()) -> str:
    """SQL yielding every row of `source` plus `prev_end_ns`, per key (NULL for the first interval).

    `source` must expose the key columns plus start_ns and end_ns. An interval with
    start_ns > prev_end_ns ends an idle gap [prev_end_ns, start_ns) of its key. Of intervals with the
    same start and end only the first in the window's order can end a gap: `tiebreak` (unique columns)
    makes that order total where it matters which one did, else it follows how threads split the rows.
    """
    # a BIGINT end shifted by 2**63 into 0 .. 2**64 - 1, below the key's ordinal packed above it: one running max
    # of (ordinal << 64) + end + 2**63 carries the current key's latest end once that key has a row
    return f"""
        SELECT * EXCLUDE (_key, _reach),
               CASE WHEN lag(_key) OVER () = _key
                    THEN (lag(_reach) OVER () - (_key << 64) - 9223372036854775808)::BIGINT END AS prev_end_ns
        FROM (
            SELECT *, max((_key << 64) + end_ns + 9223372036854775808) OVER (ROWS UNBOUNDED PRECEDING) AS _reach
            FROM ({key_ordinals_sql(source_sql, keys, ("start_ns", "end_ns", *tiebreak))})
        )
    """


def key_ordinals_sql(source_sql: str, keys: tuple[str, ...], order: tuple[str, ...]) -> str:
    """SQL yielding every row of `source` in (keys, order) order with `_key`, the ordinal of its key (HUGEINT).

    Windows per key read one stream: the rows sorted once, on every core, then walked by windows with an empty
    OVER (a streaming window keeps the sort's order), each function one step along the rows. A window
    partitioned by the key sorts and walks each partition on its own: one thread for a hot key, and a partition
    set-up for each of many small keys (1,709 gap windows of 576 k host events: 0.26 -> 0.09 s)."""
    return f"""
        SELECT * EXCLUDE (_opens), sum(_opens) OVER (ROWS UNBOUNDED PRECEDING)::HUGEINT AS _key
        FROM (SELECT *, CASE WHEN {_same_key_sql("lag", keys)} THEN 0 ELSE 1 END AS _opens
              FROM (SELECT * FROM ({source_sql}) ORDER BY {idents((*keys, *order))}))
    """


def _same_key_sql(neighbour: str, keys: tuple[str, ...]) -> str:
    """SQL: whether the row before (`lag`) or after (`lead`) in a sorted stream exists and has this row's key."""
    same = [f"{neighbour}({ident(key)}) OVER () IS NOT DISTINCT FROM {ident(key)}" for key in keys]
    return " AND ".join([f"{neighbour}(true) OVER () IS NOT NULL", *same])


def busy_islands_sql(source_sql: str, keys: tuple[str, ...], merge_gap_sql: str = "0") -> str:
    """SQL yielding (keys..., lo, hi): maximal busy intervals of `source` per key.

    Intervals that overlap or touch merge; so do intervals separated by at most `merge_gap_ns`
    (an SQL expression, e.g. a parameter), which turns islands into bursts of work.
    """
    ordered_sql = with_prev_end_sql(f"SELECT {idents(keys)}, start_ns, end_ns FROM ({source_sql})", keys)
    return islands_from_prev_end_sql(ordered_sql, keys, merge_gap_sql)


def islands_from_prev_end_sql(ordered_sql: str, keys: tuple[str, ...], merge_gap_sql: str = "0") -> str:
    """busy_islands_sql for a relation that already carries `prev_end_ns` per key (with_prev_end_sql's, or a
    table that kept it, such as gpu_activity), so its window is not computed again.

    An island opens at each interval that starts past `prev_end_ns`, and ends where the next island's
    opener says the work before it ended (its `prev_end_ns`), the last at the key's latest end: one
    window over the openers instead of numbering every interval and grouping by island.
    """
    key_list_sql = idents(keys)
    joined_sql = " AND ".join(f"o.{ident(key)} IS NOT DISTINCT FROM l.{ident(key)}" for key in keys) or "true"
    return f"""
        WITH ordered AS (SELECT {key_list_sql}, start_ns, end_ns, prev_end_ns FROM ({ordered_sql})),
        openers AS (
            SELECT {key_list_sql}, start_ns AS lo, prev_end_ns FROM ordered
            WHERE prev_end_ns IS NULL OR start_ns - prev_end_ns > {merge_gap_sql}
        ),
        latest AS (SELECT {key_list_sql}, max(end_ns) AS hi FROM ordered GROUP BY ALL)
        SELECT {key_list_sql}, lo, CASE WHEN {_same_key_sql("lead", keys)} THEN lead(prev_end_ns) OVER () ELSE latest_ns END AS hi
        FROM (SELECT o.*, l.hi AS latest_ns FROM openers o JOIN latest l ON {joined_sql}
              ORDER BY {idents((*(f"o.{key}" for key in keys), "o.lo"))})
    """


def busy_time_sql(source_sql: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., busy_ns): union length of the intervals of `source` per key.

    No islands needed: in start order, the part of an interval not covered before it is what lies past
    `prev_end_ns` (every earlier interval started no later, so what they cover from this start on is one piece
    ending at `prev_end_ns`), and those parts sum to the union: one window, where islands take two.
    """
    return f"""
        SELECT {idents(keys)},
               sum(CASE WHEN prev_end_ns IS NULL OR start_ns >= prev_end_ns THEN end_ns - start_ns
                        WHEN end_ns > prev_end_ns THEN end_ns - prev_end_ns ELSE 0 END)::BIGINT AS busy_ns
        FROM ({with_prev_end_sql(f"SELECT {idents(keys)}, start_ns, end_ns FROM ({source_sql})", keys)})
        GROUP BY {idents(keys)}
    """


def islands_with_time_before_sql(source_sql: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., lo, hi, before): the busy islands of `source` per key, each with the busy time
    of the islands before it.

    Busy time before any moment t is then one ASOF join away (`busy_before_sql`): the overlap of an
    interval [a, b) with the islands is B(b) - B(a), in O(n log n) where a range join compares every pair.
    """
    return time_before_sql(busy_islands_sql(source_sql, keys), keys)


def time_before_sql(islands_sql: str, keys: tuple[str, ...]) -> str:
    """`islands` (keys..., lo, hi: disjoint intervals, such as busy_islands_sql yields or a table of them)
    with `before`, the length of the islands of its key before each one (a HUGEINT; 0 for the first).

    One sorted stream: the running length of every island so far less the island's own, less that same figure at
    the key's first island (what earlier keys ran, which only grows along the stream, so a running max carries it).
    """
    return f"""
        SELECT * EXCLUDE (_first, _upto), _upto - max(CASE WHEN _first THEN _upto END) OVER (ROWS UNBOUNDED PRECEDING)
                                          AS before
        FROM (SELECT *, NOT ({_same_key_sql('lag', keys)}) AS _first,
                     sum(hi - lo) OVER (ROWS UNBOUNDED PRECEDING) - (hi - lo) AS _upto
              FROM (SELECT {idents(keys)}, lo, hi FROM ({islands_sql}) ORDER BY {idents((*keys, "lo"))}))
    """


def busy_before_sql(alias: str, point_sql: str) -> str:
    """B(point): busy time before `point` of the islands row `alias`, ASOF-joined on the keys and
    `alias.lo <= point`; 0 when no island starts before it (nothing ran: a true zero, not unknown)."""
    alias_sql = ident(alias)
    return (f"CASE WHEN {alias_sql}.lo IS NULL THEN 0 ELSE {alias_sql}.before + "
            f"(CASE WHEN {point_sql} < {alias_sql}.hi THEN {point_sql} ELSE {alias_sql}.hi END) - {alias_sql}.lo END")


def bucket_width_sql(source_sql: str) -> str:
    """SQL yielding one row, `ns`: a time bucket a quarter of the mean stretch between two starts of `source`'s
    intervals (start_ns, end_ns) long, at least 1 us (1,000 ns when it has none).

    A hash join on (key, bucket) finds the intervals of a key that hold a point, or the points in an interval,
    where a join on the key alone compares every pair: each interval is listed in the buckets it touches (about
    five, times its nesting depth), each point in its own bucket, and the comparison keeps the true pairs.
    """
    return f"""
        SELECT CASE WHEN count(*) > 0 AND (max(end_ns) - min(start_ns)) // (4 * count(*)) > 1000
                    THEN (max(end_ns) - min(start_ns)) // (4 * count(*)) ELSE 1000 END AS ns
        FROM ({source_sql})
    """


def in_buckets_sql(source_sql: str, width_sql: str) -> str:
    """`source`'s rows (with start_ns and end_ns), each once for every bucket of `width` (a one-row relation with
    `ns`, as bucket_width_sql yields) that its [start_ns, end_ns] touches, the bucket's number as `b`: the side of a
    (key, bucket) hash join that holds the intervals, whose other side is each point's `point // ns`."""
    return f"""
        SELECT s.*, unnest(range(s.start_ns // w.ns, s.end_ns // w.ns + 1)) AS b
        FROM ({source_sql}) s, ({width_sql}) w
    """


def exposed_islands_sql(source_sql: str, keys: tuple[str, ...], cover_sql: str, cover_keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., lo, hi, exposed_ns): the busy islands of `source` per key, each with the part of it
    that no interval of `cover` overlaps (cover's islands per `cover_keys`, leading names of `keys`): the island's
    length less B(hi) - B(lo), the cover's busy time before each end (busy_before_sql), two ASOF joins."""
    on_sql = " AND ".join(f"k.{ident(key)} = c.{ident(key)}" for key in cover_keys)
    return f"""
        WITH _cover AS ({islands_with_time_before_sql(cover_sql, cover_keys)}),
        _to_hi AS (
            SELECT c.*, {busy_before_sql("k", "c.hi")} AS _cover_to_hi
            FROM ({busy_islands_sql(source_sql, keys)}) c
            ASOF LEFT JOIN _cover k ON {on_sql} AND k.lo <= c.hi
        ),
        _to_lo AS (
            SELECT c.*, {busy_before_sql("k", "c.lo")} AS _cover_to_lo
            FROM _to_hi c
            ASOF LEFT JOIN _cover k ON {on_sql} AND k.lo <= c.lo
        )
        SELECT {idents(keys)}, lo, hi, hi - lo - (_cover_to_hi - _cover_to_lo) AS exposed_ns FROM _to_lo
    """
