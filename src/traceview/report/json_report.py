"""JSON for every document: the report is ReportData verbatim, versioned by `schema_version`
(docs/report-json.md); check, audit, diff and info documents are written the same way.

Keys are sorted and floats kept as computed, so the same trace gives byte-identical JSON.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any


def json_default(value: Any) -> Any:
    """JSON for DuckDB values json cannot encode: exact integers stay numbers (sums come back as DECIMAL)."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False, default=json_default) + "\n"
