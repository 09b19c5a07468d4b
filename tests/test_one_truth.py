"""One truth per figure, on every real trace: each statement the report makes equals the relation it comes
from, and the HTML, Markdown, JSON and `info` outputs never disagree.

Every output is a view of the analysis (docs/analysis.md, stage `totals`); these tests recompute each
statement from the relations below it (`roofline_by_phase`, `step_budget`, `step_states`), not from the
relation the report reads, so a second home for a figure shows up as a disagreement.
"""

from __future__ import annotations

import html as html_escape
import json
import re

import pytest

from conftest import corpus, reported, requires_shared
from traceview.report import data as report_data
from traceview.report import html, json_report, markdown
from traceview.rules import load_rules

pytestmark = requires_shared


@pytest.fixture(params=corpus(), ids=lambda p: p.name)
def case(request):
    return reported(request.param)


def test_each_phases_bound_is_its_rooflines_and_the_verdict_says_the_same(case) -> None:
    trace, document = case
    per_rank: dict[str, list] = {}
    for phase, bound in trace.sql("SELECT phase, bound FROM roofline_by_phase ORDER BY rank").rows():
        per_rank.setdefault(phase, []).append(bound)
    pooled = dict(trace.sql("""
        SELECT r.phase, roof_bound(sum(r.costed_time_ns), sum(r.time_ns), sum(r.compute_floor_ns), sum(r.memory_floor_ns))
        FROM roofline_by_phase r JOIN phase_summary p USING (rank, phase)
        WHERE p.bound_source = 'measured' GROUP BY r.phase""").rows())
    startup = document["verdict"][0].startswith(("Start-up", "Mostly start-up"))  # no wall line then
    walls = "" if startup else document["verdict"][1].lower()
    for phase in document["phases"]:
        ranks = per_rank.get(phase["phase"], [])
        if ranks and None not in ranks and len(set(ranks)) == 1 and phase["bound"] is not None:
            assert phase["bound"] == ranks[0], phase["phase"]
        if phase["bound_source"] == "measured":
            assert phase["bound"] == pooled[phase["phase"]], phase["phase"]
        if phase["bound"] and phase["time_ns"] and phase["phase"] != "empty" and not startup:
            assert f"{phase['phase']} is {phase['bound']}-bound" in walls


def test_no_saving_is_priced_in_an_initialisation_step_and_priced_agrees_with_the_states(case) -> None:
    trace, document = case
    states = dict(((rank, step), state) for rank, step, state in
                  trace.sql("SELECT rank, step_id, state FROM step_states").rows())
    steady_ranks = {rank for (rank, _), state in states.items() if state == "steady"}
    priced = {(s["rank"], s["step_id"]): s["priced"] for s in document["steps"]}
    for (rank, step), state in states.items():
        if state == "init" or (state == "warmup" and rank in steady_ranks):
            assert priced[(rank, step)] is False, (rank, step, state)
        if state == "steady":
            assert priced[(rank, step)] is True, (rank, step, state)
    for finding in document["findings"]:
        for claim in (finding["evidence"] or {}).get("step_savings") or []:
            if claim["step_id"] is not None:
                assert priced[(claim["rank"], claim["step_id"])], (finding["rule"], claim)
    for row in document["diagnosis"]["steady_state"]:
        unpriced = [key for key, is_priced in priced.items() if key[0] == row["rank"] and not is_priced]
        assert row["unpriced_steps"] == len(unpriced), row


def test_html_markdown_json_and_info_show_the_same_phases(case) -> None:
    trace, document = case
    info = report_data.trace_summary(trace.con)["phases"]
    assert [{k: v for k, v in p.items() if k != "wall_ns"} for p in info] == document["phases"]
    assert json.loads(json_report.render(document))["phases"] == document["phases"]
    page, text = html.render(document), markdown.render(document)
    for phase in document["phases"]:
        if not phase["bound"]:
            continue
        label = f"{phase['bound']} ({phase['bound_source'].replace('_', ' ')})"
        assert re.search(rf"\| {re.escape(phase['phase'])} \|[^\n]*\| {re.escape(label)} \|", text), phase["phase"]
        assert (f"<b>{phase['bound']}</b> <span class=\"muted small\">("
                f"{html_escape.escape(phase['bound_source'].replace('_', ' '))})") in page


def test_copy_totals_say_unknown_bytes_as_unknown_not_zero(case) -> None:
    trace, document = case
    for kind, section in (("memcpy", "copies"), ("memset", "memsets")):
        count, known, total = trace.sql("SELECT count(*), count(bytes), sum(bytes) FROM memops WHERE kind = ?",
                                        [kind]).rows()[0]
        figures = document["summary"][section]
        assert figures["count"] == count
        assert figures["bytes"] == (0 if count == 0 else None if known == 0 else total), kind


