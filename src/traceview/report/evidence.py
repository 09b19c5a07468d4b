"""A finding's evidence as labelled values and small tables, the same for the HTML page and the Markdown.

Rules write evidence as JSON: scalars named with their unit (`idle_ns`, `busy_pct`, `bytes`,
`hbm_bytes_per_s`, `median_launch_us`), lists of scalars, and lists of rows (`rows`, `step_savings`,
`per_rank`). Nothing here knows a rule: a value's unit comes from its name's suffix, a list of short rows
becomes one line per row (`step 3 · idle host wait · 1.2 ms`), a wider one a table, a nested object one
line of its fields; kernel names are shortened together per table, keeping what tells them apart.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from traceview import units
from traceview.report.names import short_kernel_name, short_kernel_names

_TIMESTAMP = re.compile(r"(^|_)(start|end|ts)_ns$")  # trace timestamps, shown from the trace's start
_UNIT = re.compile(r"(?:^|_)(ns|us|ms|s|pct|bytes_per_s|bytes|mb|gb|gbps|tbps|tflops|flops_per_s|flops)$")
_KERNEL = re.compile(r"(?:^|_)(kernel|kernel_name|short_name)$")  # a column holding one kernel's name
_IDENTIFIERS = {"step_id": "step", "rank": "rank", "device_id": "GPU", "stream_id": "stream"}  # `step 3`
LINE_FIELDS = 4  # rows with at most this many varying fields read as one line each
MAX_ITEMS = 12  # list entries shown before "and N more"


@dataclass
class Cell:
    text: str
    sort: int | float | None = None  # the raw number, for sorting
    title: str | None = None  # the full text where `text` is shortened


@dataclass
class Field:
    key: str
    label: str
    value: Cell


@dataclass
class Table:
    """A list of rows: `lines` when each row reads as one line, else `columns` and `rows` of cells."""

    key: str
    label: str
    note: str = ""  # the fields every row shares, said once: "rank 0"
    columns: list[tuple[str, str]] = field(default_factory=list)
    rows: list[list[Cell]] = field(default_factory=list)
    lines: list[list[Cell]] = field(default_factory=list)
    more: int = 0  # rows left out


def label(key: str) -> str:
    """A column name in words, its unit suffix gone: `idle_host_wait_ns` -> 'idle host wait'."""
    if key in _IDENTIFIERS:
        return _IDENTIFIERS[key]
    stem = _UNIT.sub("", key) if _UNIT.search(key) and _UNIT.sub("", key) else key
    words = stem.replace("_", " ").strip() or key
    return f"{words} %" if key.endswith("_pct") else words


def _words(text: str) -> str:
    """An enum value in words: `idle_host_wait` -> 'idle host wait'; other text as it is."""
    return text.replace("_", " ") if re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+){1,3}", text) else text


def value_text(key: str, value: Any, origin_ns: int | None = None) -> str:
    """A value with the unit its name states; never JSON and never an exponent."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, str):
        return _words(value)
    if isinstance(value, (list, tuple)):
        if not value:
            return "none"
        shown = ", ".join(value_text(key, v, origin_ns) for v in value[:MAX_ITEMS])
        return shown + (f" and {len(value) - MAX_ITEMS} more" if len(value) > MAX_ITEMS else "")
    if isinstance(value, dict):
        return " · ".join(f"{label(k)} {value_text(k, v, origin_ns)}" for k, v in value.items())
    if not isinstance(value, (int, float)):
        return str(value)
    if _TIMESTAMP.search(key):
        return f"+{units.duration(value - origin_ns)}" if origin_ns is not None else f"{units.number(value)} ns"
    match = _UNIT.search(key)
    unit = match.group(1) if match else ""
    if unit == "flops" and key.startswith("peak"):
        unit = "flops_per_s"  # a peak is a rate
    formatter = {
        "ns": units.duration, "us": lambda v: units.duration(v * 1e3), "ms": lambda v: units.duration(v * 1e6),
        "s": lambda v: units.duration(v * 1e9), "pct": units.percent, "bytes": units.size,
        "mb": lambda v: units.size(v * 1e6), "gb": lambda v: units.size(v * 1e9),
        "bytes_per_s": units.byte_rate, "gbps": lambda v: units.byte_rate(v * 1e9),
        "tbps": units.tbps, "tflops": units.tflops, "flops_per_s": units.flop_rate, "flops": units.flop_count,
    }.get(unit)
    if formatter is not None:
        return formatter(value)
    if re.search(r"(^|_)(ratio|over_\w+)$", key):
        return f"{units.plain(value)}×"
    return units.plain(value)


