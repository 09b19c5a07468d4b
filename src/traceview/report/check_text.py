"""`traceview check` as text for a terminal: each finding with its saving and evidence, then the skipped rules."""

from __future__ import annotations

from typing import Any

from traceview.rules.loader import SEVERITIES

EVIDENCE_ROWS = 5


def render(document: dict[str, Any]) -> str:
    """The check document (`report.data.check_document`) as lines, ending with the counts."""
    lines = []
    findings = document["findings"]
    for finding in findings:
        share = f" ({finding['share_pct']:.1f}% of the trace)" if finding["share_pct"] else ""
        saving = (f"saves up to {finding['estimated_saving_ns'] / 1e6:.2f} ms{share}" if finding["estimated_saving_ns"]
                  else "no time estimate")
        lines.append(f"{finding['rule']} {finding['severity']:<7} {finding['message']}")
        lines.append(f"      {saving}; fix: see `traceview rules explain {finding['rule']}`")
        for row in (finding["evidence"].get("rows") or [])[:EVIDENCE_ROWS]:
            lines.append("      - " + ", ".join(f"{k}={v}" for k, v in row.items()))
    for skipped in document["skipped"]:
        lines.append(f"{skipped['rule']} skipped {skipped['title']}: {skipped['reason']}")
    counts = {level: sum(f["severity"] == level for f in findings) for level in SEVERITIES}
    suppressed = document["suppressed_by_baseline"]
    hidden = f", {suppressed} suppressed by the baseline" if suppressed else ""
    lines.append(f"{len(findings)} findings ({counts['error']} errors, {counts['warning']} warnings, "
                 f"{counts['info']} info), {len(document['skipped'])} rules skipped{hidden}")
    return "\n".join(lines) + "\n"
