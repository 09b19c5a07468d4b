"""`--profile`: where a command's time goes, per stage, analysis module, rule and output.

Timing is opt-in and costs nothing when off: code marks its steps with `profiling.step(kind, name)`, which
records into the profile a command started with `profiling.collect()` and is a no-op otherwise (a context
variable, so nothing is threaded through signatures). Rows touched are counted only while profiling: for an
analysis stage, the rows of the relations it creates; for a rule, the findings it returned.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field


@dataclass
class Entry:
    kind: str  # ingest, analysis, rules, report, render
    name: str
    wall_s: float
    rows: int | None = None


@dataclass
class Profile:
    entries: list[Entry] = field(default_factory=list)
    # the measured wall time of a kind whose steps ran at the same time (rules on several threads), so its
    # total is the time it took, not the sum of its steps
    walls: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"entries": [asdict(entry) for entry in self.entries], "walls": dict(self.walls)}

    def total_s(self) -> float:
        return sum(self.walls.get(kind, sum(e.wall_s for e in self.entries if e.kind == kind))
                   for kind in dict.fromkeys(e.kind for e in self.entries))

    def table(self) -> str:
        """The profile as aligned text, slowest first within each kind, with each kind's total."""
        lines = [f"{'kind':<9} {'step':<34} {'wall s':>8} {'share':>6} {'rows':>12}"]
        kinds = list(dict.fromkeys(e.kind for e in self.entries))
        subtotals = {kind: self.walls.get(kind, sum(e.wall_s for e in self.entries if e.kind == kind))
                     for kind in kinds}
        total = self.total_s() or 1.0
        for kind in kinds:
            entries = [e for e in self.entries if e.kind == kind]
            for e in sorted(entries, key=lambda e: (-e.wall_s, e.name)):
                rows = "" if e.rows is None else f"{e.rows:,}"
                lines.append(f"{kind:<9} {e.name:<34} {e.wall_s:>8.3f} {100 * e.wall_s / total:>5.1f}% {rows:>12}")
            label = "(total, steps overlapped)" if kind in self.walls else "(total)"
            lines.append(f"{kind:<9} {label:<34} {subtotals[kind]:>8.3f} {100 * subtotals[kind] / total:>5.1f}%")
        lines.append(f"{'all':<9} {'':<34} {total:>8.3f}")
        return "\n".join(lines) + "\n"


def merged(profiles: list[dict]) -> Profile:
    """Several workers' profiles (audit: one per target, as `Profile.to_dict`) as one: wall time and rows
    summed per step and per kind, so the table says where the whole audit's time went."""
    totals: dict[tuple[str, str], Entry] = {}
    walls: dict[str, float] = {}
    for profile in profiles:
        for entry in profile["entries"]:
            key = (entry["kind"], entry["name"])
            total = totals.setdefault(key, Entry(entry["kind"], entry["name"], 0.0))
            total.wall_s += entry["wall_s"]
            if entry["rows"] is not None:
                total.rows = (total.rows or 0) + entry["rows"]
        for kind, wall in profile["walls"].items():
            walls[kind] = walls.get(kind, 0.0) + wall
    return Profile(list(totals.values()), walls)


_current: contextvars.ContextVar[Profile | None] = contextvars.ContextVar("traceview_profile", default=None)
_process_started: list[float] = []  # the perf_counter reading at which this command's process began importing


def process_started(at: float) -> None:
    """Mark when this process began importing traceview: the command line's entry point does, so that its command's
    profile can open with the imports (`record_startup`). A command run inside another program, as the tests run
    it, has no start-up of its own and no mark."""
    _process_started[:] = [at]


def record_startup() -> None:
    """Open the current profile with a `startup` row, the imports' time up to now, where this process's start was
    marked; once, so no later profile of the process (or of a worker forked from it) counts it again."""
    profile = _current.get()
    if profile is not None and _process_started:
        profile.entries.append(Entry("startup", "imports", time.perf_counter() - _process_started.pop()))


@contextmanager
def collect() -> Iterator[Profile]:
    """Record every `step` inside the block into a new Profile."""
    profile = Profile()
    token = _current.set(profile)
    try:
        yield profile
    finally:
        _current.reset(token)


def active() -> bool:
    return _current.get() is not None


@contextmanager
def _timed(record: Callable[[Profile, float], None]) -> Iterator[None]:
    """Time the block into the current profile with `record(profile, wall_s)`; nothing at all when off."""
    profile = _current.get()
    if profile is None:
        yield
        return
    start = time.perf_counter()
    yield
    record(profile, time.perf_counter() - start)


def overlapping(kind: str):
    """The block runs the kind's steps at the same time: its wall time is the kind's total."""
    return _timed(lambda profile, wall: profile.walls.__setitem__(kind, profile.walls.get(kind, 0.0) + wall))


@contextmanager
def alongside(kind: str, other: str) -> Iterator[None]:
    """The block runs `kind`'s steps while `other`'s run too: `kind` is credited with the block's wall time
    beyond what `other` took in it, so the kinds still add up to the wall time."""
    profile = _current.get()
    if profile is None:
        yield
        return
    before = {name: profile.walls.get(name, 0.0) for name in (kind, other)}
    start = time.perf_counter()
    yield
    wall = time.perf_counter() - start
    profile.walls[kind] = before[kind] + wall - (profile.walls.get(other, 0.0) - before[other])


def step(kind: str, name: str, rows: Callable[[], int | None] | None = None):
    """Time the block as one entry; `rows`, called after it and only while profiling, counts what it touched."""
    return _timed(lambda profile, wall: profile.entries.append(Entry(kind, name, wall, rows() if rows else None)))
