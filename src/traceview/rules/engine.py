"""Run rules over an analysed trace: check each rule's requirements, run its query with bound
parameters, turn rows into findings ranked by the time fixing them could save.

A rule whose tables or columns are absent or empty is *skipped with the reason*, never reported as
"no problem found". Savings are granted from one ledger (the `step_budget` relation): a finding
claims nanoseconds per step and bucket, and no two findings are granted the same time.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import duckdb

from traceview import profiling
from traceview.analysis.budget import BUCKETS
from traceview.model import db
from traceview.model.db import plain
from traceview.rules.config import RuleConfig
from traceview.rules.loader import SEVERITIES, Rule, message_parts
from traceview.rules.merge import fingerprint, merge_ranks

# an uncosted finding's time at stake ranks as the win of a fix that took a tenth of it off: the smallest gain a
# kernel-level fix is worth doing for, stated in docs/rule-format.md; the stake itself is shown, never summed
AT_STAKE_RANK_SHARE = 0.10
RESERVED_COLUMNS = ("estimated_saving_ns", "at_stake_ns", "key", "evidence", "step_savings", "fix_facts")


@dataclass(frozen=True)
class Claim:
    """Nanoseconds a finding says it could win in one step (step_id None: outside every step) and bucket."""

    rank: int
    step_id: int | None
    bucket: str
    ns: int
    deferred: bool = False  # granted after every finding's plain claims (TV201's sync drains: TV204's first)


@dataclass(frozen=True)
class Finding:
    rule: str
    name: str
    severity: str
    title: str
    message: str
    estimated_saving_ns: int
    share_pct: float | None
    evidence: dict[str, Any] = field(hash=False)
    key: str
    fingerprint: str
    fix: str = ""
    fix_summary: str = ""
    fix_basis: tuple[dict[str, str], ...] = field(default=(), hash=False)  # the facts that chose the fix
    claims: tuple[Claim, ...] = field(default=(), hash=False)
    residual: bool = False
    fix_facts: tuple[str, ...] = field(default=(), hash=False)  # the finding's own facts, from its row
    # time the cause holds that no saving can be stated for (a dominant kernel family with no FLOP/byte costs):
    # never granted from the ledger, never summed; it only ranks the finding (`rank_ns`)
    at_stake_ns: int = 0

    @property
    def rank_ns(self) -> int:
        """What a finding is ranked by: its granted saving, plus a tenth of the time at stake that no cost model
        prices (AT_STAKE_RANK_SHARE): a certain saving outranks an equal stake of unknown yield, and an uncosted
        dominant family still ranks above the small findings."""
        return self.estimated_saving_ns + round(AT_STAKE_RANK_SHARE * self.at_stake_ns)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule, "name": self.name, "severity": self.severity, "title": self.title,
            "message": self.message, "estimated_saving_ns": self.estimated_saving_ns, "at_stake_ns": self.at_stake_ns,
            "share_pct": self.share_pct, "evidence": self.evidence, "fingerprint": self.fingerprint,
            "fix": self.fix, "fix_summary": self.fix_summary, "fix_basis": list(self.fix_basis),
            "doc": f"docs/rules.md#{self.rule.lower()}",
        }


@dataclass(frozen=True)
class Skipped:
    rule: str
    title: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "title": self.title, "reason": self.reason}


@dataclass(frozen=True)
class CheckResult:
    findings: tuple[Finding, ...]
    skipped: tuple[Skipped, ...]
    rules_run: tuple[str, ...]
    suppressed: int = 0

    def reaches(self, fail_on: str) -> bool:
        """Whether any finding is at or above the `fail_on` severity."""
        floor = SEVERITIES.index(fail_on)
        return any(SEVERITIES.index(f.severity) >= floor for f in self.findings)


class _MessageFormatter(string.Formatter):
    """Message templates never fail on a NULL (`{time_ms:.1f}` of None prints as 'n/a'), count words
    (`{gaps:count:gap}`: '1 gap', '3 gaps', 'no gaps'; `{n:count:copy/copies}` for other plurals), and note
    whether the first field came out empty (NULL, '' or a number that reads as zero), so an optional part can go."""

    def __init__(self) -> None:
        self.fields = 0
        self.first_empty = False

    def format_field(self, value: Any, format_spec: str) -> str:
        text = self._text(value, format_spec)
        if not self.fields:
            self.first_empty = value is None or value == "" or (
                isinstance(value, (int, float)) and not isinstance(value, bool) and not re.search(r"[1-9]", text))
        self.fields += 1
        return text

    def _text(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "n/a"
        if format_spec.startswith("count:"):
            singular, _, plural = format_spec.removeprefix("count:").partition("/")
            plural = plural or singular + "s"
            return f"{value} {singular if value == 1 else plural}" if value else f"no {plural}"
        try:
            return super().format_field(value, format_spec)
        except (ValueError, TypeError):
            return str(value)


def format_message(template: str, values: dict[str, Any]) -> str:
    """A finding's message: the template's fields filled from its row and parameters, each optional part kept
    only when its first field has a value that is not zero."""
    out = []
    for text, optional in message_parts(template):
        formatter = _MessageFormatter()
        part = formatter.vformat(text, (), values)
        if not (optional and formatter.first_empty):
            out.append(part)
    return "".join(out)


def missing_requirements(con: duckdb.DuckDBPyConnection, requirements: Iterable[str]) -> dict[str, str | None]:
    """Why each requirement is not met in this trace (None: met). The rows and values of every table and column
    are counted in one query: one count each took the sample 25 ms before its first rule ran."""
    reasons: dict[str, str | None] = {}
    counts: dict[str, tuple[str, str]] = {}  # requirement -> (its count, a scalar subquery; the reason when 0)
    for requirement in dict.fromkeys(requirements):
        table, _, column = requirement.partition(".")
        if not db.has_table(con, table):
            reasons[requirement] = f"table {table} is not in the database"
        elif column and not db.has_column(con, table, column):
            reasons[requirement] = f"{table}.{column} is not computed for this trace"
        elif column:
            counts[requirement] = (f'(SELECT count("{db.ident(column)}") FROM "{db.ident(table)}")',
                                   f"no {table}.{column} values in this trace")
        else:
            counts[requirement] = (f'(SELECT count(*) FROM "{db.ident(table)}")', f"no rows in {table}")
    if counts:
        counts_sql = ", ".join(count_sql for count_sql, _ in counts.values())
        found = con.execute(f"SELECT {counts_sql}").fetchall()[0]
        for (requirement, (_, none_found)), rows in zip(counts.items(), found, strict=True):
            reasons[requirement] = None if rows else none_found
    return reasons


def _rank_spans(con: duckdb.DuckDBPyConnection) -> dict[int, int]:
    return {rank: span for rank, span in con.execute(
        "SELECT rank, end_ns - start_ns FROM trace_info WHERE end_ns > start_ns").fetchall()}


def run_rule(con: duckdb.DuckDBPyConnection, rule: Rule, params: dict[str, Any], severity: str,
             spans: dict[int, int]) -> list[Finding]:
    """Run one rule's query and turn each row into a finding."""
    used = {name: value for name, value in params.items() if re.search(rf"\${name}\b", rule.query)}
    cursor = con.execute(rule.query, used)
    columns = [d[0] for d in cursor.description]
    if "estimated_saving_ns" not in columns:
        raise ValueError("query returns no estimated_saving_ns column")
    findings = []
    for values in cursor.fetchall():
        row = {name: plain(value) for name, value in zip(columns, values)}
        message = format_message(rule.message, {**params, **row})
        saving = int(row.get("estimated_saving_ns") or 0)
        span = spans.get(row["rank"]) if "rank" in row else max(spans.values(), default=None)
        evidence = {k: v for k, v in row.items() if k not in RESERVED_COLUMNS}
        if row.get("evidence") is not None:
            evidence["rows"] = row["evidence"]
        key = str(row.get("key") or message)
        claims = _claims(row.get("step_savings"))
        findings.append(Finding(
            rule=rule.id, name=rule.name, severity=severity, title=rule.title, message=message,
            estimated_saving_ns=saving, share_pct=round(100.0 * saving / span, 3) if span else None,
            evidence=evidence, key=key, fingerprint=fingerprint(rule.id, key),
            claims=claims, residual=rule.residual, fix_facts=tuple(row.get("fix_facts") or ()),
            at_stake_ns=int(row.get("at_stake_ns") or 0),
        ))
    return findings


