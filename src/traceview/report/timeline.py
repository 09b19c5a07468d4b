"""ReportData `timeline`: the moments the report's numbers come from, as lanes a reader can look at.

For the slowest step of each phase (by the wall time it owns) and the step named with `--focus-step`,
every kernel and memop the step launched on a lane per (device, stream), the device's idle gaps inside
the step's GPU span with their `idle_kind`, and above them the host calls that launched the work (and
the synchronising calls on those threads) on a lane per thread. Offsets are integer ns from the step's
start. A step holding more than MAX_MARKS marks is drawn coarser, never cut: adjacent marks of one lane
and group (kernel category, memop kind, call kind, idle kind) that are shorter than a resolution and
closer than it are merged into one bar with a count and the summed duration (marks longer than the
resolution stay as they are), and the step's `note` says so.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import duckdb

from traceview import units as fmt
from traceview.errors import TraceviewError
from traceview.model.db import dict_rows

# Bars per step: vLLM H100 decode (3,247 marks) fits whole; its prefill (4,140) and bolongcheng's training step
# (11,403) merge; a page of such steps stays under 2 MB and draws in about a second in Chromium.
MAX_MARKS = 4_000
# Merge levels tried in turn until a step fits: the resolution is the step's wall time over the divisor, and
# whether kernels merge within one category only (coarse levels merge a lane's adjacent kernels of any category).
LEVELS = ((0, True), (16_000, True), (8_000, True), (4_000, True), (2_000, True), (1_000, True),
          (4_000, False), (2_000, False), (1_000, False), (500, False), (250, False), (125, False))
BIN = 4  # a merged bar stays inside one bin of this many resolutions: sub-pixel work merges, visible work stays
_FOCUS = re.compile(r"^\s*(?:(\d+)\s*:\s*)?(\d+)\s*$")


@dataclass(frozen=True)
class FocusStep:
    """A step the user names: `N` (step_id N of the lowest rank) or `R:N`."""

    rank: int | None
    step_id: int

    @classmethod
    def parse(cls, text: str) -> FocusStep:
        match = _FOCUS.match(text)
        if not match:
            raise TraceviewError(f"--focus-step {text!r}: expected N (a step of the lowest rank) or RANK:N")
        return cls(int(match.group(1)) if match.group(1) is not None else None, int(match.group(2)))

    def __str__(self) -> str:
        return f"{self.step_id}" if self.rank is None else f"{self.rank}:{self.step_id}"


_steps_sql = """
    SELECT s.rank, s.step_id, s.phase, s.start_ns, s.end_ns, s.end_ns - s.start_ns AS wall_ns, b.wall_ns AS owned_ns,
           s.gpu_start_ns, s.gpu_end_ns, s.kernels, s.memops
    FROM steps s LEFT JOIN step_budget b ON b.rank = s.rank AND b.step_id = s.step_id
