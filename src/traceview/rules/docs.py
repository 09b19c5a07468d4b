"""Rule documentation: the text `traceview rules explain` prints, and docs/rules.md built from it."""

from __future__ import annotations

from traceview.rules.config import RuleConfig
from traceview.rules.loader import Rule, load_rules


def explain_text(rule: Rule, config: RuleConfig) -> str:
    """The text `rules explain` prints and docs/rules.md collects."""
    lines = [f"{rule.id} {rule.name}: {rule.title}", "",
             f"severity: {config.severity_for(rule)}    "
             f"tags: {', '.join(rule.tags) or '-'}    since: {rule.since}",
             f"requires: {', '.join(rule.requires)}", ""]
    for heading, key in (("What it flags", "what"), ("Why it matters", "why"), ("How to fix", "fix"),
                         ("Example", "example")):
        if rule.doc.get(key):
            lines += [f"{heading}:", *("  " + line for line in rule.doc[key].splitlines()), ""]
    if rule.params:
        lines.append("Parameters:")
        values = config.params_for(rule)
        lines += [f"  {p.name} = {values[p.name]!r} {p.unit}  ({p.help}; default {p.default!r})" for p in rule.params]
        lines.append("")
    lines += ["Query:", *("  " + line for line in rule.query.strip().splitlines())]
    return "\n".join(lines)


def render_markdown() -> str:
    """docs/rules.md: every built-in rule's explain text; a test keeps it current."""
    config = RuleConfig()
    parts = ["# traceview rules", "",
             "Generated from rules/*.toml by `traceview.rules.docs.render_markdown()`; `traceview rules explain ID`",
             "prints the same text. The rule file format is described in [rule-format.md](rule-format.md).", "",
             "| id | name | severity | title |", "|---|---|---|---|"]
    rules = load_rules()
    parts += [f"| [{r.id}](#{r.id.lower()}) | {r.name} | {r.severity} | {r.title} |" for r in rules]
    for rule in rules:
        parts += ["", f"## {rule.id}", "", "```", explain_text(rule, config), "```"]
    return "\n".join(parts) + "\n"
