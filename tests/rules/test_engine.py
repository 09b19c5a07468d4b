"""The rule engine: validation, configuration, team rules, baselines, ranking, exit codes."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import traceview
from commands import traceview_cli
from conftest import REPO, SHARED_TRACES, analysed, requires_shared
from traceview.errors import TraceviewError
from traceview.rules import RuleConfig, check, find_config, load_config, load_rule, load_rules, with_flags
from traceview.rules.engine import format_message, missing_requirements
from traceview.rules.loader import message_parts
from traceview.rules.loader import builtin_rules_dir
from traceview.testing import llm_serving_spec, write_kineto

OPT = SHARED_TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_opt_A100.sqlite"
TEAM_RULE = '''
id = "ACME001"
name = "too-many-kernels"
title = "More kernels than the team budget"
severity = "info"
since = "1.0"
requires = ["kernels"]
query = "SELECT rank, count(*) AS kernels, 0 AS estimated_saving_ns FROM kernels GROUP BY rank HAVING count(*) > $budget"
message = "{kernels} kernels (budget {budget})"
[params.budget]
default = 100
unit = "kernels"
help = "the most kernels a trace may launch"
[doc]
what = "Counts kernels."
why = "Budgets."
[[fix]]
when = ["workload:train", "!cuda_graphs"]
summary = "fuse the optimizer"
text = "Use fused=True."
[[fix]]
when = ["workload:serving", "cuda_graphs"]
summary = "capture larger graphs"
text = "Raise the capture sizes."
[[fix]]
when = ["workload:serving"]
summary = "replay decode from CUDA graphs"
text = "Drop --enforce-eager."
[[fix]]
when = []
summary = "fuse kernels"
text = "Fuse."
'''


@pytest.fixture(scope="module")
def serving(tmp_path_factory) -> traceview.Trace:
    path = write_kineto(llm_serving_spec(), tmp_path_factory.mktemp("s") / "s.json.gz")
    return traceview.load(path).analyze()


def test_team_rule_directory_is_picked_up(tmp_path: Path, serving: traceview.Trace) -> None:
    (tmp_path / "ACME001-too-many-kernels.toml").write_text(TEAM_RULE)
    rules = load_rules((tmp_path,))
    assert "ACME001" in {r.id for r in rules}
    result = check(serving.con, rules, RuleConfig(select=("ACME",)))
    assert [f.message for f in result.findings] == ["2480 kernels (budget 100)"]
    quiet = check(serving.con, rules, RuleConfig(select=("ACME",), params={"ACME001.budget": 5000}))
    assert not quiet.findings and quiet.rules_run == ("ACME001",)


def test_each_requirement_is_met_or_says_why(serving: traceview.Trace) -> None:
    """One query counts every table and column the rules need; each answer is the one a count of its own gives."""
    asked = ["kernels", "kernels.category", "collective_waits", "steps.prefill_context_tokens", "kernels.colour",
             "colours", "kernels"]
    assert missing_requirements(serving.con, asked) == {
        "kernels": None,
        "kernels.category": None,
        "collective_waits": "no rows in collective_waits",
        "steps.prefill_context_tokens": "no steps.prefill_context_tokens values in this trace",
        "kernels.colour": "kernels.colour is not computed for this trace",
        "colours": "table colours is not in the database",
    }
    assert serving.scalar("SELECT count(*) FROM collective_waits") == 0
    assert serving.scalar("SELECT count(prefill_context_tokens) FROM steps") == 0


def _doc_rules(doc: str) -> list[tuple[str, str]]:
    """Each TOML block of docs/DOC that is a rule (it has an `id`), with the file name the text before it gives
    (`<ID>-<name>.toml`), else ACME001.toml."""
    text = (REPO / "docs" / doc).read_text(encoding="utf-8")
    blocks = []
    for before, block in re.findall(r"([^\n]*)\n```toml\n(.*?)```", text, flags=re.S):
        if re.search(r"^id = ", block, flags=re.M):
            named = re.search(r"([A-Z]+[0-9]+-[a-z0-9-]+\.toml)", before)
            blocks.append((named.group(1) if named else "ACME001.toml", block))
    return blocks


def test_the_docs_rule_examples_load_and_run(tmp_path: Path, serving: traceview.Trace) -> None:
    """A reader copies these: each must load under the file name the doc gives it, and run."""
    examples = {doc: _doc_rules(doc) for doc in ("rule-format.md", "ci.md")}
    assert [len(found) for found in examples.values()] == [1, 1]
    for doc, ((file_name, block),) in examples.items():
        folder = tmp_path / doc
        folder.mkdir()
        (folder / file_name).write_text(block)
        rules = load_rules((folder,))
        result = check(serving.con, rules, RuleConfig(select=("ACME",)))
        assert result.rules_run == ("ACME001",), doc
        if doc == "rule-format.md":
            assert [f.message for f in result.findings] == ["2480 kernels (budget 100)"]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace('severity = "info"', 'severity = "fatal"'), "severity: 'fatal' is not one of"),
        (lambda t: t.split("[[fix]]")[0], "fix: missing"),
        (lambda t: t.replace('when = []', 'when = ["cuda_graphs"]'), r"fix\[3\].when: the last variant must hold everywhere"),
        (lambda t: t.replace('"!cuda_graphs"', '"Cuda Graphs"'), r"fix\[0\].when: 'Cuda Graphs' is not a fact"),
        (lambda t: t.replace('"fuse the optimizer"', '"fuse the optimizer."'), r"fix\[0\].summary: expected one clause"),
        (lambda t: t.replace('"fuse kernels"', '"' + "x" * 121 + '"'), r"fix\[3\].summary: expected one clause"),
        (lambda t: t.replace('["workload:serving"]', '["cuda_graphs", "workload:serving"]'), "two variants have the same"),
        (lambda t: t.replace('why = "Budgets."', 'why = "Budgets."\nfix = "Fuse."'), "doc.fix: moved to"),
        (lambda t: t.replace('id = "ACME001"', 'id = "acme"'), "id: 'acme' is not letters then digits"),
        (lambda t: 'colour = "red"\n' + t, "colour: unknown field"),
        (lambda t: t.replace('why = "Budgets."', 'why = "Budgets."\ncolour = "red"'), "doc.colour: unknown field"),
        (lambda t: t + 'colour = "red"\n', r"fix\[3\].colour: unknown field"),
        (lambda t: 'phases = ["decode"]\n' + t, "phases: no longer a rule field: filter on steps.phase"),
        (lambda t: t.replace('unit = "kernels"\n', ""), "params.budget.unit: missing"),
        (lambda t: t.replace('requires = ["kernels"]', 'requires = ["kernels.Name!"]'), "requires: 'kernels.Name!'"),
        (lambda t: t.replace('(budget {budget})"', '[(budget {budget})"'), r"message: bad template \('\[' without its '\]'\)"),
    ],
)
def test_bad_rule_names_file_and_field(tmp_path: Path, edit, message: str) -> None:
    path = tmp_path / "ACME001.toml"
    path.write_text(edit(TEAM_RULE))
    with pytest.raises(TraceviewError, match=message) as info:
        load_rule(path)
    assert str(path) in str(info.value)


def test_the_fix_is_the_first_variant_whose_facts_hold(tmp_path: Path, serving: traceview.Trace) -> None:
    """The generated serving trace replays decode from CUDA graphs: the serving+graphs variant is chosen (not the
    earlier training one, not the later serving one), and its basis carries trace_facts' evidence."""
    (tmp_path / "ACME001-too-many-kernels.toml").write_text(TEAM_RULE)
    facts = dict(serving.con.execute("SELECT fact, evidence FROM trace_facts WHERE rank = 0").fetchall())
    assert {"workload:serving", "cuda_graphs"} <= set(facts) and "workload:train" not in facts
    finding, = check(serving.con, load_rules((tmp_path,)), RuleConfig(select=("ACME",))).findings
    assert (finding.fix_summary, finding.fix) == ("capture larger graphs", "Raise the capture sizes.")
    assert finding.fix_basis == ({"fact": "workload:serving", "evidence": facts["workload:serving"]},
                                 {"fact": "cuda_graphs", "evidence": facts["cuda_graphs"]})
    rule = load_rule(tmp_path / "ACME001-too-many-kernels.toml")
    assert rule.fix_for(frozenset({"workload:train"})).summary == "fuse the optimizer"
    assert rule.fix_for(frozenset({"workload:train", "cuda_graphs"})).summary == "fuse kernels"
    assert rule.fix_for(frozenset()).summary == "fuse kernels"