"""

# Every mark of one step: kernels and memops it launched, the calls that launched them, synchronising calls on
# those threads inside the window, and its devices' idle gaps clipped to its GPU span. `grp` is what merges.
# A kernel's name (often hundreds of characters) stays out: every CTE and window would copy it; the bars look
# up the names of their longest kernels at the end.
_marks_sql = f"""
    step AS (SELECT * FROM ({_steps_sql}) WHERE rank = $rank AND step_id = $step_id),
    k AS (
        SELECT k.kernel_id, k.device_id, k.stream_id, k.start_ns, k.end_ns, k.dur_ns, k.launch_call_id,
               coalesce(k.category, 'other') AS category, k.dtype,
               r.flops, r.bytes, r.achieved_tflops, r.achieved_tbps, r.pct_of_roof
        FROM kernels k LEFT JOIN roofline_kernels r ON r.rank = k.rank AND r.kernel_id = k.kernel_id
        WHERE k.rank = $rank AND k.step_id = $step_id
    ),
    m AS (SELECT * FROM memops WHERE rank = $rank AND step_id = $step_id),
    copies AS (
        SELECT a.call_id FROM m JOIN api_calls a
            ON a.rank = m.rank AND a.pid = m.pid AND a.correlation_id = m.correlation_id
    ),
    calls AS (  -- call_id is unique within a rank; a call feeding both kernels and memops is a copy
        SELECT pid, tid, call_id, start_ns, end_ns, dur_ns, name,
               CASE WHEN call_id IN (SELECT call_id FROM copies) THEN 'copy' ELSE 'launch' END AS call_kind
        FROM api_calls
        WHERE rank = $rank AND (call_id IN (SELECT launch_call_id FROM k) OR call_id IN (SELECT call_id FROM copies))
    ),
    syncs AS (
        SELECT a.pid, a.tid, a.call_id, a.start_ns, a.end_ns, a.dur_ns, a.name, 'sync' AS call_kind
        FROM api_calls a, step s
        WHERE a.rank = $rank AND a.is_sync AND a.start_ns >= s.start_ns AND a.start_ns < s.end_ns
          AND EXISTS (SELECT 1 FROM calls c WHERE c.pid = a.pid AND c.tid = a.tid)
          AND a.call_id NOT IN (SELECT call_id FROM calls)
    ),
    devices AS (SELECT device_id FROM k UNION SELECT device_id FROM m),
    marks AS NOT MATERIALIZED (
        SELECT 'kernel' AS kind, 2 AS lane_order, device_id, stream_id, NULL::BIGINT AS pid, NULL::BIGINT AS tid,
               kernel_id AS seq, start_ns, end_ns, dur_ns, NULL::VARCHAR AS name, category AS grp, dtype,
               NULL::BIGINT AS bytes,
               CASE WHEN achieved_tflops IS NOT NULL THEN flops END AS costed_flops,
               CASE WHEN achieved_tflops IS NOT NULL THEN dur_ns END AS flops_ns,
               CASE WHEN achieved_tbps IS NOT NULL THEN bytes END AS costed_bytes,
               CASE WHEN achieved_tbps IS NOT NULL THEN dur_ns END AS bytes_ns,
               pct_of_roof * dur_ns / 100 AS floor_ns, CASE WHEN pct_of_roof IS NOT NULL THEN dur_ns END AS roof_ns
        FROM k
        UNION ALL
        SELECT kind, 2, device_id, stream_id, NULL, NULL, memop_id, start_ns, end_ns, dur_ns, coalesce(name, kind),
               kind, NULL, bytes, NULL, NULL, NULL, NULL, NULL, NULL
        FROM m
        UNION ALL
        SELECT 'call', 0, NULL, NULL, pid, tid, call_id, start_ns, end_ns, dur_ns, name, call_kind, NULL, NULL,
               NULL, NULL, NULL, NULL, NULL, NULL
        FROM (SELECT * FROM calls UNION ALL SELECT * FROM syncs)
        UNION ALL
        SELECT 'idle', 1, g.device_id, NULL, NULL, NULL, g.start_ns, lo, hi, hi - lo, g.name, g.idle_kind, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL
        FROM gpu_idle_gaps g, step s,  -- the gap clipped to the step's GPU span (both bounds known: see WHERE)
             LATERAL (SELECT CASE WHEN g.start_ns < s.gpu_start_ns THEN s.gpu_start_ns ELSE g.start_ns END AS lo,
                             CASE WHEN g.end_ns > s.gpu_end_ns THEN s.gpu_end_ns ELSE g.end_ns END AS hi)
        WHERE g.rank = $rank AND g.device_id IN (SELECT device_id FROM devices)
          AND g.end_ns > s.gpu_start_ns AND g.start_ns < s.gpu_end_ns
    ),
    lanes AS (  -- host threads first, then per device its idle lane and its streams
        SELECT *, row_number() OVER (ORDER BY lane_order > 0, device_id, lane_order, stream_id, pid, tid) - 1 AS lane
        FROM (SELECT DISTINCT lane_order, device_id, stream_id, pid, tid FROM marks)
    ),
    laned AS NOT MATERIALIZED (
        SELECT m.*, l.lane FROM marks m JOIN lanes l
            ON l.lane_order = m.lane_order AND l.device_id IS NOT DISTINCT FROM m.device_id
           AND l.stream_id IS NOT DISTINCT FROM m.stream_id AND l.pid IS NOT DISTINCT FROM m.pid
           AND l.tid IS NOT DISTINCT FROM m.tid
    )"""


def _opens_sql(level: int, by_category: bool) -> str:
    """SQL: 0 where a mark joins the bar of the mark before it on its lane at this merge level, else 1.

    It joins when both are shorter than the resolution, of one group (at coarse levels kernels of any category)
    and in one bin of BIN resolutions from the step's start, and it starts less than the resolution after the
    lane's work before it ends: `reach`, the largest of the two durations and that distance, is below the
    resolution. What it compares with (`compared`, one window pass) is the same at every level.
    """
    resolution_sql = f"$resolution_{level}::BIGINT"
    bin_sql = f"({resolution_sql} * $bin::BIGINT)"
    same_sql = "same_group" if by_category else "same_kind"
    return f"""CASE WHEN {resolution_sql} > 0 AND {same_sql} AND reach < {resolution_sql}
                        AND offset_ns // {bin_sql} = prev_offset_ns // {bin_sql} THEN 0 ELSE 1 END"""


