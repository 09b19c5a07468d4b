"""The JSON report: ReportData verbatim, versioned by `schema_version` (docs/report-json.md).

Keys are sorted and floats kept as computed, so the same trace gives byte-identical JSON.
"""

from __future__ import annotations

import json
from typing import Any

NAME = "json"
EXTENSION = "json"


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