def test_duplicate_rule_id_is_an_error(tmp_path: Path) -> None:
    shutil.copy(builtin_rules_dir() / "TV301-fp32-gemm-on-tensor-cores.toml", tmp_path / "copy.toml")
    with pytest.raises(TraceviewError, match="id TV301 is already used"):
        load_rules((tmp_path,))


def test_config_file_params_severity_and_unknown_parameter(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.traceview]\nselect = ["TV3"]\nfail-on = "warning"\n'
        '[tool.traceview.params]\n"TV301.min_share_pct" = 5\n[tool.traceview.severity]\nTV301 = "error"\n'
    )
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    config = load_config(find_config(nested))
    rules = load_rules()
    config.validate(rules)
    tv301 = next(r for r in rules if r.id == "TV301")
    assert config.params_for(tv301) == {"min_share_pct": 5}
    assert (config.severity_for(tv301), config.fail_on, config.selects(tv301)) == ("error", "warning", True)
    flagged = with_flags(config, params=("TV301.min_share_pct=7.5",), fail_on="error")
    assert flagged.params_for(tv301) == {"min_share_pct": 7.5} and flagged.fail_on == "error"
    with pytest.raises(TraceviewError, match="TV301 has no parameter 'min_share'"):
        with_flags(config, params=("TV301.min_share=1",)).validate(rules)