# How a step's bars are drawn, from `runs` (its marks, each with the bar it falls in and its place on its lane)
# and `chosen` (the merge level).
_drawn_sql = """
    bars AS (
        SELECT lane, kind, min(start_ns) - $step_start AS offset_ns, max(end_ns) - min(start_ns) AS span_ns,
               sum(dur_ns)::BIGINT AS dur_ns, count(*) AS count,
               -- the longest mark's name (a kernel's: its seq) and group, the first on the lane among equals
               arg_max(struct_pack(name := name, seq := seq, grp := grp), struct_pack(dur_ns := dur_ns, pos := -pos))
                   FILTER (WHERE dur_ns IS NOT NULL) AS top,
               count(DISTINCT grp) AS groups,
               CASE WHEN count(DISTINCT dtype) = 1 AND count(dtype) = count(*) THEN any_value(dtype) END AS dtype,
               sum(bytes)::BIGINT AS bytes,
               -- floating-point sums in lane order, so a figure does not depend on how threads split the rows;
               -- only the costed marks are ordered (the sum skips the rest)
               sum(costed_flops ORDER BY pos) FILTER (WHERE costed_flops IS NOT NULL) / nullif(sum(flops_ns), 0) / 1e3
                   AS achieved_tflops,
               sum(costed_bytes ORDER BY pos) FILTER (WHERE costed_bytes IS NOT NULL) / nullif(sum(bytes_ns), 0) / 1e3
                   AS achieved_tbps,
               100.0 * sum(floor_ns ORDER BY pos) FILTER (WHERE floor_ns IS NOT NULL) / nullif(sum(roof_ns), 0)
                   AS pct_of_roof
        FROM runs GROUP BY lane, kind, run
    ),
    picked AS (SELECT * EXCLUDE (top), top.name AS name, top.seq AS top_seq, top.grp AS grp FROM bars),
    titled AS (
        SELECT b.* EXCLUDE (name, top_seq),
               CASE WHEN b.kind = 'kernel' AND b.top_seq IS NOT NULL THEN coalesce(k.name, k.short_name, '')
                    ELSE b.name END AS name
        FROM picked b LEFT JOIN (  -- the few named kernels first: a join with the whole table carried every name
            SELECT kernel_id, name, short_name FROM kernels
            WHERE rank = $rank AND kernel_id IN (SELECT top_seq FROM picked WHERE kind = 'kernel')
        ) k ON b.kind = 'kernel' AND k.kernel_id = b.top_seq
    ),
    named AS (SELECT *, dense_rank() OVER (ORDER BY name) - 1 AS name_index FROM titled)
    SELECT
        (SELECT level FROM chosen) AS level,
        (SELECT list(struct_pack(lane := lane, kind := CASE lane_order WHEN 0 THEN 'host' WHEN 1 THEN 'idle'
                                                                      ELSE 'gpu' END,
                                 device_id := device_id, stream_id := stream_id, pid := pid, tid := tid)
                     ORDER BY lane)
         FROM lanes) AS lanes,
        (SELECT list(name ORDER BY name_index) FROM (SELECT DISTINCT name, name_index FROM named)) AS names,
        (SELECT list(struct_pack(lane := lane, offset_ns := offset_ns, span_ns := span_ns, dur_ns := dur_ns,
                                 count := count, name := name_index, category := grp, categories := groups,
                                 dtype := dtype, achieved_tflops := achieved_tflops, achieved_tbps := achieved_tbps,
                                 pct_of_roof := pct_of_roof) ORDER BY lane, offset_ns)
         FROM named WHERE kind = 'kernel') AS kernels,
        (SELECT list(struct_pack(lane := lane, offset_ns := offset_ns, span_ns := span_ns, dur_ns := dur_ns,
                                 count := count, name := name_index, kind := kind, bytes := bytes)
                     ORDER BY lane, offset_ns)
         FROM named WHERE kind IN ('memcpy', 'memset')) AS memops,
        (SELECT list(struct_pack(lane := lane, offset_ns := offset_ns, span_ns := span_ns, dur_ns := dur_ns,
                                 count := count, name := name_index, kind := grp) ORDER BY lane, offset_ns)
         FROM named WHERE kind = 'call') AS calls,
        (SELECT list(struct_pack(lane := lane, offset_ns := offset_ns, span_ns := span_ns, dur_ns := dur_ns,
                                 count := count, name := name_index, idle_kind := grp) ORDER BY lane, offset_ns)
         FROM named WHERE kind = 'idle') AS gaps,
        (SELECT held FROM held) AS held"""

