"""Rule files: one TOML file per rule, validated field by field so a bad rule names its file and field.

The format (docs/rules.md) keeps a rule declarative: identity, parameters with defaults and units,
the tables it needs, one DuckDB query returning a row per finding, a message template, and the
"why it matters" / "how to fix" text that `traceview rules explain` prints.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.resources import data_dir

SEVERITIES = ("info", "warning", "error")  # least to most severe: the one order of rules, findings, diagnostics
ID_PATTERN = re.compile(r"^[A-Z]{2,}[0-9]{3,}$")
NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
REQUIRE_PATTERN = re.compile(r"^[a-z_]+(?:\.[a-z_]+)?$")
DOC_FIELDS = ("what", "why")
TOP_LEVEL = {"id", "name", "title", "severity", "since", "tags", "requires", "params", "doc", "query",
             "message", "residual", "fix"}
# a fact a fix variant's `when` names: `workload:serving`, `cuda_graphs`, `!copies:pinned` (must not hold)
FACT_PATTERN = re.compile(r"^!?[a-z][a-z0-9_]*(?::[a-z0-9][a-z0-9_.+-]*)?$")
SUMMARY_MAX_CHARS = 120  # the verdict prints a fix's summary whole: one line, never cut


@dataclass(frozen=True)
class Param:
    name: str
    default: float | int | str | bool
    unit: str
    help: str


@dataclass(frozen=True)
class FixVariant:
    """One way to fix a finding, for the traces whose facts include every fact in `when` (a `!fact` must be
    absent): a rule lists its variants most specific first and ends with one that holds everywhere."""

    when: tuple[str, ...]
    summary: str
    text: str

    def holds(self, facts: set[str] | frozenset[str]) -> bool:
        return all((fact[1:] not in facts) if fact.startswith("!") else (fact in facts) for fact in self.when)


@dataclass(frozen=True)
class Rule:
    """One validated rule file."""

    id: str
    name: str
    title: str
    severity: str
    since: str
    tags: tuple[str, ...]
    requires: tuple[str, ...]
    params: tuple[Param, ...]
    doc: dict[str, str] = field(hash=False)
    query: str
    message: str
    path: Path
    fixes: tuple[FixVariant, ...] = ()
    residual: bool = False  # its claims are granted after every other rule's: it prices what they left

    def fix_for(self, facts: set[str] | frozenset[str]) -> FixVariant:
        """The first variant whose conditions the facts meet; the last one is unconditional, so one always does."""
        return next(variant for variant in self.fixes if variant.holds(facts))

    @property
    def family(self) -> str:
        """TV3 for TV301: the hundred the rule belongs to (selection by prefix)."""
        return self.id[:-2]

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}


def severity_order_sql(column: str) -> str:
    """A DuckDB sort key putting the most severe value of `column` first; an unknown one sorts as the least."""
    return f"coalesce(list_position({list(reversed(SEVERITIES))!r}, {column}), {len(SEVERITIES)})"


def _fail(path: Path, where: str, problem: str) -> TraceviewError:
    return TraceviewError(f"{path}: {where}: {problem}")


def _get(table: dict, key: str, kind: type | tuple[type, ...], path: Path, where: str = "", *, optional=False):
    label = f"{where}.{key}" if where else key
    if key not in table:
        if optional:
            return None
        raise _fail(path, label, "missing")
    value = table[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        expected = " or ".join(k.__name__ for k in kinds)
        raise _fail(path, label, f"expected {expected}, got {type(value).__name__}")
    return value


def _strings(values: list, path: Path, where: str) -> tuple[str, ...]:
    if not all(isinstance(v, str) and v for v in values):
        raise _fail(path, where, "expected a list of non-empty strings")
    return tuple(values)


def load_rule(path: Path) -> Rule:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceviewError(f"{path}: cannot read rule file ({exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise TraceviewError(f"{path}: invalid TOML ({exc})") from None
    if "phases" in data:  # never enforced: the query alone decides which steps a rule looks at
        raise _fail(path, "phases", "no longer a rule field: filter on steps.phase or kernels.phase in the query")
    unknown = set(data) - TOP_LEVEL
    if unknown:
        raise _fail(path, sorted(unknown)[0], "unknown field")
    rule_id = _get(data, "id", str, path)
    if not ID_PATTERN.match(rule_id):
        raise _fail(path, "id", f"{rule_id!r} is not letters then digits, like TV301")
    name = _get(data, "name", str, path)
    if not NAME_PATTERN.match(name):
        raise _fail(path, "name", f"{name!r} is not kebab-case")
    severity = _get(data, "severity", str, path)
    if severity not in SEVERITIES:
        raise _fail(path, "severity", f"{severity!r} is not one of {', '.join(SEVERITIES)}")
    requires = _strings(_get(data, "requires", list, path), path, "requires")
    if bad := [r for r in requires if not REQUIRE_PATTERN.match(r)]:
        raise _fail(path, "requires", f"{bad[0]!r} is not table or table.column")
    params = []
    for param_name, spec in (_get(data, "params", dict, path, optional=True) or {}).items():
        where = f"params.{param_name}"
        if not isinstance(spec, dict):
            raise _fail(path, where, "expected a table with default, unit and help")
        params.append(Param(
            param_name,
            _get(spec, "default", (int, float, str, bool), path, where),
            _get(spec, "unit", str, path, where),
            _get(spec, "help", str, path, where),
        ))
    doc = _get(data, "doc", dict, path)
    if "fix" in doc:
        raise _fail(path, "doc.fix", "moved to [[fix]] tables, each with when, summary and text (docs/rule-format.md)")
    if extra := set(doc) - {*DOC_FIELDS, "saving", "example"}:
        raise _fail(path, f"doc.{sorted(extra)[0]}", "unknown field")
    for key in DOC_FIELDS:
        if not str(_get(doc, key, str, path, "doc")).strip():
            raise _fail(path, f"doc.{key}", "empty")
    query = _get(data, "query", str, path)
    if not query.strip():
        raise _fail(path, "query", "empty")
    message = _get(data, "message", str, path)
    try:
        for text, _ in message_parts(message):
            list(string.Formatter().parse(text))
    except ValueError as exc:
        raise _fail(path, "message", f"bad template ({exc})") from None
    return Rule(
        id=rule_id, name=name, title=_get(data, "title", str, path), severity=severity,
        since=_get(data, "since", str, path),
        tags=_strings(_get(data, "tags", list, path, optional=True) or [], path, "tags"),
        requires=requires, params=tuple(params), doc={k: str(v).strip() for k, v in doc.items()},
        query=query, message=message, path=path, fixes=_fixes(data, path),
        residual=bool(_get(data, "residual", bool, path, optional=True)),
    )


def _fixes(data: dict, path: Path) -> tuple[FixVariant, ...]:
    tables = _get(data, "fix", list, path)
    if not tables:
        raise _fail(path, "fix", "expected at least one [[fix]] table")
    variants = []
    for index, table in enumerate(tables):
        where = f"fix[{index}]"
        if not isinstance(table, dict):
            raise _fail(path, where, "expected a table with when, summary and text")
        if extra := set(table) - {"when", "summary", "text"}:
            raise _fail(path, f"{where}.{sorted(extra)[0]}", "unknown field")
        when = _get(table, "when", list, path, where)
        if bad := [fact for fact in when if not isinstance(fact, str) or not FACT_PATTERN.match(fact)]:
            raise _fail(path, f"{where}.when", f"{bad[0]!r} is not a fact like 'workload:serving' or '!cuda_graphs'")
        summary = " ".join(_get(table, "summary", str, path, where).split())
        if not summary or len(summary) > SUMMARY_MAX_CHARS or summary.endswith("."):
            raise _fail(path, f"{where}.summary", f"expected one clause of at most {SUMMARY_MAX_CHARS} characters, "
                                                  "no final period")
        text = _get(table, "text", str, path, where).strip()
        if not text:
            raise _fail(path, f"{where}.text", "empty")
        variants.append(FixVariant(tuple(when), summary, text))
    if variants[-1].when:
        raise _fail(path, f"fix[{len(variants) - 1}].when", "the last variant must hold everywhere (when = [])")
    seen = [frozenset(v.when) for v in variants]
    if len(set(seen)) < len(seen):
        raise _fail(path, "fix", "two variants have the same conditions")
    return tuple(variants)


def builtin_rules_dir() -> Path:
    """The top-level ``rules/``, as installed (:func:`traceview.resources.data_dir`)."""
    return data_dir("rules")


def load_rules(extra_dirs: tuple[Path, ...] = ()) -> list[Rule]:
    """Built-in rules plus a team's own directories; ids must be unique across all of them."""
    rules: dict[str, Rule] = {}
    for directory in (builtin_rules_dir(), *extra_dirs):
        if not directory.is_dir():
            raise TraceviewError(f"{directory}: rules directory does not exist")
        for path in sorted(directory.glob("*.toml")):
            rule = load_rule(path)
            if rule.id in rules:
                raise TraceviewError(f"{path}: id {rule.id} is already used by {rules[rule.id].path}")
            rules[rule.id] = rule
    return sorted(rules.values(), key=lambda r: r.id)


def message_parts(template: str) -> list[tuple[str, bool]]:
    """A message template cut into (text, optional) parts: text in `[...]` is optional, dropped when its first
    field is NULL, '' or reads as zero (`[; {idle_ms:.2f} ms idle]` goes when 0.004 ms prints as 0.00), so no
    message states a zero; `[[` and `]]` are literal brackets. Brackets inside a `{field}` belong to the field."""
    parts: list[tuple[str, bool]] = []
    text, optional, depth, i = "", False, 0, 0
    while i < len(template):
        char, pair = template[i], template[i:i + 2]
        if depth == 0 and pair in ("[[", "]]", "{{", "}}"):
            text, i = text + (pair if pair[0] in "{}" else pair[0]), i + 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        elif depth == 0 and char == "[":
            if optional:
                raise ValueError("'[' inside an optional part")
            parts.append((text, False))
            text, optional = "", True
            i += 1
            continue
        elif depth == 0 and char == "]":
            if not optional:
                raise ValueError("']' without its '['")
            parts.append((text, True))
            text, optional = "", False
            i += 1
            continue
        text, i = text + char, i + 1
    if optional:
        raise ValueError("'[' without its ']'")
    parts.append((text, False))
    return [(text, optional) for text, optional in parts if text]
