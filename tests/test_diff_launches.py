"""`traceview diff` compares kernel families per launch (issue 32): a family is slower or faster only when its
launch time moved beyond noise; fewer launches in the same window is a count change, never a speed-up; and the
total delta splits exactly into a count effect and a per-launch effect."""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from traceview import api, workflow
from traceview.diff import build_diff
from traceview.report import diff_html, diff_markdown
from traceview.report.json_report import render as render_json
from traceview.testing import llm_serving_spec, write_kineto

SLOWER = "fused_add_rms_norm_kernel"  # 416 launches of one shape (a family: the short name the analysis gives)
FEWER = "nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT"  # 192 decode launches
DIFF_SCHEMA = json.loads(resources.files("traceview.report").joinpath("diff_schema.json").read_text())


def _family(kernel) -> str:
    return kernel.short_name or kernel.name


def _report(spec, path: Path) -> dict:
    with api.load(write_kineto(spec, path)) as loaded:
        return json.loads(render_json(workflow.report(loaded, workflow.CheckOptions.configured())))


def _dropped(spec, keep) -> object:
    """The spec without the launches `keep(family, i)` rejects (i: the launch's ordinal in its family)."""
    seen: Counter[str] = Counter()
    kernels = []
    for k in spec.kernels:
        i = seen[_family(k)]
        seen[_family(k)] += 1
        if keep(_family(k), i):
            kernels.append(k)
    return replace(spec, kernels=tuple(kernels))


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """A generated run and three heads: one family 8% slower per launch (same launches); one family with every
    tenth launch dropped (same launch times); every family with 12% of its launches dropped (3 in 25)."""
    directory = tmp_path_factory.mktemp("diff_launches")
    base = llm_serving_spec()
    slower = replace(base, kernels=tuple(replace(k, dur_ns=round(k.dur_ns * 1.08))
                                         if f"::{SLOWER}<" in k.name else k for k in base.kernels))
    fewer = _dropped(base, lambda family, i: family != FEWER or i % 10 != 0)
    everywhere = _dropped(base, lambda family, i: i % 25 not in (0, 8, 16))
    return {name: _report(spec, directory / f"{name}.json.gz")
            for name, spec in (("base", base), ("slower", slower), ("fewer", fewer), ("everywhere", everywhere))}


def _diff(reports: dict[str, dict], head: str) -> dict:
    diff = build_diff([reports["base"]], [reports[head]])
    jsonschema.validate(diff, DIFF_SCHEMA)
    return diff


def _row(diff: dict, kernel: str) -> dict:
    return next(k for k in diff["kernels"] if k["kernel"] == kernel)


def test_report_carries_launch_quantiles_and_a_bounded_sample(reports: dict[str, dict]) -> None:
    """Every launch up to 256 a family, else 256 evenly spaced quantiles: sorted, bounded, and centred where the
    family's median is."""
    for family in reports["base"]["kernel_families"]:
        sample = family["launch_sample_ns"]
        assert len(sample) == min(family["count"], 256) and sample == sorted(sample)
        assert family["median_ns"] <= family["p90_ns"]
    big = max(reports["base"]["kernel_families"], key=lambda f: f["count"])
    assert big["count"] > 256 and len(big["launch_sample_ns"]) == 256
    middle = big["launch_sample_ns"][127:129]
    assert middle[0] <= big["median_ns"] <= middle[1]


def test_a_family_eight_percent_slower_per_launch_is_slower_with_an_interval_excluding_zero(reports: dict[str, dict]) -> None:
    diff = _diff(reports, "slower")
    row = _row(diff, SLOWER)
    low, high = row["median_interval_pct"]
    assert row["status"] == "slower" and row["basis"] == "per_launch"
    assert row["median_change_pct"] == pytest.approx(8.0, abs=0.3) and 0 < low < 8.0 < high
    assert row["base_count"] == row["head_count"] and row["count_change_pct"] == 0.0 and row["count_effect_ns"] == 0
    assert row["per_launch_effect_ns"] == row["delta_ns"] > 0
    assert [k["kernel"] for k in diff["kernels"]] == [SLOWER]
    assert "1 slower per launch" in " ".join(line["text"] for line in diff["conclusion"]["lines"])


