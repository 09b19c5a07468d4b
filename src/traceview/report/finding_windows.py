"""Findings that point: where in the trace each finding's evidence lies, so the report can show it.

The window is a step (a finding's saving is granted per step by the ledger), so the HTML can link a finding
to that step on the timeline, and a reader of the JSON knows which steps to open in a trace viewer.
"""

from __future__ import annotations

from typing import Any

import duckdb


def _row_ns(row: dict[str, Any]) -> int:
    """How long an evidence row lasts: its `dur_ns`, else its `wall_ns` (a step), else 0."""
    return row.get("dur_ns") or row.get("wall_ns") or 0


def _evidence_rows(evidence: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[dict[str, Any], int]]]:
    """The evidence with its row lists copied (the report adds step ids to its copy, never to the rule's), and
    every row with the rank it belongs to: its own, else the finding's; rows of no known rank are left out."""
    copied = {key: [dict(row) for row in value] if key != "step_savings" and isinstance(value, list)
              and all(isinstance(row, dict) for row in value) else value for key, value in evidence.items()}
    rows = [(row, row.get("rank", copied.get("rank"))) for key, value in copied.items()
            if key != "step_savings" and isinstance(value, list) for row in value if isinstance(row, dict)]
    return copied, [(row, rank) for row, rank in rows if rank is not None]


def _place_rows(con: duckdb.DuckDBPyConnection, rows: list[tuple[dict[str, Any], int]]) -> None:
    """Give each timed row without a step id the step whose window holds its start on its rank (the
    later-starting one where windows overlap, as the step budget cuts them)."""
    if not rows:
        return
    placed = dict(con.execute("""
        SELECT p.i, s.step_id
        FROM (SELECT unnest($i) AS i, unnest($rank) AS rank, unnest($start_ns) AS start_ns) p
        JOIN steps s ON s.rank = p.rank AND s.start_ns <= p.start_ns AND p.start_ns < s.end_ns
        QUALIFY row_number() OVER (PARTITION BY p.i ORDER BY s.start_ns DESC, s.step_id DESC) = 1""",
        {"i": list(range(len(rows))), "rank": [rank for _, rank in rows],
         "start_ns": [row["start_ns"] for row, _ in rows]}).fetchall())
    for index, (row, _) in enumerate(rows):
        if index in placed:
            row["step_id"] = placed[index]


def _window_target(evidence: dict[str, Any], rows: list[tuple[dict[str, Any], int]]) -> tuple | None:
    """(rank, step_id, start_ns, end_ns) a finding points at; the times are None where the step's are meant."""
    claims: dict[tuple[int, int], int] = {}
    for claim in evidence.get("step_savings") or []:
        if claim["step_id"] is not None and claim["ns"]:
            claims[(claim["rank"], claim["step_id"])] = claims.get((claim["rank"], claim["step_id"]), 0) + claim["ns"]
    if claims:
        rank, step_id = max(claims, key=lambda key: (claims[key], -key[0], -key[1]))
        return rank, step_id, None, None
    timed = [(row, rank) for row, rank in rows if row.get("start_ns") is not None]
    if timed:
        row, rank = max(timed, key=lambda pair: (_row_ns(pair[0]), -pair[0]["start_ns"]))
        return rank, row.get("step_id"), row["start_ns"], row["start_ns"] + _row_ns(row)
    named = [(row, rank) for row, rank in rows if row.get("step_id") is not None]
    return (named[0][1], named[0][0]["step_id"], None, None) if named else None


def finding_windows(con: duckdb.DuckDBPyConnection, findings: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each finding with `window` (rank, step_id, start_ns, end_ns: where to look) and `steps` (the step ids its
    evidence comes from).

    The window is the step holding the largest part of the saving (`evidence.step_savings`); else the step of
    the longest timed evidence row (one with `start_ns`), or that row's own interval when it lies in no step;
    else the first evidence row naming a step (rules list their worst rows first); else None. Timed rows
    without a step id first get the step holding their start.
    """
    pointed = [(finding, *_evidence_rows(finding.get("evidence") or {})) for finding in findings]
    _place_rows(con, [(row, rank) for _, _, rows in pointed for row, rank in rows
                      if row.get("start_ns") is not None and row.get("step_id") is None])
    targets = [_window_target(evidence, rows) for _, evidence, rows in pointed]
    keys = [(t[0], t[1]) for t in targets if t is not None and t[1] is not None]
    bounds = {(rank, step_id): (start, end) for rank, step_id, start, end in con.execute("""
        SELECT s.rank, s.step_id, s.start_ns, s.end_ns
        FROM steps s JOIN (SELECT unnest($rank) AS rank, unnest($step_id) AS step_id) k USING (rank, step_id)""",
        {"rank": [k[0] for k in keys], "step_id": [k[1] for k in keys]}).fetchall()} if keys else {}
    out = []
    for (finding, evidence, rows), target in zip(pointed, targets):
        window = None
        if target is not None:
            rank, step_id, start_ns, end_ns = target
            start_ns, end_ns = bounds.get((rank, step_id), (start_ns, end_ns))
            if start_ns is not None:
                window = {"rank": rank, "step_id": step_id, "start_ns": start_ns, "end_ns": end_ns}
        steps = {c["step_id"] for c in evidence.get("step_savings") or [] if c["step_id"] is not None}
        steps |= {row["step_id"] for row, _ in rows if row.get("step_id") is not None}
        out.append({**finding, "evidence": evidence, "window": window, "steps": sorted(steps)})
    return out