_held_sql = """
    held AS (
        SELECT struct_pack(kernels := count(*) FILTER (WHERE kind = 'kernel'),
                           kernel_ns := coalesce(sum(dur_ns) FILTER (WHERE kind = 'kernel'), 0)::BIGINT,
                           memops := count(*) FILTER (WHERE kind IN ('memcpy', 'memset')),
                           calls := count(*) FILTER (WHERE kind = 'call'),
                           gaps := count(*) FILTER (WHERE kind = 'idle'),
                           gap_ns := coalesce(sum(dur_ns) FILTER (WHERE kind = 'idle'), 0)::BIGINT) AS held
        FROM laned
    )"""

# A step that fits MAX_MARKS as it is: every mark is its own bar (its kind and seq are unique on its lane).
_as_is_sql = f"""
    WITH {_marks_sql}, {_held_sql},
    chosen AS (SELECT 1 AS level),
    runs AS (SELECT *, seq AS run, NULL::BIGINT AS pos FROM laned),
    {_drawn_sql}"""

# Every mark of the step in its lane's order (`pos`, increasing along each lane) with the kind, group, duration and
# start of the mark before it, and the latest end of the marks before it on its lane (`prev_end_ns`). A lane's
# first mark sees the previous lane's last in the lags; its prev_end_ns is NULL, which is what tells.
_ordered_sql = """
    swept AS (  -- every lane's marks in order, read by streaming windows (an empty OVER keeps the sort's order):
        -- the sort runs on every core, and each function is one step along the rows. The lags cross from one lane
        -- into the next, but a lane's first mark has no prev_end_ns (below), so no reach, and opens a bar anyway
        SELECT lane, kind, seq, start_ns, grp, dur_ns, row_number() OVER w AS pos,
               lag(kind = 'kernel') OVER w AS prev_is_kernel, lag(grp) OVER w AS prev_grp,
               lag(dur_ns) OVER w AS prev_dur_ns, lag(start_ns) OVER w AS prev_start_ns,
               -- the running max of (lane, end) packed in one integer: lanes come in order, so the max carries
               -- the current lane once it holds a mark of it; 2**63 shifts a BIGINT end into 0..2**64 - 1, below
               -- the lane packed above it
               max((lane::HUGEINT << 64) + end_ns + 9223372036854775808) OVER w AS lane_end
        FROM (SELECT lane, kind, seq, start_ns, end_ns, grp, dur_ns FROM laned ORDER BY lane, start_ns, seq)
        WINDOW w AS (ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
    ),
    ordered AS MATERIALIZED (  -- stored, so the comparisons below run on every core again
        SELECT * EXCLUDE (lane_end, prev_lane_end),
               CASE WHEN prev_lane_end >> 64 = lane
                    THEN (prev_lane_end - (lane::HUGEINT << 64) - 9223372036854775808)::BIGINT END AS prev_end_ns
        FROM (SELECT *, lag(lane_end) OVER () AS prev_lane_end FROM swept)
    )"""


