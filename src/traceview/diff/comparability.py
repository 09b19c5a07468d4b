"""Whether two sets of runs can be compared at all, before any conclusion is drawn from them.

A diff between a model on an A100 and another on a V100 measures the hardware, not the change. Each
check compares the two sides (and the runs within a side) on what must stay fixed for step times to
mean the same thing: the GPU and how many, the phase mix, tokens per step, the kernel families that
ran (a different model or engine shows as different kernels) and how steps were found. Each check
has a similarity in [0, 1] and a floor; the score is the lowest similarity, and any check below its
floor makes the diff `inconclusive`, with the reason in words.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from traceview import units

MAX_PHASE_MIX_DISTANCE = 0.2  # total-variation distance between the sides' step shares per phase
MIN_TOKEN_RATIO = 0.9  # smaller over larger median tokens per step, per phase
MIN_FAMILY_OVERLAP = 0.5  # share of kernel time in families both sides ran, the smaller of the two sides


def priced_steps(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The steps a diff compares: those findings may price (steady ones, or all where a rank has none).
    A report from before `priced` existed gives all its steps."""
    return [s for s in report["steps"] if s.get("priced", True)]


def _gpu(report: dict[str, Any]) -> str:
    gpu = report["gpu"]
    return gpu.get("spec_name") or gpu.get("name") or "unknown GPU"


def _gpu_count(report: dict[str, Any]) -> int | None:
    return report["gpu"].get("devices_used")


def _phase_mix(reports: list[dict[str, Any]]) -> dict[str, float]:
    counts = Counter(s["phase"] for r in reports for s in priced_steps(r))
    total = sum(counts.values())
    return {phase: n / total for phase, n in counts.items()} if total else {}


def _tokens(reports: list[dict[str, Any]]) -> dict[str, float]:
    """Median tokens per step by phase, over steps that know theirs."""
    by_phase: dict[str, list[int]] = {}
    for report in reports:
        for step in priced_steps(report):
            tokens = step.get("tokens") or {}
            known = [v for v in (tokens.get("prefill"), tokens.get("decode")) if v is not None]
            if known:
                by_phase.setdefault(step["phase"], []).append(sum(known))
    return {phase: sorted(v)[len(v) // 2] for phase, v in by_phase.items()}


def _families(reports: list[dict[str, Any]]) -> Counter:
    time: Counter = Counter()
    for report in reports:
        for family in report["kernel_families"]:
            time[(family["short_name"], family["category"])] += family["time_ns"]
    return time


def _step_sources(reports: list[dict[str, Any]]) -> set[str]:
    return {s.get("step_source") or s.get("phase_source") or "unknown" for r in reports for s in priced_steps(r)}


def _check(name: str, similarity: float, passed: bool, detail: str) -> dict[str, Any]:
    return {"check": name, "similarity": round(similarity, 4), "passed": passed, "detail": detail}


def assess(base: list[dict[str, Any]], head: list[dict[str, Any]]) -> dict[str, Any]:
    """Every check, the score (the lowest similarity) and the reasons the sides are not comparable."""
    checks = []
    gpus = {"base": sorted({_gpu(r) for r in base}), "head": sorted({_gpu(r) for r in head})}
    same_gpu = len(gpus["base"]) == 1 and gpus["base"] == gpus["head"]
    checks.append(_check("gpu", 1.0 if same_gpu else 0.0, same_gpu,
                         f"same GPU ({gpus['base'][0]})" if same_gpu else
                         f"GPU changed: {', '.join(gpus['base'])} → {', '.join(gpus['head'])}"))
    counts = {side: sorted({str(_gpu_count(r) or "unknown") for r in reports})  # unknown is not 0 GPUs
              for side, reports in (("base", base), ("head", head))}
    same_count = len(counts["base"]) == 1 and counts["base"] == counts["head"]
    checks.append(_check("gpu_count", 1.0 if same_count else 0.0, same_count,
                         f"same GPU count ({counts['base'][0]})" if same_count else
                         f"GPU count changed: {', '.join(counts['base'])} → {', '.join(counts['head'])}"))
    mix = {"base": _phase_mix(base), "head": _phase_mix(head)}
    phases = sorted(mix["base"].keys() | mix["head"].keys())
    distance = 0.5 * sum(abs(mix["base"].get(p, 0.0) - mix["head"].get(p, 0.0)) for p in phases)
    shares = "; ".join(f"{p} {units.percent(100 * mix['base'].get(p, 0.0))} → {units.percent(100 * mix['head'].get(p, 0.0))}"
                       for p in phases)
    checks.append(_check("phase_mix", 1.0 - distance, distance <= MAX_PHASE_MIX_DISTANCE,
                         ("same phase mix" if distance == 0 else f"phase mix of steps: {shares}") if phases
                         else "no steps on either side"))
    tokens = {"base": _tokens(base), "head": _tokens(head)}
    shared = sorted(tokens["base"].keys() & tokens["head"].keys())
    ratios = {p: min(tokens["base"][p], tokens["head"][p]) / max(tokens["base"][p], tokens["head"][p], 1) for p in shared}
    worst = min(ratios.values(), default=1.0)
    if shared:
        detail = "; ".join(f"{p} {tokens['base'][p]:g} → {tokens['head'][p]:g}" for p in shared)
        checks.append(_check("tokens_per_step", worst, worst >= MIN_TOKEN_RATIO,
                             ("same tokens per step: " if worst == 1.0 else "median tokens per step: ") + detail))
    else:
        checks.append(_check("tokens_per_step", 1.0, True, "tokens per step unknown on one side or both (no "
                                                           "annotation carries them): not checked"))
    families = {"base": _families(base), "head": _families(head)}
    keys = families["base"].keys() & families["head"].keys()
    overlap = min((sum(t for k, t in families[side].items() if k in keys) / total) if (total := sum(families[side].values())) else 1.0
                  for side in ("base", "head"))
    checks.append(_check("kernel_families", overlap, overlap >= MIN_FAMILY_OVERLAP,
                         f"{units.percent(100 * overlap)} of kernel time is in families both sides ran"
                         + ("" if overlap >= MIN_FAMILY_OVERLAP else " (a different model, engine or GPU?)")))
    sources = {"base": _step_sources(base), "head": _step_sources(head)}
    same_sources = sources["base"] == sources["head"]
    checks.append(_check("step_detection", 1.0 if same_sources else 0.0, same_sources,
                         f"steps found the same way ({', '.join(sorted(sources['base'])) or 'none'})" if same_sources else
                         f"step detection changed: {', '.join(sorted(sources['base'])) or 'none'} → "
                         f"{', '.join(sorted(sources['head'])) or 'none'}"))
    reasons = [c["detail"] for c in checks if not c["passed"]]
    return {"comparable": not reasons, "score": min(c["similarity"] for c in checks), "reasons": reasons,
            "checks": checks}