def _claims(step_savings: list[dict[str, Any]] | None) -> tuple[Claim, ...]:
    claims = tuple(Claim(int(c["rank"]), None if c["step_id"] is None else int(c["step_id"]), str(c["bucket"]),
                         int(c["ns"]), bool(c.get("deferred"))) for c in step_savings or () if c["ns"])
    unknown = sorted({c.bucket for c in claims} - set(BUCKETS))
    if unknown:
        raise ValueError(f"step_savings names unknown budget buckets {unknown}")
    if any(c.ns < 0 for c in claims):
        raise ValueError("step_savings claims negative time")
    return claims


class Ledger:
    """What is left to grant of each priced window's buckets (`step_budget`).

    A claim is granted at most what remains of its bucket in its step, after earlier findings took
    theirs: so two findings never count the same nanoseconds, and a step is never promised more than it
    lasted. A window that is not priced (warm-up or initialisation on a rank that has steady steps)
    grants nothing.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.left = {(rank, step_id, bucket): int(ns) for rank, step_id, bucket, ns in con.execute(
            "SELECT rank, step_id, bucket, ns FROM step_budget_buckets WHERE priced").fetchall()}

    def grant(self, claim: Claim) -> int:
        key = (claim.rank, claim.step_id, claim.bucket)
        granted = min(claim.ns, self.left.get(key, 0))
        if granted:
            self.left[key] -= granted
        return granted


def grant_savings(con: duckdb.DuckDBPyConnection, findings: list[Finding],
                  spans: dict[int, int]) -> list[Finding]:
    """Each finding's saving becomes what the ledger grants its claims: largest claims first, then deferred
    claims (a rule yielding a bucket to a more specific one: TV201's sync drains after TV204's calls), then the
    residual rules' (TV202 prices the step time no cause-specific finding explained).

    Findings that claim nothing keep their saving (they price no step time, or predate the ledger);
    a finding granted less than it claimed says why in its evidence. A finding whose claims span several ranks
    saves what its largest rank was granted (`saving_basis` says so): the ranks run side by side.
    """
    if not any(f.claims for f in findings) or not db.has_table(con, "step_budget"):
        return findings
    ledger = Ledger(con)
    order = sorted(findings, key=lambda f: (f.residual, -f.estimated_saving_ns))
    # three passes: plain claims, deferred claims, then residual rules' claims
    granted: dict[int, list[tuple[Claim, int]]] = {id(f): [] for f in order}
    for residual, deferred in ((False, False), (False, True), (True, None)):
        for finding in order:
            if finding.residual == residual:
                granted[id(finding)] += [(claim, ledger.grant(claim)) for claim in finding.claims
                                         if deferred is None or claim.deferred == deferred]
    granted_findings = []
    for finding in order:
        if not finding.claims:
            granted_findings.append(finding)
            continue
        grants = granted[id(finding)]
        by_rank: dict[int, int] = {}
        for claim, ns in grants:
            by_rank[claim.rank] = by_rank.get(claim.rank, 0) + ns
        evidence = {**finding.evidence, "step_savings": [
            {"rank": c.rank, "step_id": c.step_id, "bucket": c.bucket, "ns": ns} for c, ns in grants if ns]}
        granted_ns, claimed = sum(by_rank.values()), sum(c.ns for c in finding.claims)
        if granted_ns < claimed:
            evidence["claimed_ns"] = claimed
            evidence["saving_note"] = (f"{granted_ns / 1e6:.2f} of the {claimed / 1e6:.2f} ms claimed counted: the "
                                       "rest lies in warm-up or initialisation steps, or another finding already "
                                       "counted that time in that step")
        # ranks run side by side: a fix on every rank shortens the job by at most the largest rank's part
        rank = max(by_rank, key=lambda r: (by_rank[r], -r)) if by_rank else finding.evidence.get("rank")
        saving = by_rank.get(rank, 0)
        if len([ns for ns in by_rank.values() if ns]) > 1:
            evidence["saving_basis"] = (f"the largest rank's part (rank {rank}, {saving / 1e6:.2f} of the "
                                        f"{granted_ns / 1e6:.2f} ms granted over {len(by_rank)} ranks): ranks run "
                                        "side by side, so the job's wall time shortens by at most one rank's saving")
        span = spans.get(rank) if rank is not None else max(spans.values(), default=None)
        granted_findings.append(replace(finding, estimated_saving_ns=saving, evidence=evidence,
                                        share_pct=round(100.0 * saving / span, 3) if span else None))
    return granted_findings


def trace_facts(con: duckdb.DuckDBPyConnection) -> dict[int, dict[str, str]]:
    """Per rank, the facts that hold (`trace_facts`) with their evidence; none where the analysis did not run."""
    facts: dict[int, dict[str, str]] = {}
    if db.has_table(con, "trace_facts"):
        for rank, fact, evidence in con.execute("SELECT rank, fact, evidence FROM trace_facts").fetchall():
            facts.setdefault(rank, {})[fact] = evidence
    return facts


def choose_fixes(findings: list[Finding], rules: dict[str, Rule],
                 facts: dict[int, dict[str, str]]) -> list[Finding]:
    """Each finding's fix: its rule's first variant whose conditions hold for the finding's rank (every rank's
    facts where it names none), its own facts (`fix_facts`) and the budget bucket holding most of its saving."""
    chosen = []
    for finding in findings:
        rank = finding.evidence.get("rank")
        known = dict(facts.get(rank, {})) if rank is not None else {
            fact: evidence for rank_facts in facts.values() for fact, evidence in rank_facts.items()}
        known.update((fact, "the finding's own evidence") for fact in finding.fix_facts)
        buckets: dict[str, int] = {}
        for claim in finding.evidence.get("step_savings") or ():
            buckets[claim["bucket"]] = buckets.get(claim["bucket"], 0) + claim["ns"]
        if buckets:
            top = min(buckets, key=lambda bucket: (-buckets[bucket], bucket))
            known[f"bucket:{top}"] = f"{buckets[top] / 1e6:.2f} ms of the saving lies in {top}"
        variant = rules[finding.rule].fix_for(frozenset(known))
        basis = tuple({"fact": fact, "evidence": known[fact]} for fact in variant.when if not fact.startswith("!"))
        chosen.append(replace(finding, fix=variant.text, fix_summary=variant.summary, fix_basis=basis))
    return chosen


def _in_parallel(con: duckdb.DuckDBPyConnection, rules: list[Rule], outcome) -> list:
    """Each rule's outcome, in rule order; side by side, a cursor each, where one statement leaves cores idle
    (db.side_by_side): a small trace's rules are DuckDB planning. Rules only read."""
    with db.cursor_pool(con, db.side_by_side(con) if len(rules) > 1 else 1) as submit:
        futures = [submit(lambda cursor, rule: outcome(rule, cursor), rule) for rule in rules]
    return [future.result() for future in futures]