# A mark's `opens`: bit i - 1 (the parameter $bit_i) set where it opens a bar at merge level i; and the number of
# bars at each level
_every_level_opens_sql = " + ".join(f"(({_opens_sql(i, by_category)}) << $bit_{i}::INTEGER)"
                        for i, (_, by_category) in enumerate(LEVELS, 1))
_counts_sql = ", ".join(f"sum((opens >> $bit_{i}::INTEGER) & 1)" for i in range(1, len(LEVELS) + 1))

# Past the cap, the first merge level whose bars fit $max_marks (the last one if none does): one sort and one
# streaming pass give every mark its place on its lane and what it compares with, one scan counts the bars of
# every level, and one running sum of the chosen level's `opens`, in the same order, numbers the bars. An
# ordered window would sort and then walk the sorted rows once per function (2 M-kernel export: 2.7 s for the
# two windows, 1.0 s sorted and streamed). Both passes carry only the columns they order and compare; the rest
# joins back, and `marks`/`laned` are computed again per use (NOT MATERIALIZED), which is cheaper than storing
# millions of rows.
_merged_sql = f"""
    WITH {_marks_sql}, {_held_sql},
    {_ordered_sql},
    compared AS (  -- what every level compares, once: the groups (strings) and the largest of the three lengths
        SELECT lane, kind, seq, pos, grp = prev_grp AS same_group,
               CASE WHEN kind = 'kernel' THEN 'kernel' ELSE grp END
                   = CASE WHEN prev_is_kernel THEN 'kernel' ELSE prev_grp END AS same_kind,
               CASE WHEN dur_ns IS NULL OR prev_dur_ns IS NULL OR prev_end_ns IS NULL THEN NULL
                    WHEN dur_ns >= prev_dur_ns AND dur_ns >= start_ns - prev_end_ns THEN dur_ns
                    WHEN prev_dur_ns >= start_ns - prev_end_ns THEN prev_dur_ns
                    ELSE start_ns - prev_end_ns END AS reach,
               start_ns - $step_start AS offset_ns, prev_start_ns - $step_start AS prev_offset_ns
        FROM ordered
    ),
    flagged AS MATERIALIZED (  -- bit i - 1 of `opens`: the mark opens a bar at level i
        SELECT lane, kind = 'kernel' AS is_kernel, seq, pos,
               {_every_level_opens_sql} AS opens
        FROM compared
    ),
    counts AS (SELECT [{_counts_sql}] AS bars FROM flagged),
    chosen AS (
        SELECT coalesce(list_position(list_transform(bars, lambda b: b <= $max_marks), true), len(bars)) AS level
        FROM counts
    ),
    merged AS (  -- a mark's bar: how many marks up to it open one at the chosen level. Bars group the marks of
        -- one lane, so one count over every lane in turn numbers them all
        SELECT lane, is_kernel, seq, pos, sum((opens >> (level - 1)) & 1) OVER (ROWS UNBOUNDED PRECEDING) AS run
        FROM (SELECT f.*, c.level FROM flagged f, chosen c ORDER BY f.pos)
    ),
    runs AS (  -- every mark has its bar; LEFT keeps the wide side probing and the narrow one in the hash table.
        -- A mark is (lane, seq) and whether it is a kernel (a stream lane also holds memops, whose ids are
        -- another sequence): a boolean, not the kind's string, so the hash join compares no strings
        SELECT l.*, r.run, r.pos
        FROM laned l LEFT JOIN merged r ON r.lane = l.lane AND r.is_kernel = (l.kind = 'kernel') AND r.seq = l.seq
    ),
    {_drawn_sql}"""


