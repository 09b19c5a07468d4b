"""Rule configuration: `[tool.traceview]` in pyproject.toml or a traceview.toml, then CLI flags.

Keys (flags win over files):

    select = ["TV2", "TV301"]      # ids or prefixes to run (default: all)
    ignore = ["TV305"]
    fail-on = "warning"            # lowest severity that makes `check` exit 1 (default: error)
    baseline = "traceview-baseline.json"
    rules-dirs = ["ci/rules"]      # a team's own rule files, relative to the config file
    [tool.traceview.params]        # per-rule parameter overrides
    "TV201.min_gap_ms" = 5
    [tool.traceview.severity]      # per-rule severity overrides
    TV301 = "error"
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from traceview.compat import tomllib
from traceview.errors import TraceviewError
from traceview.rules.loader import SEVERITIES, Rule

CONFIG_KEYS = {"select", "ignore", "fail-on", "baseline", "rules-dirs", "params", "severity"}


@dataclass(frozen=True)
class RuleConfig:
    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str = "error"
    baseline: Path | None = None
    rules_dirs: tuple[Path, ...] = ()
    params: dict[str, Any] = field(default_factory=dict)
    severity: dict[str, str] = field(default_factory=dict)
    source: Path | None = None

    def selects(self, rule: Rule) -> bool:
        """Selection as in ruff: by id or id prefix; ignore wins over select."""
        def matches(codes: tuple[str, ...]) -> bool:
            return any(rule.id.startswith(code) or rule.name == code for code in codes)

        return (not self.select or matches(self.select)) and not matches(self.ignore)

    def params_for(self, rule: Rule) -> dict[str, Any]:
        values = rule.defaults()
        prefix = f"{rule.id}."
        for key, value in self.params.items():
            if key.startswith(prefix):
                values[key[len(prefix):]] = value
        return values

    def severity_for(self, rule: Rule) -> str:
        return self.severity.get(rule.id, rule.severity)

    def validate(self, rules: list[Rule]) -> None:
        """Overrides must name a known rule and parameter: a typo is an error, not a silent default."""
        by_id = {r.id: r for r in rules}
        where = str(self.source) if self.source else "configuration"
        for key, value in self.params.items():
            rule_id, _, param = key.partition(".")
            if rule_id not in by_id:
                raise TraceviewError(f"{where}: params.{key}: no rule {rule_id}")
            known = {p.name: p for p in by_id[rule_id].params}
            if param not in known:
                raise TraceviewError(f"{where}: params.{key}: {rule_id} has no parameter {param!r} "
                                     f"(it has: {', '.join(known) or 'none'})")
            default = known[param].default
            if isinstance(default, (int, float)) and not isinstance(default, bool) and (
                    isinstance(value, bool) or not isinstance(value, (int, float))):
                raise TraceviewError(f"{where}: params.{key}: expected a number, got {value!r}")
        for rule_id, severity in self.severity.items():
            if rule_id not in by_id:
                raise TraceviewError(f"{where}: severity.{rule_id}: no such rule")
            if severity not in SEVERITIES:
                raise TraceviewError(f"{where}: severity.{rule_id}: {severity!r} is not one of {', '.join(SEVERITIES)}")


def find_config(start: Path) -> Path | None:
    """The nearest traceview.toml, or pyproject.toml with [tool.traceview], from `start` upwards."""
    for directory in (start, *start.parents):
        candidate = directory / "traceview.toml"
        if candidate.is_file():
            return candidate
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file() and "traceview" in _read(pyproject).get("tool", {}):
            return pyproject
    return None


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise TraceviewError(f"{path}: cannot read configuration ({exc})") from None


def load_config(path: Path | None) -> RuleConfig:
    if path is None:
        return RuleConfig()
    data = _read(path)
    table = data.get("tool", {}).get("traceview", {}) if path.name == "pyproject.toml" else data
    unknown = set(table) - CONFIG_KEYS
    if unknown:
        raise TraceviewError(f"{path}: unknown key {sorted(unknown)[0]!r} (known: {', '.join(sorted(CONFIG_KEYS))})")

    def codes(key: str) -> tuple[str, ...]:
        value = table.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TraceviewError(f"{path}: {key}: expected a list of rule ids or prefixes")
        return tuple(value)

    fail_on = table.get("fail-on", "error")
    if fail_on not in SEVERITIES:
        raise TraceviewError(f"{path}: fail-on: {fail_on!r} is not one of {', '.join(SEVERITIES)}")
    base = path.parent
    baseline = table.get("baseline")
    return RuleConfig(
        select=codes("select"), ignore=codes("ignore"), fail_on=fail_on,
        baseline=base / baseline if isinstance(baseline, str) else None,
        rules_dirs=tuple(base / d for d in codes("rules-dirs")),
        params=dict(table.get("params", {})), severity=dict(table.get("severity", {})), source=path,
    )


def with_flags(config: RuleConfig, *, select=(), ignore=(), fail_on=None, baseline=None, rules_dirs=(),
               params=(), severity=()) -> RuleConfig:
    """Command-line flags over the file: lists given on the command line replace the file's."""
    overrides: dict[str, Any] = {}
    for text in params:
        key, sep, raw = text.partition("=")
        if not sep or "." not in key:
            raise TraceviewError(f"--param {text!r}: expected RULE.PARAM=VALUE, e.g. TV201.min_gap_ms=5")
        overrides[key] = _number(raw)
    levels = {}
    for text in severity:
        rule_id, sep, level = text.partition("=")
        if not sep:
            raise TraceviewError(f"--severity {text!r}: expected RULE=LEVEL, e.g. TV301=error")
        levels[rule_id] = level
    return replace(
        config,
        select=tuple(select) or config.select,
        ignore=tuple(ignore) or config.ignore,
        fail_on=fail_on or config.fail_on,
        baseline=baseline or config.baseline,
        rules_dirs=config.rules_dirs + tuple(rules_dirs),
        params={**config.params, **overrides},
        severity={**config.severity, **levels},
    )


def _number(raw: str) -> Any:
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    return raw