def test_skipped_rules_say_why(serving: traceview.Trace) -> None:
    empty = traceview.load(write_kineto(llm_serving_spec().__class__(gpus=llm_serving_spec().gpus, kernels=()),
                                        Path(serving.source).with_name("empty.json.gz"))).analyze()
    result = check(empty.con, load_rules(), RuleConfig())
    reasons = {s.rule: s.reason for s in result.skipped}
    assert "no kernels.category values" in reasons["TV301"]
    assert [f.rule for f in result.findings] == ["TV101"]


@requires_shared
def test_the_capture_notes_of_a_trace_without_kernels_are_listed_in_one_order() -> None:
    """TV101 quotes the capture's distinct warnings; their order was the hash table's, which changed with
    DuckDB's thread count, so the finding's text differed from run to run. Now sorted."""
    trace = analysed(SHARED_TRACES / "nsys" / "lighttransport__gemm__profile.sqlite")
    [finding] = [f for f in check(trace.con, load_rules(), RuleConfig()).findings if f.rule == "TV101"]
    notes = finding.evidence["diagnostics"].split(" | ")
    assert len(notes) == 5 and notes == sorted(notes)
    assert notes[0] == "Installed CUDA driver version (13.3) is not supported by this build of Nsight Systems. " \
                       "CUDA trace will be collected using libraries for driver version 12.9"


@requires_shared
def test_check_exit_codes_json_and_baseline(tmp_path: Path) -> None:
    result = traceview_cli("check", OPT, "--format", "json", "--fail-on", "warning")
    assert result.returncode == 1, result.stderr
    out = json.loads(result.stdout)
    savings = [f["estimated_saving_ns"] for f in out["findings"]]
    assert savings == sorted(savings, reverse=True)
    assert out["findings"][0]["rule"] == "TV301"
    assert {"rule", "severity", "title", "message", "estimated_saving_ns", "evidence"} <= out["findings"][0].keys()
    assert traceview_cli("check", OPT, "--select", "TV301").returncode == 0

    baseline = tmp_path / "baseline.json"
    wrote = traceview_cli("check", OPT, "--write-baseline", baseline)
    assert wrote.returncode == 0 and baseline.exists()
    suppressed = traceview_cli("check", OPT, "--baseline", baseline, "--fail-on", "info", "--format", "json")
    assert suppressed.returncode == 0, suppressed.stdout
    assert json.loads(suppressed.stdout)["suppressed_by_baseline"] == len(out["findings"])


def test_check_usage_errors(tmp_path: Path) -> None:
    trace = write_kineto(llm_serving_spec(), tmp_path / "s.json.gz")
    for args, fragment in (
        (("--param", "TV301=3"), "expected RULE.PARAM=VALUE"),
        (("--param", "TV999.x=3"), "no rule TV999"),
        (("--baseline", tmp_path / "none.json"), "baseline file does not exist"),
        (("--rules-dir", tmp_path / "nope"), "rules directory does not exist"),
    ):
        result = traceview_cli("check", trace, *args)
        assert result.returncode == 2 and fragment in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_rules_list_and_explain() -> None:
    listed = json.loads(traceview_cli("rules", "--format", "json").stdout)
    assert {"TV101", "TV301"} <= {r["id"] for r in listed}
    text = traceview_cli("rules", "explain", "TV301").stdout
    assert "Why it matters:" in text and "How to fix (" in text and "min_share_pct" in text
    missing = traceview_cli("rules", "explain", "TV999")
    assert missing.returncode == 2 and "no rule 'TV999'" in missing.stderr


