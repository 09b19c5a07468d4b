"""What a change in step time is made of: parts that add up to it.

Medians do not add, means do: the attribution splits the change in the *mean* step time of a phase
(a side's mean is the mean over its runs of each run's mean, so every run weighs the same, as in the
bootstrap). Each run's priced steps carry their owned wall time cut into parts (report
`phase_time_split`): kernel time by category and by family (the step budget's compute and exposed
communication apportioned by kernel time), copies with no kernel beside them, GPU idle inside the
step by kind, and time outside GPU work. The parts of each side sum to its mean step, so their
changes sum to the change.
"""

from __future__ import annotations

from typing import Any

from traceview import units
from traceview.analysis.budget import IDLE_KINDS

MAX_FAMILIES = 8  # families named in the attribution; the rest are one "other families" part


def _split(report: dict[str, Any], phase: str) -> dict[str, Any] | None:
    return next((row for row in report.get("phase_time_split") or [] if row["phase"] == phase), None)


def _per_step(report: dict[str, Any], phase: str) -> dict[str, Any] | None:
    """One run's mean step in parts (None when the run has no priced step of the phase)."""
    row = _split(report, phase)
    if not row or not row["steps"]:
        return None
    n = row["steps"]
    parts = {"copies": row["copy_ns"] / n, "outside_gpu": row["outside_gpu_ns"] / n,
             "idle": row["idle_ns"] / n, "kernels": row["kernel_ns"] / n}
    return {
        "wall": row["wall_ns"] / n, "parts": parts,
        "idle_kinds": {kind: row[f"idle_{kind}_ns"] / n for kind in IDLE_KINDS},
        "categories": {c["category"]: c["ns"] / n for c in row["categories"]}
                      | ({"unattributed": row["unattributed_kernel_ns"] / n} if row["unattributed_kernel_ns"] else {}),
        "families": {(f["short_name"], f["category"]): f["ns"] / n for f in row["families"]},
    }


def _mean(runs: list[dict[str, Any]], key: str) -> dict:
    keys = set().union(*(run[key].keys() for run in runs))
    return {k: sum(run[key].get(k, 0.0) for run in runs) / len(runs) for k in keys}


