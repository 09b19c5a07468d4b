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
    for heading, key in (("What it flags", "what"), ("Why it matters", "why")):
        lines += [f"{heading}:", *("  " + line for line in rule.doc[key].splitlines()), ""]
    lines.append("How to fix (the first variant whose facts hold for the finding):")
    for variant in rule.fixes:
        lines += [f"  when {', '.join(variant.when) if variant.when else 'otherwise'}: {variant.summary}",
                  *("    " + line for line in variant.text.splitlines())]
    lines.append("")
    for heading, key in (("How the saving is counted", "saving"), ("Example", "example")):
        if rule.doc.get(key):
            lines += [f"{heading}:", *("  " + line for line in rule.doc[key].splitlines()), ""]
    if rule.params:
        lines.append("Parameters:")
        values = config.params_for(rule)
        lines += [f"  {p.name} = {values[p.name]!r} {p.unit}  ({p.help}; default {p.default!r})" for p in rule.params]
        lines.append("")
    lines += ["Query:", *("  " + line for line in rule.query.strip().splitlines())]
    return "\n".join(lines)


SAVINGS_ACCOUNTING = """## Savings that add up

Findings are ranked by the time fixing them could save, so two findings must never count the same nanoseconds,
and the savings attributed to a step must never exceed how long it lasted. Savings therefore come from one
ledger, the `step_budget` relation (docs/analysis.md):

- Every step's wall time, and each rank's time outside every step, is cut into disjoint buckets that add up to it
  exactly, on the rank's merged timeline (all devices and streams): `compute` (a non-communication kernel runs),
  `communication` (only communication kernels run), `copy` (only memcpys/memsets run), GPU idle inside the GPU
  span by kind (`idle_host_wait`: the host issued the next work only after the GPU ran dry; `idle_sync_drain`:
  the launching thread sat in a synchronizing call; `idle_bubble`: the next work was already queued; `idle_unknown`:
  no launch call in the trace) and `outside_gpu` (before the first and after the last GPU work).
- A rule returns `step_savings`: per step and bucket, the nanoseconds its fix could win there. The engine walks the
  findings from the largest claim down, then their deferred claims (a rule yielding time to a more specific one:
  TV201's sync-drain gaps come after TV204's per-call price), then the residual rules, which price what the others
  left (TV202); each claim is granted at most what is left of that bucket in that step. A finding's saving is what it was granted; when that
  is less than it claimed, its evidence carries `claimed_ns` and a `saving_note`. So the savings of all findings
  in one step add up to at most its wall time, and a gap is priced once, by the finding that names its cause.
- Only steady time is priced: on a rank that has steady steps (`step_states`), claims on warm-up and
  initialisation steps and on time outside every step are granted nothing. A rank with no steady step is priced
  as it is, and TV104 says so.
- Ranks run side by side, so a finding's saving is its largest rank's part of what it was granted (the job's
  wall time shortens by at most one rank's saving; `saving_basis` says so), and one cause on several ranks is one
  finding with per-rank evidence, its saving the largest rank's.
- Comparisons are made between steps of the same phase only (TV207), and communication that no overlap can hide
  (tensor-parallel all-reduce on the critical path of inference) is priced by what a faster link could win, not as
  if it could be hidden (TV401).

Each rule's "How the saving is counted" says which bucket it claims.""".splitlines()


def render_markdown() -> str:
    """docs/rules.md: every built-in rule's explain text; a test keeps it current."""
    config = RuleConfig()
    parts = ["# traceview rules", "",
             "Generated from rules/*.toml by `traceview.rules.docs.render_markdown()`; `traceview rules explain ID`",
             "prints the same text. The rule file format is described in [rule-format.md](rule-format.md).", "",
             *SAVINGS_ACCOUNTING, "",
             "| id | name | severity | title |", "|---|---|---|---|"]
    rules = load_rules()
    parts += [f"| [{r.id}](#{r.id.lower()}) | {r.name} | {r.severity} | {r.title} |" for r in rules]
    for rule in rules:
        parts += ["", f"## {rule.id}", "", "```", explain_text(rule, config), "```"]
    return "\n".join(parts) + "\n"
