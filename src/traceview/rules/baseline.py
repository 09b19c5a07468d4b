"""Baselines: the findings a team already knows about, suppressed so CI fails only on new ones.

A finding's fingerprint hashes its rule id and its stable key (the rule's `key` column, else its
message), so a baseline survives re-profiling as long as the problem is the same one.
"""

from __future__ import annotations

import json
from pathlib import Path

from traceview.errors import TraceviewError
from traceview.files import write_atomically
from traceview.rules.engine import Finding

BASELINE_VERSION = 1


def read_baseline(path: Path) -> frozenset[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return frozenset(entry["fingerprint"] for entry in data["findings"])
    except FileNotFoundError:
        raise TraceviewError(f"{path}: baseline file does not exist (write one with --write-baseline)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise TraceviewError(f"{path}: not a traceview baseline ({exc})") from None


def write_baseline(path: Path, findings: tuple[Finding, ...]) -> None:
    """Write atomically (temporary file, then rename), sorted so the file diffs cleanly."""
    entries = sorted(
        ({"rule": f.rule, "fingerprint": f.fingerprint, "message": f.message} for f in findings),
        key=lambda e: (e["rule"], e["fingerprint"]),
    )
    write_atomically(path, json.dumps({"schema_version": BASELINE_VERSION, "findings": entries}, indent=1) + "\n")
