"""Child process that has SQLite write integer columns of an export as CSV text, chunk by chunk.

Python's sqlite3 builds one tuple of objects per row, which caps a row-by-row read at about 400 k
rows/s. Here SQLite itself formats a whole chunk of rows into one CSV string (printf + group_concat,
in C), the child appends it to a file, and DuckDB parses the files in parallel. Several children
read disjoint rowid ranges of the same file at once: separate processes, because threads in one
process serialise on SQLite's allocator mutex.

It runs as a plain script (`python -I -S sqlite_dump.py EXPORT`) with only the standard library, so
a child starts in milliseconds. Its job comes as JSON on stdin: {"sql", "params", "lo", "hi", "step", "out"};
`sql` selects one CSV text for the rowids between its last two parameters (`params` are bound before
them: no value is spliced into the SQL text), and the rowids lo..hi are read `step` at a time into the
file `out`.
"""

import json
import sqlite3
import sys
from pathlib import Path


def dump(export: str, job: dict) -> None:
    conn = sqlite3.connect(f"file:{Path(export).resolve().as_posix()}?mode=ro&immutable=1", uri=True)
    conn.text_factory = bytes
    params = tuple(job.get("params", ()))
    try:
        with open(job["out"], "wb") as out:
            for lo in range(job["lo"], job["hi"] + 1, job["step"]):
                (text,) = conn.execute(job["sql"], (*params, lo, min(lo + job["step"] - 1, job["hi"]))).fetchone()
                if text:
                    out.write(text)
                    out.write(b"\n")
    finally:
        conn.close()


if __name__ == "__main__":
    dump(sys.argv[1], json.load(sys.stdin))