def _facts_from_the_trace(trace) -> dict[int, set[str]]:
    """Each rank's facts recomputed from the contract tables and the steps, not from trace_facts: the facts a fix
    variant may rest on."""
    facts: dict[int, set[str]] = {}

    def add(sql: str, fact_of) -> None:
        for row in trace.sql(sql).rows():
            facts.setdefault(row[0], set()).add(fact_of(*row[1:]))

    add("SELECT DISTINCT rank FROM steps WHERE phase = 'train'", lambda: "workload:train")
    add("SELECT DISTINCT rank FROM steps WHERE phase IN ('prefill', 'decode', 'mixed')", lambda: "workload:serving")
    add("SELECT rank, source_format FROM trace_info", lambda fmt: f"format:{fmt}")
    add("SELECT DISTINCT rank FROM kernels WHERE launch_kind = 'graph'", lambda: "cuda_graphs")
    add("""SELECT rank, bool_or(s.vendor = 'amd' OR d.architecture LIKE 'cdna%' OR d.architecture LIKE 'rdna%'),
                  bool_or(s.vendor = 'nvidia' OR d.architecture LIKE 'sm%')
           FROM devices d LEFT JOIN gpu_specs s USING (spec_id)
           WHERE (rank, device_id) IN (SELECT rank, device_id FROM kernels) GROUP BY rank""",
        lambda amd, nvidia: "vendor:amd" if amd else "vendor:nvidia" if nvidia else "vendor:unknown")
    add("""SELECT rank, sum(bytes) FILTER (WHERE host = 'Pinned') >= 0.99 * sum(bytes)
           FROM (SELECT rank, bytes, CASE copy_kind WHEN 'HtoD' THEN src_kind WHEN 'DtoH' THEN dst_kind END AS host
                 FROM memops WHERE kind = 'memcpy' AND bytes > 0)
           WHERE host IN ('Pinned', 'Pageable') GROUP BY rank""",
        lambda pinned: "copies:pinned" if pinned else "copies:not_pinned")
    return facts


def test_every_chosen_fix_rests_on_facts_the_trace_shows(case) -> None:
    """Each finding's fix variant: every fact it names holds on the finding's rank (recomputed here from the
    trace), every fact it excludes does not, and the basis names exactly those facts."""
    trace, document = case
    facts = _facts_from_the_trace(trace)
    rules = {rule.id: rule for rule in load_rules()}
    checkable = ("workload:", "format:", "cuda_graphs", "vendor:", "copies:pinned")
    for finding in document["findings"]:
        rank = finding["evidence"].get("rank")
        known = facts.get(rank, set()) if rank is not None else set().union(*facts.values()) if facts else set()
        variant = next(v for v in rules[finding["rule"]].fixes if v.summary == finding["fix_summary"]
                       and v.text == finding["fix"])
        for fact in variant.when:
            name = fact.lstrip("!")
            if name.startswith(checkable):
                assert (name in known) != fact.startswith("!"), (finding["rule"], fact, sorted(known))
        assert [b["fact"] for b in finding["fix_basis"]] == [f for f in variant.when if not f.startswith("!")]
        assert "…" not in finding["fix_summary"] and not finding["fix_summary"].endswith(".")


def test_a_start_up_capture_says_so_first_and_prices_nothing(case) -> None:
    """No rank with a steady step and some step initialisation: the verdict opens with start-up and no finding
    has a saving; one-time work outside the steps that outlasts them and fills a quarter of the span: the verdict
    opens with 'mostly start-up';
    any other capture's verdict calls itself neither."""
    trace, document = case
    states = trace.sql("SELECT state, count(*) FROM step_states GROUP BY state").rows()
    counts = dict(states)
    startup = not counts.get("steady") and bool(counts.get("init"))
    assert document["verdict"][0].startswith("Start-up") == startup, (counts, document["verdict"][0])
    outside = trace.sql("SELECT count(*) FROM steady_state s JOIN trace_info t USING (rank) "
                        "WHERE s.outside_init_ns >= s.step_wall_ns AND s.step_wall_ns > 0 "
                        "AND 4 * s.outside_init_ns >= t.end_ns - t.start_ns").rows()[0][0]
    assert document["verdict"][0].startswith("Mostly start-up") == (not startup and outside > 0)
    if startup:
        assert all(f["estimated_saving_ns"] == 0 for f in document["findings"]), [
            (f["rule"], f["estimated_saving_ns"]) for f in document["findings"]]
