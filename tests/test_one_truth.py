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
    walls = document["verdict"][1].lower()
    for phase in document["phases"]:
        ranks = per_rank.get(phase["phase"], [])
        if ranks and None not in ranks and len(set(ranks)) == 1 and phase["bound"] is not None:
            assert phase["bound"] == ranks[0], phase["phase"]
        if phase["bound_source"] == "measured":
            assert phase["bound"] == pooled[phase["phase"]], phase["phase"]
        if phase["bound"] and phase["time_ns"] and phase["phase"] != "empty":
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
