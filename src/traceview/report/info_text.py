"""`traceview info` as text: one labelled line per fact, for a terminal."""

from __future__ import annotations

from typing import Any


def render(summary: dict[str, Any]) -> str:
    """The info document (`report.data.trace_summary`) as lines."""
    lines = []
    for source in summary["traces"]:
        lines.append(f"trace      {source['file']}")
        version = source["producer_version"] or "unknown version"
        lines.append(f"format     {source['source_format']} ({source['producer']} {version})"
                     + (f", schema {source['schema_version']}" if source["schema_version"] else ""))
        rank = f"rank {source['rank']}" + (f" of {source['world_size']}" if source["world_size"] else "")
        lines.append(f"rank       {rank}")
        span = source["span_ns"]
        lines.append(f"span       {span / 1e6:.3f} ms" if span is not None else "span       no timed events")
    for gpu in summary["devices"]:
        memory = f", {gpu['memory_bytes'] / 2**30:.0f} GiB" if gpu["memory_bytes"] else ""
        sms = f", {gpu['sm_count']} SMs" if gpu["sm_count"] else ""
        cc = f", cc {gpu['compute_major']}.{gpu['compute_minor']}" if gpu["compute_major"] is not None else ""
        spec = f" -> {gpu['spec_id']}" if gpu.get("spec_id") else ""
        lines.append(f"gpu        [{gpu['rank']}:{gpu['device_id']}] {gpu['name'] or '(no name)'}{sms}{memory}{cc}{spec}")
    if not summary["devices"]:
        lines.append("gpu        none described in the trace")
    lines.append("rows       " + ", ".join(f"{table} {count:,}" for table, count in summary["rows"].items()))
    lines.append(f"kernels    {summary['kernels']['graph']:,} graph-launched, {summary['kernels']['eager']:,} eager")
    for phase in summary["phases"]:
        bound = f", {phase['bound']}-bound ({phase['bound_source'].replace('_', ' ')})" if phase["bound"] else ""
        roof = (f", {phase['pct_of_roof']:.0f}% of roof" if phase["pct_of_roof"] is not None
                else f", % of roof n/a ({phase['roofline_gap']})")
        kernel_busy = f"{phase['kernel_busy_ns'] / 1e6:.3f} ms" if phase["kernel_busy_ns"] is not None else "n/a"
        lines.append(f"phase      {phase['phase']}: {phase['steps']} steps, kernels busy {kernel_busy}"
                     f" of {phase['wall_ns'] / 1e6:.3f} ms{bound}{roof}")
    for diag in summary["diagnostics"]:
        lines.append(f"{diag['severity']:<10} [{diag['code']}] {diag['message']}")
    return "\n".join(lines) + "\n"