def _cell(key: str, value: Any, origin_ns: int | None, names: dict[str, str]) -> Cell:
    if isinstance(value, str) and value in names:  # a kernel name: shortened, never read as words
        return Cell(names[value], title=value if names[value] != value else None)
    sort = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return Cell(value_text(key, value, origin_ns), sort)


def _kernel_names(rows: list[dict[str, Any]], width: int) -> dict[str, str]:
    names = [v for row in rows for k, v in row.items() if _KERNEL.search(k) and isinstance(v, str)]
    return short_kernel_names(names, width)


def _table(key: str, rows: list[Any], origin_ns: int | None, width: int) -> Table:
    records = [row if isinstance(row, dict) else {"value": row} for row in rows]
    columns = list(dict.fromkeys(k for row in records for k in row))
    shared = [c for c in columns if len(records) > 1 and len({json.dumps(r.get(c), default=str) for r in records}) == 1
              and not isinstance(records[0].get(c), (list, dict))]
    varying = [c for c in columns if c not in shared]
    names = _kernel_names(records, width)
    note = " · ".join(_identified(c, records[0][c], origin_ns, names, labelled=True) for c in shared
                      if records[0].get(c) is not None)
    table = Table(key, label(key), note, more=max(0, len(records) - MAX_ITEMS))
    shown = records[:MAX_ITEMS]
    if len(varying) <= LINE_FIELDS:
        table.lines = [[Cell(_identified(c, r.get(c), origin_ns, names),
                             title=r.get(c) if isinstance(r.get(c), str) and names.get(r.get(c), r.get(c)) != r.get(c)
                             else None)
                        for c in varying if r.get(c) is not None] for r in shown]
    else:
        table.columns = [(c, label(c)) for c in varying]
        table.rows = [[_cell(c, r.get(c), origin_ns, names) for c in varying] for r in shown]
    return table


def _identified(key: str, value: Any, origin_ns: int | None, names: dict[str, str], labelled: bool = False) -> str:
    """One field of a one-line row: identifiers as `step 3`, enum words as they are (`labelled`: after their
    column's name), figures with their unit."""
    if key in _IDENTIFIERS and isinstance(value, int):
        return f"{_IDENTIFIERS[key]} {value}"
    if isinstance(value, str):
        text = names.get(value) or _words(value)
        return f"{label(key)} {text}" if labelled and key != "value" else text
    text = value_text(key, value, origin_ns)
    bare = key == "value" or not _UNIT.sub("", key) or isinstance(value, (list, dict))  # `ns`: the figure alone
    return text if bare else f"{label(key)} {text}"


def shape(evidence: Any, origin_ns: int | None = None, width: int = 60) -> tuple[list[Field], list[Table]]:
    """The evidence as labelled fields and tables, in the order the rule wrote them. A figure given in two
    units (`idle_ns` and `idle_ms`) is shown once, in ns."""
    if isinstance(evidence, list):
        evidence = {"rows": evidence}
    if not isinstance(evidence, dict):
        return ([Field("value", "value", Cell(value_text("value", evidence)))] if evidence not in (None, "") else []), []
    stems = {_UNIT.sub("", k) for k in evidence if k.endswith("_ns")}
    fields, tables = [], []
    for key, value in evidence.items():
        match = _UNIT.search(key)
        if match and match.group(1) in ("us", "ms", "s") and _UNIT.sub("", key) in stems:
            continue
        if key in ("mb", "gb") and "bytes" in evidence:
            continue
        if isinstance(value, list) and value and any(isinstance(v, dict) for v in value):
            tables.append(_table(key, value, origin_ns, width))
        elif isinstance(value, str) and _KERNEL.search(key):
            short = short_kernel_name(value, width)
            fields.append(Field(key, label(key), Cell(short, title=value if short != value else None)))
        else:
            fields.append(Field(key, label(key), _cell(key, value, origin_ns, {})))
    return fields, tables
