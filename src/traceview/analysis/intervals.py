"""Interval arithmetic in SQL: busy time as the union of overlapping GPU activity.

Summing kernel durations double-counts kernels that overlap on different streams; the busy time of a
GPU is the length of the union of its activity intervals. Everything here rests on one window,
`prev_end_ns`: the latest end among the intervals that started before this one. An interval that
starts after it opens a new island (and closes an idle gap). No Python loop, exact integer
nanoseconds, no timestamp rounding. This is the only place that window is written.
"""

from __future__ import annotations


def with_prev_end_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding every row of `source` plus `prev_end_ns`, per key (NULL for the first interval).

    `source` must expose the key columns plus start_ns and end_ns. An interval with
    start_ns > prev_end_ns ends an idle gap [prev_end_ns, start_ns) of its key.
    """
    key_list = ", ".join(keys)
    return f"""
        SELECT *, max(end_ns) OVER (PARTITION BY {key_list} ORDER BY start_ns, end_ns
                                    ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end_ns
        FROM ({source})
    """


def busy_islands_sql(source: str, keys: tuple[str, ...], merge_gap_ns: str = "0") -> str:
    """SQL yielding (keys..., lo, hi): maximal busy intervals of `source` per key.

    Intervals that overlap or touch merge; so do intervals separated by at most `merge_gap_ns`
    (an SQL expression, e.g. a parameter), which turns islands into bursts of work.
    """
    key_list = ", ".join(keys)
    return f"""
        SELECT {key_list}, min(start_ns) AS lo, max(end_ns) AS hi
        FROM (
            SELECT *, sum(CASE WHEN prev_end_ns IS NULL OR start_ns - prev_end_ns > {merge_gap_ns} THEN 1 ELSE 0 END)
                      OVER (PARTITION BY {key_list} ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
            FROM ({with_prev_end_sql(f"SELECT {key_list}, start_ns, end_ns FROM ({source})", keys)})
        )
        GROUP BY {key_list}, island
    """


def busy_time_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., busy_ns, islands): union length of the intervals of `source` per key."""
    key_list = ", ".join(keys)
    return f"""
        SELECT {key_list}, sum(hi - lo)::BIGINT AS busy_ns, count(*) AS islands
        FROM ({busy_islands_sql(source, keys)})
        GROUP BY {key_list}
    """


def islands_with_time_before_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., lo, hi, before): the busy islands of `source` per key, each with the busy time
    of the islands before it.

    Busy time before any moment t is then one ASOF join away (`busy_before_sql`): the overlap of an
    interval [a, b) with the islands is B(b) - B(a), in O(n log n) where a range join compares every pair.
    """
    key_list = ", ".join(keys)
    return f"""
        SELECT {key_list}, lo, hi,
               coalesce(sum(hi - lo) OVER (PARTITION BY {key_list} ORDER BY lo
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS before
        FROM ({busy_islands_sql(source, keys)})
    """


def busy_before_sql(alias: str, point: str) -> str:
    """B(point): busy time before `point` of the islands row `alias`, ASOF-joined on the keys and
    `alias.lo <= point`; 0 when no island starts before it (nothing ran: a true zero, not unknown)."""
    return (f"CASE WHEN {alias}.lo IS NULL THEN 0 ELSE {alias}.before + "
            f"(CASE WHEN {point} < {alias}.hi THEN {point} ELSE {alias}.hi END) - {alias}.lo END")

