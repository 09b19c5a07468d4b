"""One finding per rule across the ranks of a job (rules/merge.py), checked against each rank's file checked alone.

Two generated Kineto ranks of one serving job, files of one name pattern (`worker0...`, `worker1...`), of different
sizes so every rule prices them differently. A rank's file read alone is a one-rank trace, which the merge leaves
as it is: its findings are the truth each merged finding's `per_rank` rows must equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

import traceview
from traceview.rules import RuleConfig, check, load_rules
from traceview.rules.engine import Claim, Finding
from traceview.rules.merge import merge_ranks
from traceview.testing import llm_serving_spec, write_kineto

RULES = load_rules()
RANK_SPECS = {0: (0, (4, 4)), 1: (3, (8,))}  # rank: (seed, prefill batches)


def _write_job(directory: Path, ranks: dict[int, tuple[int, tuple[int, ...]]]) -> Path:
    directory.mkdir()
    for rank, (seed, batches) in ranks.items():
        spec = dataclasses.replace(llm_serving_spec(seed=seed, prefill_batches=batches), rank=rank, world_size=2)
        write_kineto(spec, directory / f"worker{rank}.1700000000{rank}.pt.trace.json.gz")
    return directory


def _findings(path: Path) -> list[Finding]:
    with traceview.load(path) as trace:
        return list(check(trace.analyze().con, RULES, RuleConfig()).findings)


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> tuple[Path, list[Finding], dict[tuple[str, str], dict[int, Finding]]]:
    """The job's findings and, by (rule, key less its rank), each rank's finding when its file is checked alone."""
    directory = _write_job(tmp_path_factory.mktemp("job") / "job", RANK_SPECS)
    alone: dict[tuple[str, str], dict[int, Finding]] = {}
    for rank in RANK_SPECS:
        (path,) = directory.glob(f"worker{rank}.*")
        for finding in _findings(path):
            match = re.fullmatch(rf"rank {rank}(?: device \d+)?(.*)", finding.key, re.DOTALL)
            assert match, finding.key  # every rule of this run reports per rank
            alone.setdefault((finding.rule, match.group(1)), {})[rank] = finding
    return directory, _findings(directory), alone


def test_a_rule_on_two_ranks_is_one_finding_with_the_largest_saving(job) -> None:
    _, findings, alone = job
    both = {group: by_rank for group, by_rank in alone.items() if len(by_rank) == 2}
    assert both, "no rule fired on both ranks"
    assert len(findings) == len(alone)  # 14 findings of 7 rules x 2 ranks would be 7
    for (rule, rest), by_rank in alone.items():
        (merged,) = [f for f in findings if f.rule == rule and f.key == f"ranks{rest}"]
        rows = merged.evidence["per_rank"]
        assert [(r["rank"], r["saving_ns"], r["message"]) for r in rows] == sorted(
            ((rank, f.estimated_saving_ns, f.message) for rank, f in by_rank.items()), key=lambda r: (-r[1], r[0]))
        worst = by_rank[rows[0]["rank"]]
        assert merged.estimated_saving_ns == max(f.estimated_saving_ns for f in by_rank.values())
        assert merged.share_pct == worst.share_pct
        assert {k: v for k, v in merged.evidence.items() if k != "per_rank"} == worst.evidence
        if len(by_rank) == 2:
            word = "worst" if worst.estimated_saving_ns else "shown"
            assert merged.message == f"{worst.message} (on 2 of 2 ranks; {word}: rank {rows[0]['rank']})"
        else:
            assert merged.message == f"{worst.message} (on 1 of 2 ranks: rank {rows[0]['rank']})"
        # every rank's claims stay, as each rank's ledger granted them
        assert sorted(merged.claims, key=repr) == sorted((c for f in by_rank.values() for c in f.claims), key=repr)
        assert merged.fingerprint == hashlib.sha1(f"{rule}\0ranks{rest}".encode()).hexdigest()[:16]


def test_the_fingerprint_does_not_name_a_rank(job, tmp_path: Path) -> None:
    """The same two runs as ranks 1 and 0 (swapped): every finding keeps its fingerprint, so a baseline made on one
    run holds on the other whichever rank is the worse."""
    _, findings, _ = job
    swapped = _write_job(tmp_path / "swapped", {1: RANK_SPECS[0], 0: RANK_SPECS[1]})
    assert {f.fingerprint: f.estimated_saving_ns for f in _findings(swapped)} == {
        f.fingerprint: f.estimated_saving_ns for f in findings}


def test_a_single_rank_trace_is_left_as_it_is(job) -> None:
    directory, _, alone = job
    (path,) = directory.glob("worker0.*")
    findings = _findings(path)
    assert findings and all("per_rank" not in f.evidence and f.key.startswith("rank 0") for f in findings)
    assert merge_ranks(findings, 1) == findings
    assert len(findings) == sum(0 in by_rank for by_rank in alone.values())


def _finding(key: str, rank: int | None, saving: int) -> Finding:
    return Finding(rule="TV999", name="example", severity="warning", title="t", message=f"{key} costs {saving}",
                   estimated_saving_ns=saving, share_pct=None, evidence={"rank": rank, "rows": [{"x": 1}]}, key=key,
                   fingerprint=key, claims=(Claim(rank or 0, 0, "idle_bubble_ns", saving),))


def test_a_rank_with_two_devices_merges_each_device_across_ranks() -> None:
    """'rank 0 device 0' and 'rank 1 device 1' are one rank's GPU each: one finding. A process driving two GPUs
    keeps its devices apart, each merged with the same device on the other rank."""
    one_gpu_each = merge_ranks([_finding("rank 0 device 0", 0, 5), _finding("rank 1 device 1", 1, 7)], 2)
    assert [(f.key, [r["rank"] for r in f.evidence["per_rank"]], f.estimated_saving_ns) for f in one_gpu_each] == [
        ("ranks", [1, 0], 7)]
    two_gpus = merge_ranks([_finding(f"rank {r} device {d}", r, 10 * r + d) for r in (0, 1) for d in (0, 1)], 2)
    assert sorted((f.key, f.estimated_saving_ns) for f in two_gpus) == [("ranks device 0", 10), ("ranks device 1", 11)]


def test_a_key_that_names_another_rank_is_not_merged() -> None:
    """TV402's 'straggler rank 7' is one finding for the whole job about rank 7; a key whose rank is not the
    finding's own is no per-rank key either."""
    findings = [_finding("straggler rank 7", None, 9), _finding("rank 1", 0, 3)]
    assert merge_ranks(findings, 8) == findings
