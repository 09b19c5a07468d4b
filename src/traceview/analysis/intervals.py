"""Interval arithmetic in SQL: busy time as the union of overlapping GPU activity.

Summing kernel durations double-counts kernels that overlap on different streams; the busy time of a
GPU is the length of the union of its activity intervals, computed here with window functions
(no Python loop, exact integer nanoseconds, no timestamp rounding).
"""

from __future__ import annotations


def busy_islands_sql(source: str, keys: tuple[str, ...]) -> str:
    """SQL yielding (keys..., lo, hi): maximal non-overlapping busy intervals of `source` per key.

    `source` must expose the key columns plus start_ns and end_ns. Intervals that touch merge.
    """
    key_list = ", ".join(keys)
    return f"""
        SELECT {key_list}, min(start_ns) AS lo, max(end_ns) AS hi
        FROM (
            SELECT *, sum(CASE WHEN prev_end IS NULL OR start_ns > prev_end THEN 1 ELSE 0 END)
                      OVER (PARTITION BY {key_list} ORDER BY start_ns, end_ns ROWS UNBOUNDED PRECEDING) AS island
            FROM (
                SELECT {key_list}, start_ns, end_ns,
                       max(end_ns) OVER (PARTITION BY {key_list} ORDER BY start_ns, end_ns
                                         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
                FROM ({source})
            )
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
