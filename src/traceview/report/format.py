"""Human units for reports: every number carries its unit."""

from __future__ import annotations


def duration(ns: float | None) -> str:
    if ns is None:
        return "n/a"
    value = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}" if abs(value) < 100 * scale else f"{value / scale:,.0f} {unit}"
    return f"{value:.0f} ns"


def number(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.{digits}f}"


def percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def size(num_bytes: float | None) -> str:
    if num_bytes is None:
        return "n/a"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
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