def check(con: duckdb.DuckDBPyConnection, rules: list[Rule], config: RuleConfig,
          known: frozenset[str] = frozenset()) -> CheckResult:
    """Run the selected rules; findings whose fingerprint is in `known` (a baseline) are suppressed."""
    spans = _rank_spans(con)
    findings: list[Finding] = []
    skipped: list[Skipped] = []
    run: list[str] = []
    runnable = []
    selected = [rule for rule in rules if config.selects(rule)]
    missing = missing_requirements(con, (requirement for rule in selected for requirement in rule.requires))
    for rule in selected:
        reasons = [missing[requirement] for requirement in rule.requires if missing[requirement]]
        if reasons:
            skipped.append(Skipped(rule.id, rule.title, "; ".join(reasons)))
        else:
            runnable.append(rule)

    def outcome(rule: Rule, cursor: duckdb.DuckDBPyConnection) -> list[Finding] | str:
        try:
            with profiling.step("rules", rule.id, lambda: len(found)):
                found = run_rule(cursor, rule, config.params_for(rule), config.severity_for(rule), spans)
            return found
        except (duckdb.Error, ValueError, KeyError, IndexError) as exc:
            return f"rule failed: {str(exc).splitlines()[0]}"

    with profiling.overlapping("rules"):
        outcomes = _in_parallel(con, runnable, outcome)
    for rule, result in zip(runnable, outcomes, strict=True):
        if isinstance(result, str):
            skipped.append(Skipped(rule.id, rule.title, result))
            continue
        findings += result
        run.append(rule.id)
    with profiling.overlapping("rules"), profiling.step("rules", "savings ledger", lambda: len(findings)):
        findings = grant_savings(con, findings, spans)
    findings = choose_fixes(findings, {rule.id: rule for rule in runnable}, trace_facts(con))
    findings = merge_ranks(findings, con.execute("SELECT count(*) FROM trace_info").fetchall()[0][0])
    kept = [f for f in findings if f.fingerprint not in known]
    kept.sort(key=lambda f: (-f.rank_ns, -SEVERITIES.index(f.severity), f.rule, f.key))
    return CheckResult(tuple(kept), tuple(skipped), tuple(run), len(findings) - len(kept))