def _side(reports: list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    runs = [r for r in (_per_step(report, phase) for report in reports) if r is not None]
    if not runs:
        return None
    return {"wall": sum(r["wall"] for r in runs) / len(runs), "parts": _mean(runs, "parts"),
            "idle_kinds": _mean(runs, "idle_kinds"), "categories": _mean(runs, "categories"),
            "families": _mean(runs, "families")}


def _rows(base: dict, head: dict, names) -> list[dict[str, Any]]:
    return [{"name": name, "base_ns": base.get(name, 0.0), "head_ns": head.get(name, 0.0),
             "delta_ns": head.get(name, 0.0) - base.get(name, 0.0)} for name in names]


def attribute(base_reports: list[dict[str, Any]], head_reports: list[dict[str, Any]], phase: str) -> dict[str, Any] | None:
    """The phase's mean-step change in parts; None when a side has no split (a report older than it)."""
    base, head = _side(base_reports, phase), _side(head_reports, phase)
    if base is None or head is None:
        return None
    parts = _rows(base["parts"], head["parts"], ("kernels", "idle", "copies", "outside_gpu"))
    categories = sorted(_rows(base["categories"], head["categories"], base["categories"].keys() | head["categories"].keys()),
                        key=lambda r: (-abs(r["delta_ns"]), r["name"] or ""))
    families = sorted(_rows(base["families"], head["families"], base["families"].keys() | head["families"].keys()),
                      key=lambda r: (-abs(r["delta_ns"]), r["name"][0] or "", r["name"][1] or ""))
    named = [{**row, "name": row["name"][0], "category": row["name"][1]} for row in families[:MAX_FAMILIES]]
    if len(families) > MAX_FAMILIES:
        rest = families[MAX_FAMILIES:]
        named.append({"name": f"{len(rest)} other families", "category": None,
                      **{k: sum(r[k] for r in rest) for k in ("base_ns", "head_ns", "delta_ns")}})
    return {
        "base_mean_step_ns": base["wall"], "head_mean_step_ns": head["wall"],
        "delta_ns": head["wall"] - base["wall"],
        "parts": parts, "categories": categories, "families": named,
        "idle_kinds": [r for r in _rows(base["idle_kinds"], head["idle_kinds"], IDLE_KINDS) if r["base_ns"] or r["head_ns"]],
    }


def _moved(row: dict[str, Any], what: str) -> str:
    if not row["base_ns"]:
        return f"{what} {units.signed_duration(row['delta_ns'])} a step"
    return f"{what} {units.signed_percent(100.0 * row['delta_ns'] / row['base_ns'])} ({units.signed_duration(row['delta_ns'])} a step)"


def headline(phase: str, attribution: dict[str, Any] | None, verdict: str, change_pct: float | None) -> str:
    """One sentence that says what moved, e.g. 'decode: kernels -10.0% but idle +40.0%, so steps are unchanged'."""
    outcome = {"regression": f"steps are {units.signed_percent(change_pct)} slower",
               "improvement": f"steps are {units.signed_percent(change_pct)} faster",
               "neutral": "steps are unchanged",
               "inconclusive": f"steps {units.signed_percent(change_pct)}, not decided"}[verdict]
    if attribution is None:
        return f"{phase}: {outcome} (the reports carry no time split; regenerate them to see what moved)."
    parts = {row["name"]: row for row in attribution["parts"]}
    if not any(row["delta_ns"] for row in parts.values()):
        return f"{phase}: every part of the mean step is unchanged, so {outcome}."
    total = abs(attribution["delta_ns"]) or 1.0
    names = {"kernels": "kernels", "idle": "GPU idle", "copies": "copies", "outside_gpu": "time outside GPU work"}
    # parts that moved a tenth of the change or more, largest first
    moving = sorted((row for row in parts.values() if abs(row["delta_ns"]) >= 0.1 * total and row["delta_ns"]),
                    key=lambda r: -abs(r["delta_ns"]))
    if not moving:
        return f"{phase}: nothing moved by a tenth of the mean step's change, so {outcome}."
    phrases = []
    for row in moving:
        phrase = _moved(row, names[row["name"]])
        if row["name"] == "kernels" and attribution["categories"]:
            top = attribution["categories"][0]
            if top["delta_ns"] and (top["delta_ns"] > 0) == (row["delta_ns"] > 0):
                phrase += f", most in {top['name']} ({units.signed_duration(top['delta_ns'])})"
        phrases.append(phrase)
    signs = {row["delta_ns"] > 0 for row in moving}
    joined = phrases[0] if len(phrases) == 1 else (", ".join(phrases[:-1]) + (" but " if len(signs) > 1 else " and ") + phrases[-1])
    return f"{phase}: {joined}, so {outcome}."


OUTSIDE_PHASE = "outside_phase"  # the window's time not in the counted phase's priced steps (other phases, edges)


def _rank_time(report: dict[str, Any]) -> int | None:
    """The capture's time summed over its ranks (they run side by side): what a run's parts per unit of work tile."""
    spans = [r.get("span_ns") for r in (report.get("trace") or {}).get("rank_spans") or []]
    if spans and all(spans):
        return sum(spans)
    return (report.get("trace") or {}).get("span_ns")


def _per_unit_run(report: dict[str, Any], phase: str, count: float) -> dict[str, Any] | None:
    row = _split(report, phase)
    total = _rank_time(report)
    if not row or not count or not total:
        return None
    per = _per_step({**report, "phase_time_split": [{**row, "steps": count}]}, phase)
    per["parts"][OUTSIDE_PHASE] = (total - row["wall_ns"]) / count
    per["wall"] = total / count
    return per


def per_unit(base_reports: list[dict[str, Any]], head_reports: list[dict[str, Any]], phase: str,
             base_counts: list[float], head_counts: list[float], unit: str) -> dict[str, Any] | None:
    """Window-bounded captures (throughput.py): each run's capture time (summed over its ranks) per unit of work
    (`unit`: a token or a step of `phase`), in parts that tile it: the counted phase's priced steps' kernels, GPU idle,
    copies and outside-GPU time, and the time outside those steps (`outside_phase`), each over the run's count. A
    side's value is the mean over its runs, so the parts' changes add up to the change in time per unit of work
    exactly. None when a run has no time split for the phase."""
    sides = []
    for reports, counts in ((base_reports, base_counts), (head_reports, head_counts)):
        runs = [_per_unit_run(r, phase, c) for r, c in zip(reports, counts)]
        if not runs or any(r is None for r in runs):
            return None
        sides.append({"wall": sum(r["wall"] for r in runs) / len(runs), "parts": _mean(runs, "parts"),
                      "idle_kinds": _mean(runs, "idle_kinds"), "categories": _mean(runs, "categories"),
                      "families": _mean(runs, "families")})
    base, head = sides
    parts = _rows(base["parts"], head["parts"], ("kernels", "idle", "copies", "outside_gpu", OUTSIDE_PHASE))
    categories = sorted(_rows(base["categories"], head["categories"], base["categories"].keys() | head["categories"].keys()),
                        key=lambda r: (-abs(r["delta_ns"]), r["name"] or ""))
    families = sorted(_rows(base["families"], head["families"], base["families"].keys() | head["families"].keys()),
                      key=lambda r: (-abs(r["delta_ns"]), r["name"][0] or "", r["name"][1] or ""))
    return {
        "unit": unit, "phase": phase,
        "base_ns": base["wall"], "head_ns": head["wall"], "delta_ns": head["wall"] - base["wall"],
        "parts": parts, "categories": categories,
        "families": [{**row, "name": row["name"][0], "category": row["name"][1]} for row in families[:MAX_FAMILIES]],
        "idle_kinds": [r for r in _rows(base["idle_kinds"], head["idle_kinds"], IDLE_KINDS) if r["base_ns"] or r["head_ns"]],
    }


def per_unit_sentence(split: dict[str, Any]) -> str:
    """'Per token (decode): 743 µs → 850 µs (+14.3%): GPU idle +96.2 µs, ...; the parts add up to the change.'"""
    names = {"kernels": "kernels", "idle": "GPU idle", "copies": "copies", "outside_gpu": "time outside GPU work",
             OUTSIDE_PHASE: f"time outside the {split['phase']} steps"}
    total = abs(split["delta_ns"]) or 1.0
    moving = sorted((r for r in split["parts"] if r["delta_ns"] and abs(r["delta_ns"]) >= 0.1 * total),
                    key=lambda r: -abs(r["delta_ns"]))
    change = 100.0 * split["delta_ns"] / split["base_ns"] if split["base_ns"] else None
    head = (f"Per {split['unit']} ({split['phase']}): capture time {units.duration(split['base_ns'])} → "
            f"{units.duration(split['head_ns'])} ({units.signed_percent(change)})")
    if not moving:
        return head + "; no part moved by a tenth of the change."
    return head + ": " + ", ".join(f"{names[r['name']]} {units.signed_duration(r['delta_ns'])}" for r in moving) \
        + "; the parts add up to the change."
