"""One finding per rule and cause across the ranks of a job, not one per rank.

A rule reports each rank on its own (its `key` is 'rank 3 ...'), so a job of 8 ranks that shares one problem
would list it 8 times. Across ranks those findings become one: the worst rank's message and evidence, the
ranks it fired on, and a `per_rank` list with each rank's saving, message and scalar evidence.

The saving is the largest rank's, not the sum: the ranks run side by side and meet in collectives, so the
job's wall time is bounded by its slowest rank and fixing a cause on every rank shortens the job by at most
the largest saving any one rank shows. The ranks' claims are all kept (each was granted from its own rank's
ledger), and the fingerprint hashes the rule with the rank-free key, so a baseline entry holds whichever
ranks fire in the next run.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traceview.rules.engine import Finding

# a rule's per-rank key: 'rank 3', 'rank 3 device 3', 'rank 0 decode', 'rank 1 device 1 bf16'
_RANK_KEY = re.compile(r"rank (\d+)((?: device \d+)?)(.*)", re.DOTALL)


def fingerprint(rule: str, key: str) -> str:
    """A finding's identity for baselines: its rule id and key, hashed (rank-free once merged)."""
    return hashlib.sha1(f"{rule}\0{key}".encode()).hexdigest()[:16]


def _rank_part(finding: Finding) -> tuple[str, str] | None:
    """(device part, rest) of a key led by the finding's own rank; None for a key that is not per rank
    (TV402's 'straggler rank 7' names the rank the others wait for, one finding for the whole job)."""
    match = _RANK_KEY.fullmatch(finding.key)
    rank = finding.evidence.get("rank")
    if match is None or rank is None or int(match.group(1)) != rank:
        return None
    return match.group(2), match.group(3)


def _per_rank_row(finding: Finding) -> dict[str, Any]:
    scalars = {k: v for k, v in finding.evidence.items() if not isinstance(v, (list, dict)) and k != "rank"}
    return {"rank": finding.evidence["rank"], "saving_ns": finding.estimated_saving_ns,
            "share_pct": finding.share_pct, "message": finding.message, **scalars}


def _merged(group: list[Finding], key: str, ranks: int) -> Finding:
    ordered = sorted(group, key=lambda f: (-f.estimated_saving_ns, f.evidence["rank"]))
    worst = ordered[0]
    rank = worst.evidence["rank"]
    if len(group) == 1:
        where = f"on 1 of {ranks} ranks: rank {rank}"
    else:
        where = f"on {len(group)} of {ranks} ranks; {'worst' if worst.estimated_saving_ns else 'shown'}: rank {rank}"
    by_rank = sorted(group, key=lambda f: f.evidence["rank"])
    return replace(worst, message=f"{worst.message} ({where})", key=key, fingerprint=fingerprint(worst.rule, key),
                   evidence={**worst.evidence, "per_rank": [_per_rank_row(f) for f in ordered]},
                   claims=tuple(c for f in by_rank for c in f.claims))


def merge_ranks(findings: list[Finding], ranks: int) -> list[Finding]:
    """Findings of one rule whose keys differ only by rank (and by the rank's device, 'rank 3 device 3') as one
    finding each, in a trace of `ranks` ranks; a single-rank trace's findings are returned as they are.

    Where one rank has several findings of a group (a process driving two GPUs), the device stays in the key
    and each device's findings merge across ranks on their own."""
    if ranks < 2:
        return findings
    groups: dict[tuple[str, str], list[Finding]] = {}
    for finding in findings:
        part = _rank_part(finding)
        if part is not None:
            groups.setdefault((finding.rule, part[1]), []).append(finding)
    merged: dict[int, Finding] = {}  # by the id of the group's first finding, which it replaces
    dropped: set[int] = set()
    for (_, rest), group in groups.items():
        if len({f.evidence["rank"] for f in group}) == len(group):
            parts = {"": group}
        else:
            parts = {}
            for finding in group:
                parts.setdefault(_rank_part(finding)[0], []).append(finding)
        for device, members in parts.items():
            merged[id(members[0])] = _merged(members, f"ranks{device}{rest}", ranks)
            dropped.update(id(f) for f in members[1:])
    return [merged.get(id(f), f) for f in findings if id(f) not in dropped]