@pytest.mark.parametrize(
    ("template", "values", "message"),
    [
        ("{n:count:gap} longer than 1 ms", {"n": 1}, "1 gap longer than 1 ms"),
        ("{n:count:gap} longer than 1 ms", {"n": 19}, "19 gaps longer than 1 ms"),
        ("{n:count:gap} longer than 1 ms", {"n": 0}, "no gaps longer than 1 ms"),
        ("{n:count:copy/copies}", {"n": 2}, "2 copies"),
        ("{a} memcpy[, {b} memset]", {"a": 3, "b": 0}, "3 memcpy"),
        ("{a} memcpy[, {b} memset]", {"a": 3, "b": 2}, "3 memcpy, 2 memset"),
        ("host {t:.2f} ms[ ({p:.1f}% of step time)]", {"t": 1.48, "p": 0.011}, "host 1.48 ms"),  # reads as 0.0
        ("host {t:.2f} ms[ ({p:.1f}% of step time)]", {"t": 1.48, "p": 0.06}, "host 1.48 ms (0.1% of step time)"),
        ("x[; skew {s:.2f} ms in step {k}]", {"s": 0.32, "k": 0}, "x; skew 0.32 ms in step 0"),  # only the first field
        ("x[; skew {s:.2f} ms in step {k}]", {"s": None, "k": None}, "x"),
        ("x[; {why}]", {"why": ""}, "x"),
        ("{t:.1f} ms", {"t": None}, "n/a ms"),
        ("[[{r}]] {{literal}}", {"r": "[[param]]"}, "[[[param]]] {literal}"),  # values are never parsed
    ],
)
def test_messages_drop_parts_that_would_state_a_zero(template: str, values: dict, message: str) -> None:
    assert format_message(template, values) == message


@pytest.mark.parametrize("template", ["a [b", "a ]b", "[a [b] c]"])
def test_an_unbalanced_optional_part_is_an_error(template: str) -> None:
    with pytest.raises(ValueError):
        message_parts(template)


def test_every_shipped_message_template_parses() -> None:
    for rule in load_rules():
        assert message_parts(rule.message), rule.id


def _saving_rule(saving_ns: int) -> str:
    return f'''
id = "ACME{saving_ns // 1000:03d}"
name = "fixed-saving"
title = "A finding with a fixed saving"
severity = "warning"
since = "1.0"
requires = ["kernels"]
query = "SELECT 0 AS rank, {saving_ns} AS estimated_saving_ns"
message = "saves {saving_ns} ns"
[doc]
what = "A fixed saving."
why = "To rank against."
[[fix]]
when = []
summary = "nothing"
text = "Nothing."
'''


def test_an_uncosted_dominant_family_ranks_by_the_time_at_stake(tmp_path: Path) -> None:
    """flash_fwd holds 50% of the GPU time with no FLOP/byte costs (fixtures_kernels): TV305 states no saving but
    700 us at stake, ranked as 70 us (a tenth of it): above a finding that saves 60 us, below one that saves 80 us."""
    import fixtures_kernels

    trace = traceview.load(write_kineto(fixtures_kernels.kernels_training_flash_uncosted(),
                                        tmp_path / "flash.json.gz")).analyze()
    for saving in (60_000, 80_000):
        (tmp_path / f"ACME{saving // 1000:03d}-fixed-saving.toml").write_text(_saving_rule(saving))
    rules = load_rules((tmp_path,))
    result = check(trace.con, rules, RuleConfig(select=("TV305", "ACME")))
    assert [(f.rule, f.estimated_saving_ns, f.at_stake_ns) for f in result.findings] == [
        ("ACME080", 80_000, 0), ("TV305", 0, 700_000), ("ACME060", 60_000, 0)]
    assert result.findings[1].to_dict()["at_stake_ns"] == 700_000
