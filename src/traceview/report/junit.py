"""JUnit XML for an audit: a suite per trace, a case per rule, a failure per rule whose findings
reach --fail-on (the findings' messages inside), a skipped case per rule that could not run, an error
case for a trace that could not be read. GitHub and GitLab test reporters parse it.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

from traceview.rules.loader import SEVERITIES


def render(audit: dict[str, Any]) -> str:
    floor = SEVERITIES.index(audit["fail_on"])
    root = ET.Element("testsuites", name="traceview audit")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for row in audit["rows"]:
        suite = ET.SubElement(root, "testsuite", name=row["path"])
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        if row["status"] == "error":
            case = ET.SubElement(suite, "testcase", classname=row["path"], name="ingest")
            ET.SubElement(case, "error", message=row["error"], type="unreadable-trace").text = row["error"]
            counts.update(tests=1, errors=1)
        else:
            by_rule: dict[str, list[dict]] = {}
            for finding in row["findings"]:
                by_rule.setdefault(finding["rule"], []).append(finding)
            for rule_id in sorted(set(row["rules_run"]) | {s["rule"] for s in row["skipped"]}):
                case = ET.SubElement(suite, "testcase", classname=row["path"],
                                     name=f"{rule_id} {audit['rules'].get(rule_id, '')}".strip())
                counts["tests"] += 1
                skipped = next((s for s in row["skipped"] if s["rule"] == rule_id), None)
                failing = [f for f in by_rule.get(rule_id, []) if SEVERITIES.index(f["severity"]) >= floor]
                if skipped:
                    ET.SubElement(case, "skipped", message=skipped["reason"])
                    counts["skipped"] += 1
                elif failing:
                    text = "\n".join(f"[{f['severity']}] {f['message']} (saves up to {f['estimated_saving_ns'] / 1e6:.2f} ms)"
                                     for f in failing)
                    ET.SubElement(case, "failure", message=failing[0]["message"], type=failing[0]["severity"]).text = text
                    counts["failures"] += 1
                elif by_rule.get(rule_id):
                    ET.SubElement(case, "system-out").text = "\n".join(f["message"] for f in by_rule[rule_id])
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