def build_timeline(con: duckdb.DuckDBPyConnection, focus_step: FocusStep | None = None) -> dict[str, Any]:
    """The steps the HTML timeline draws, each with its lanes and bars (docs/report-json.md `timeline`)."""
    chosen = _chosen(con, focus_step)
    return {"max_marks": MAX_MARKS, "steps": [_step(con, step) for step in chosen]}


def _chosen(con: duckdb.DuckDBPyConnection, focus: FocusStep | None) -> list[dict[str, Any]]:
    """The slowest step of each phase with GPU work (owned wall time, else wall time), and the focus step; in
    time order, each with the sentence that says why it is drawn."""
    slowest = dict_rows(con, f"""
        SELECT * FROM ({_steps_sql}) WHERE phase <> 'empty' AND kernels + memops > 0
        QUALIFY row_number() OVER (PARTITION BY phase ORDER BY coalesce(owned_ns, wall_ns) DESC, rank, step_id) = 1""")
    reasons = {(s["rank"], s["step_id"]): [f"slowest {s['phase']} step"] for s in slowest}
    steps = {(s["rank"], s["step_id"]): s for s in slowest}
    focus_key = None
    if focus is not None:
        step = _focus(con, focus)
        focus_key = (step["rank"], step["step_id"])
        reasons.setdefault(focus_key, []).append(f"focus step (--focus-step {focus})")
        steps[focus_key] = step
    out = []
    for key, step in sorted(steps.items(), key=lambda item: (item[1]["rank"], item[1]["start_ns"], item[0])):
        time_ns = step["owned_ns"] if step["owned_ns"] is not None else step["wall_ns"]
        why = " and ".join(reasons[key])
        out.append({**step, "focus": key == focus_key,
                    "why": f"{why}: step {step['step_id']} on rank {step['rank']}, {fmt.duration(time_ns)}"})
    return out


def _focus(con: duckdb.DuckDBPyConnection, focus: FocusStep) -> dict[str, Any]:
    """The focus step's row; a step the trace does not have is the user's error, named with what exists."""
    ranks = [r for (r,) in con.execute("SELECT DISTINCT rank FROM trace_info ORDER BY rank").fetchall()]
    rank = focus.rank if focus.rank is not None else (ranks[0] if ranks else 0)
    if rank not in ranks:
        listed = ", ".join(map(str, ranks)) or "none"
        raise TraceviewError(f"--focus-step {focus}: no rank {rank} in the trace (ranks: {listed})")
    rows = dict_rows(con, f"SELECT * FROM ({_steps_sql}) WHERE rank = ? AND step_id = ?", [rank, focus.step_id])
    if rows:
        return rows[0]
    first, last = con.execute("SELECT min(step_id), max(step_id) FROM steps WHERE rank = ?", [rank]).fetchall()[0]
    held = f"steps {first}–{last}" if first is not None else "it has no steps"
    raise TraceviewError(f"no step {focus.step_id} on rank {rank} ({held})")


