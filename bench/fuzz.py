"""Fuzz the ingesters: mutate small real and generated traces; every input must load or raise TraceviewError.

    .venv/bin/python bench/fuzz.py                 # 10,000 inputs over both formats, all cores
    .venv/bin/python bench/fuzz.py -n 2000 --jobs 4 --seed 7

Mutators: truncate at a random offset, flip random bytes, drop keys from random events (Kineto),
reorder events (Kineto), drop/garble rows and tables (nsys). An uncaught exception is saved as a
reproducer under /tmp/traceview-fuzz/ and counted by type. tests/test_fuzz.py uses the same mutators.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "traces"
REPRO_DIR = Path("/tmp/traceview-fuzz")
SMALL_BYTES = 400_000


def seeds(workdir: Path) -> list[Path]:
    """Small inputs: generated nsys and Kineto traces, plus the smallest real ones in ../shared/traces."""
    from traceview.testing import llm_serving_spec, write_kineto, write_nsys

    spec = llm_serving_spec(prefill_batches=(1,), decode_steps=1)
    out = [write_kineto(spec, workdir / "gen.json", gzip=False), write_kineto(spec, workdir / "gen.json.gz"),
           write_kineto(spec, workdir / "gen_legacy.json", flavour="legacy2021", gzip=False),
           write_nsys(spec, workdir / "gen.sqlite"), write_nsys(spec, workdir / "gen_legacy.sqlite", version="legacy")]
    if SHARED.is_dir():
        real = [p for p in sorted(SHARED.glob("*/*")) if p.is_file() and p.suffix in (".sqlite", ".gz")]
        out += [p for p in real if p.stat().st_size <= SMALL_BYTES]
    return out


def _kineto_text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def flip_bytes(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 16)):
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def drop_keys(data: bytes, rng: random.Random) -> bytes | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list) or not events:
        return None
    for _ in range(rng.randint(1, 20)):
        event = rng.choice(events)
        if isinstance(event, dict) and event:
            key = rng.choice(list(event))
            if rng.random() < 0.5:
                del event[key]
            else:
                event[key] = rng.choice([None, "", "x", -1, 0, 1e300, [], {}, True, "9" * 40])
    return json.dumps(doc).encode()


def reorder(data: bytes, rng: random.Random) -> bytes | None:
    try:
        doc = json.loads(data)
    except ValueError:
        return None
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        return None
    rng.shuffle(events)
    if events and rng.random() < 0.5:
        events += rng.sample(events, min(len(events), 5))  # duplicates
    return json.dumps(doc).encode()


def mutate_sqlite(source: Path, target: Path, rng: random.Random) -> None:
    """Delete rows, null or garble values, or drop a table of a copy of an nsys export."""
    shutil.copy(source, target)
    with sqlite3.connect(target) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for _ in range(rng.randint(1, 4)):
            table = rng.choice(tables)
            columns = [c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')]
            action = rng.random()
            if action < 0.15:
                conn.execute(f'DROP TABLE "{table}"')
                tables.remove(table)
                if not tables:
                    break
            elif action < 0.4:
                conn.execute(f'DELETE FROM "{table}" WHERE abs(random()) % 3 = 0')
            elif columns:
                column = rng.choice(columns)
                value = rng.choice([None, -1, 0, 2**62, "x", b"\xff\xfe", 1.5, "9" * 30])
                try:
                    conn.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE abs(random()) % 4 = 0', [value])
                except sqlite3.DatabaseError:
                    pass


def make_input(source: Path, target_dir: Path, rng: random.Random) -> tuple[Path, str]:
    """One mutated copy of `source` in `target_dir`; returns its path and the mutator's name."""
    if source.suffix == ".sqlite":
        mutator = rng.choice(["truncate", "flip_bytes", "sqlite_rows", "sqlite_rows"])
        target = target_dir / "input.sqlite"
        if mutator == "sqlite_rows":
            mutate_sqlite(source, target, rng)
        else:
            target.write_bytes(globals()[mutator](source.read_bytes(), rng))
        return target, mutator
    text = _kineto_text(source)
    mutator = rng.choice(["truncate", "flip_bytes", "drop_keys", "reorder", "truncate_gzip", "flip_gzip"])
    if mutator in ("truncate_gzip", "flip_gzip"):
        data = (truncate if mutator == "truncate_gzip" else flip_bytes)(gzip.compress(text, 1), rng)
        target = target_dir / "input.json.gz"
    else:
        data = globals()[mutator](text, rng)
        if data is None:
            data, mutator = truncate(text, rng), "truncate"
        target = target_dir / "input.json"
    target.write_bytes(data)
    return target, mutator


def check(path: Path) -> str:
    """'loaded' or 'error' (TraceviewError); anything else propagates."""
    import traceview

    try:
        with traceview.load(path) as trace:
            trace.analyze()
    except traceview.TraceviewError:
        return "error"
    return "loaded"


def _worker(args: tuple[list[str], int, int]) -> list[tuple[str, str, str, str]]:
    sources, seed, count = args
    rng = random.Random(seed)
    rows = []
    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-") as tmp:
        for i in range(count):
            source = Path(rng.choice(sources))
            work = Path(tmp) / str(i)
            work.mkdir()
            path, mutator = make_input(source, work, rng)
            fmt = "nsys" if source.suffix == ".sqlite" else "kineto"
            try:
                outcome, detail = check(path), ""
            except Exception as exc:  # noqa: BLE001 - this is what the fuzzer looks for
                REPRO_DIR.mkdir(exist_ok=True)
                repro = REPRO_DIR / f"{type(exc).__name__}-{seed}-{i}{''.join(path.suffixes)}"
                shutil.copy(path, repro)
                outcome = f"uncaught {type(exc).__name__}"
                detail = f"{repro}: {traceback.format_exception_only(exc)[-1].strip()[:300]}"
            rows.append((fmt, mutator, outcome, detail))
            shutil.rmtree(work)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="mutated inputs to try")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="traceview-fuzz-seeds-") as tmp:
        sources = [str(p) for p in seeds(Path(tmp))]
        batch = 50
        tasks = [(sources, options.seed * 1_000_003 + i, min(batch, options.n - i * batch))
                 for i in range((options.n + batch - 1) // batch)]
        counts: collections.Counter = collections.Counter()
        details: dict[str, str] = {}
        with ProcessPoolExecutor(options.jobs) as pool:
            for rows in pool.map(_worker, tasks):
                for fmt, mutator, outcome, detail in rows:
                    counts[(fmt, mutator, outcome)] += 1
                    if detail:
                        details.setdefault(outcome, detail)
    total = sum(counts.values())
    print(f"{total} inputs from {len(sources)} seed traces\n")
    print(f"{'format':<8} {'mutator':<14} {'outcome':<40} {'count':>6}")
    for (fmt, mutator, outcome), n in sorted(counts.items()):
        print(f"{fmt:<8} {mutator:<14} {outcome:<40} {n:>6}")
    by_outcome = collections.Counter()
    for (_, _, outcome), n in counts.items():
        by_outcome[outcome] += n
    print("\n" + ", ".join(f"{outcome}: {n}" for outcome, n in sorted(by_outcome.items())))
    for outcome, detail in details.items():
        print(f"{outcome}: e.g. {detail}")
    sys.exit(1 if any(o.startswith("uncaught") for o in by_outcome) else 0)


if __name__ == "__main__":
    main()
