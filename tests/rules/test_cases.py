"""Every rule's fires/silent cases (tests/rules/cases/<ID>.toml), run by one parametrized test.

A case names a real trace under ../shared/traces (`trace = "nsys/x.sqlite"`) or a generator fixture
from a fixtures*.py module here (`fixture = "serving"`, written as Kineto unless `format = "nsys"`), optional analysis
`options` and rule `params`, and what must hold: `count`, `min_count`, `message_contains`, `evidence`.
"""

from __future__ import annotations

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib
from pathlib import Path

import pytest

import importlib

import traceview
from conftest import SHARED_TRACES, analysed, built_once
from traceview.rules.engine import RESERVED_COLUMNS
from traceview.rules import RuleConfig, check, load_rules
from traceview.testing import write_kineto, write_nsys

CASES_DIR = Path(__file__).parent / "cases"
FIXTURES = {
    name: function
    for module_path in sorted(Path(__file__).parent.glob("fixtures*.py"))
    for name, function in vars(importlib.import_module(module_path.stem)).items()
    if callable(function) and not name.startswith("_") and getattr(function, "__module__", "") == module_path.stem
}
RULES = {rule.id: rule for rule in load_rules()}


def _cases() -> list:
    params = []
    for path in sorted(CASES_DIR.glob("*.toml")):
        data = tomllib.loads(path.read_text())
        for kind in ("fires", "silent"):
            for index, case in enumerate(data.get(kind, [])):
                params.append(pytest.param(path.stem, kind, case, id=f"{path.stem}-{kind}-{index}"))
    return params


def _trace(case: dict) -> traceview.Trace:
    """The case's trace analysed with its options, once a session: a shared trace, or a generator fixture's
    trace written once into the session's store."""
    if "trace" in case:
        path = SHARED_TRACES / case["trace"]
        if not path.exists():
            pytest.skip(f"{path} is not present")
    else:
        writer, suffix = (write_nsys, "sqlite") if case.get("format") == "nsys" else (write_kineto, "json.gz")
        path = built_once(f"rule-cases/{case['fixture']}.{suffix}",
                          lambda target: writer(FIXTURES[case["fixture"]](), target))
    return analysed(path, **case.get("options", {}))


@pytest.mark.parametrize(("rule_id", "kind", "case"), _cases())
def test_rule_case(rule_id: str, kind: str, case: dict) -> None:
    trace = _trace(case)
    config = RuleConfig(select=(rule_id,), params={f"{rule_id}.{k}": v for k, v in case.get("params", {}).items()})
    result = check(trace.con, [RULES[rule_id]], config)
    assert not [s for s in result.skipped if s.reason.startswith("rule failed")], result.skipped
    findings = result.findings
    if kind == "silent":
        assert not findings, [f.message for f in findings]
        return
    assert findings, f"{rule_id} did not fire; skipped: {result.skipped}"
    if "count" in case:
        assert len(findings) == case["count"], [f.message for f in findings]
    assert len(findings) >= case.get("min_count", 1)
    messages = " | ".join(f.message for f in findings)
    for fragment in case.get("message_contains", []):
        assert fragment in messages
    for field, expected in case.get("evidence", {}).items():
        value = getattr(findings[0], field) if field in RESERVED_COLUMNS else findings[0].evidence[field]
        assert value == pytest.approx(expected), field
    if "fix_summary" in case:  # the variant the trace's facts choose
        assert findings[0].fix_summary == case["fix_summary"], [f.fix_basis for f in findings]
    assert all(f.estimated_saving_ns >= 0 for f in findings)


def test_every_rule_has_cases_and_documentation() -> None:
    for rule_id, rule in RULES.items():
        path = CASES_DIR / f"{rule_id}.toml"
        assert path.exists(), f"{rule_id} has no cases file"
        data = tomllib.loads(path.read_text())
        assert data.get("fires") and data.get("silent"), f"{rule_id} needs a fires and a silent case"
        assert all(rule.doc.get(key) for key in ("what", "why", "example")) and rule.fixes, rule_id
