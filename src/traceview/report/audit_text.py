"""The audit as a terminal table: one row per trace, then the totals and the exit code."""

from __future__ import annotations

from typing import Any

import polars as pl


def render(document: dict[str, Any]) -> str:
    rows = []
    for row in document["rows"]:
        if row["status"] == "error":
            rows.append({"trace": row["path"], "gpu": "", "steps": None, "phases": "", "E": None, "W": None, "I": None,
                         "top finding": f"error: {row['error']}"})
        else:
            sev = row["findings_by_severity"]
            rows.append({"trace": row["path"], "gpu": row["gpu"] or "-", "steps": row["steps"],
                         "phases": ", ".join(f"{n} {p}" for p, n in row["phases"].items()),
                         "E": sev["error"], "W": sev["warning"], "I": sev["info"], "top finding": row["top_finding"] or ""})
    counts = document["findings"]
    skipped = f", {len(document['skipped'])} skipped (not traces)" if document["skipped"] else ""
    footer = (f"{document['traces']} traces, {document['errors']} unreadable{skipped}; findings: {counts['error']} errors, "
              f"{counts['warning']} warnings, {counts['info']} info; exit {document['exit_code']}\n")
    if not rows:
        return footer
    with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=70, tbl_width_chars=220,
                   tbl_hide_dataframe_shape=True, tbl_hide_column_data_types=True):
        return str(pl.DataFrame(rows)) + "\n" + footer