def levels(wall_ns: int) -> list[tuple[int, bool]]:
    """The merge levels for a step of this wall time: (resolution in ns, kernels merge within a category only)."""
    return [(0 if divisor == 0 else max(1, math.ceil(wall_ns / divisor)), by_category)
            for divisor, by_category in LEVELS]


def _step(con: duckdb.DuckDBPyConnection, step: dict[str, Any]) -> dict[str, Any]:
    """One drawn step: the first merge level whose bars fit MAX_MARKS (the last one if none does). A small step is
    drawn as it is first, and merged only if its calls and gaps take it past the cap; any other goes straight to
    merging, whose first level draws every mark as it is. Small: its kernels and memops, with at most one launch
    call and one idle gap each, fit the cap. The query as it is saves 12 ms on a step of a hundred kernels and
    nothing on one of a thousand, where running it for nothing cost 0.1 s (a 10x vLLM prefill step: 1,133 kernels,
    4,140 marks)."""
    options = levels(step["wall_ns"])
    params = {"rank": step["rank"], "step_id": step["step_id"], "step_start": step["start_ns"]}
    rows = (None if 3 * ((step["kernels"] or 0) + (step["memops"] or 0)) > MAX_MARKS
            else dict_rows(con, _as_is_sql, params)[0])
    if rows is None or sum(rows["held"][kind] for kind in ("kernels", "memops", "calls", "gaps")) > MAX_MARKS:
        rows = dict_rows(con, _merged_sql, {**params, "bin": BIN, "max_marks": MAX_MARKS,
                                            **{f"resolution_{i}": r for i, (r, _) in enumerate(options, 1)},
                                            **{f"bit_{i}": i - 1 for i in range(1, len(options) + 1)}})[0]
    resolution, by_category = options[rows["level"] - 1]
    lanes = rows["lanes"] or []
    drawn = {kind: rows[kind] or [] for kind in ("kernels", "memops", "calls", "gaps")}
    out = {key: step[key] for key in ("rank", "step_id", "phase", "why", "focus", "start_ns", "end_ns", "wall_ns",
                                       "owned_ns", "gpu_start_ns", "gpu_end_ns")}
    return {**out, "lanes": [{**lane, "label": _lane_label(lane, lanes)} for lane in lanes],
            "names": rows["names"] or [], **drawn, "held": rows["held"],
            "resolution_ns": resolution or None, "merged_across_categories": bool(resolution) and not by_category,
            "note": _note(rows["held"], drawn, resolution, by_category)}


def _lane_label(lane: dict[str, Any], lanes: list[dict[str, Any]]) -> str:
    if lane["kind"] == "host":
        pids = {other["pid"] for other in lanes if other["kind"] == "host"}
        return f"host thread {lane['tid']}" + (f" (pid {lane['pid']})" if len(pids) > 1 else "")
    if lane["kind"] == "idle":
        return f"GPU {lane['device_id']} idle"
    return f"GPU {lane['device_id']} stream {lane['stream_id']}"


def _note(held: dict[str, Any], drawn: dict[str, list], resolution: int, by_category: bool) -> str | None:
    """What the chart merges, in words; None when every mark is drawn as it is."""
    if not resolution:
        return None
    kernels = "kernels of one category only" if by_category else "kernels of any category"
    labels = {"kernels": "kernels", "memops": "memops", "calls": "host calls", "gaps": "idle gaps"}
    merged = [f"{fmt.number(held[kind])} {label} into {fmt.number(len(drawn[kind]))} bars"
              for kind, label in labels.items() if held[kind] > len(drawn[kind])]
    return (f"More than {fmt.number(MAX_MARKS)} marks, so adjacent marks of one lane and kind shorter and closer "
            f"than {fmt.duration(resolution)} are merged ({kernels}): " + "; ".join(merged) + ".")