def test_ten_percent_fewer_launches_is_a_count_change_not_slower_or_faster(reports: dict[str, dict]) -> None:
    diff = _diff(reports, "fewer")
    row = _row(diff, FEWER)
    assert row["status"] == "count"
    assert (row["base_count"], row["head_count"]) == (192, 172) and row["count_change_pct"] == pytest.approx(-10.4, abs=0.1)
    assert abs(row["median_change_pct"]) < 5.0
    assert row["count_effect_ns"] == pytest.approx(-20 * row["base_time_ns"] / 192, abs=1)
    assert not [k for k in diff["kernels"] if k["status"] in ("slower", "faster")]


def test_twelve_percent_fewer_launches_everywhere_makes_no_family_faster(reports: dict[str, dict]) -> None:
    diff = _diff(reports, "everywhere")
    statuses = Counter(k["status"] for k in diff["kernels"])
    assert statuses["faster"] == 0 and statuses["slower"] == 0
    assert statuses["count"] == len(diff["kernels"]) > 10  # each family's total time fell ~12%: all count
    # 3 launches in every 25 dropped: 12% of a large family, up to 4 of 26 (15%) of a small one
    assert all(-16.0 < k["count_change_pct"] <= -11.5 for k in diff["kernels"])
    text = " ".join(line["text"] for line in diff["conclusion"]["lines"])
    assert f"{len(diff['kernels'])} launch count only" in text and "faster per launch" not in text


def test_the_total_delta_is_the_count_effect_plus_the_per_launch_effect(reports: dict[str, dict]) -> None:
    for head in ("slower", "fewer", "everywhere"):
        for k in _diff(reports, head)["kernels"]:
            assert k["count_effect_ns"] + k["per_launch_effect_ns"] == k["delta_ns"] == k["head_time_ns"] - k["base_time_ns"]
            # (hc - bc) · base mean launch time, rounded to the ns
            assert k["count_effect_ns"] == round((k["head_count"] - k["base_count"]) * k["base_time_ns"] / k["base_count"])


def test_a_report_saved_without_launch_samples_is_compared_by_total_time(reports: dict[str, dict]) -> None:
    """An old report (no median_ns, p90_ns, launch_sample_ns) is read: its families fall back to total time, and
    the conclusion says so, since total time cannot tell fewer launches from faster ones."""
    old = copy.deepcopy(reports["base"])
    for family in old["kernel_families"]:
        for field in ("median_ns", "p90_ns", "launch_sample_ns"):
            family.pop(field)
    diff = build_diff([old], [reports["everywhere"]])
    jsonschema.validate(diff, DIFF_SCHEMA)
    assert diff["kernels"] and all(k["basis"] == "total_time" and k["median_change_pct"] is None for k in diff["kernels"])
    assert {k["status"] for k in diff["kernels"]} == {"faster"}  # the old comparison's verdict, labelled as such
    text = " ".join(line["text"] for line in diff["conclusion"]["lines"])
    assert "compared by total time only" in text
    assert "total time only" in diff_markdown.render(diff) and "total time only" in diff_html.render(diff)


def test_renderers_show_per_launch_change_launches_and_the_split(reports: dict[str, dict]) -> None:
    diff = _diff(reports, "fewer")
    row = _row(diff, FEWER)
    markdown = diff_markdown.render(diff)
    line = next(line for line in markdown.splitlines() if line.startswith("| nvjet\\_tst\\_64x8"))
    assert "| count |" in line and "192 → 172 (-10.4%)" in line and " + " in line
    page = diff_html.render(diff)
    assert '<span class="badge count">count</span>' in page and "192 → 172 (-10.4%)" in page
    slower = _diff(reports, "slower")
    low, high = _row(slower, SLOWER)["median_interval_pct"]
    assert f"[+{low:.1f}%, +{high:.1f}%]" in diff_markdown.render(slower)
    assert row["median_interval_pct"] is not None
