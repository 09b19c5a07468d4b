"""Human units for every output (reports, diffs, the command line): every number carries its unit.

One home for them, below the report and the analysis, so a duration reads the same everywhere.
"""

from __future__ import annotations

import math

TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))


def time_unit(ns: float) -> tuple[str, float]:
    """The unit a time of `ns` nanoseconds reads best in, and its size in ns: ('ms', 1e6)."""
    for unit, scale in TIME_UNITS:
        if abs(ns) >= scale:
            return unit, scale
    return "ns", 1.0


def duration(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    value = float(ns)
    unit, scale = time_unit(value)
    if scale == 1.0:
        return f"{value:.0f} ns"
    return f"{value / scale:.3g} {unit}" if abs(value) < 100 * scale else f"{value / scale:,.0f} {unit}"


def signed_duration(ns: float | None) -> str:
    """A time difference with its sign and unit: '+4.71 µs', '-87.6 µs', '0 ns'."""
    if ns is None:
        return "n/a"
    return ("+" if ns > 0 else "") + duration(ns)


def number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def signed_percent(pct: float | None) -> str:
    """A change in percent with its sign: '+3.1%', '-100.0%', 'n/a' (no '-0.0%')."""
    if pct is None:
        return "n/a"
    text = f"{pct:+.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text


def size(num_bytes: float | None) -> str:
    if num_bytes is None:
        return "n/a"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(num_bytes) >= scale:
            return f"{num_bytes / scale:.3g} {unit}"
    return f"{num_bytes:.0f} B"


def _significant(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def tflops(value: float | None) -> str:
    """Achieved or peak compute rate: '989 TFLOP/s', '15.9 TFLOP/s'."""
    return "n/a" if value is None else f"{_significant(value)} TFLOP/s"


def tbps(value: float | None) -> str:
    """Achieved or peak memory bandwidth: '3.35 TB/s'."""
    return "n/a" if value is None else f"{_significant(value)} TB/s"


def interval(bounds: list[float] | None) -> str:
    """A confidence interval of a change: '[+1.2%, +3.4%]'."""
    if not bounds:
        return "n/a"
    return f"[{signed_percent(bounds[0])}, {signed_percent(bounds[1])}]"


def plain(value: float | None) -> str:
    """A figure with no unit, never in exponent notation: '27,670,000,000', '12.3', '0.00004'."""
    if value is None:
        return "n/a"
    if isinstance(value, int) or float(value).is_integer() or abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}".rstrip("0").rstrip(".")


def _scaled(value: float, unit: str) -> str:
    """`value` in the SI prefix it reads best in: '27.7 G' + unit."""
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{_significant(value / scale)} {prefix}{unit}"
    return f"{plain(value)} {unit}"


def byte_rate(bytes_per_s: float | None) -> str:
    """A transfer rate: '3.35 TB/s', '12.3 GB/s', '450 MB/s'."""
    return "n/a" if bytes_per_s is None else _scaled(bytes_per_s, "B/s")


def flop_rate(flops_per_s: float | None) -> str:
    """A compute rate from FLOP/s: '989 TFLOP/s'."""
    return "n/a" if flops_per_s is None else _scaled(flops_per_s, "FLOP/s")


def flop_count(flops: float | None) -> str:
    """A number of floating-point operations: '27.7 GFLOP'."""
    return "n/a" if flops is None else _scaled(flops, "FLOP")
