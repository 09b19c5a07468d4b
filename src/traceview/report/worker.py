"""A format's renderer in a process of its own, loaded while the parent imports, reads and analyses the trace
(traceview/launch.py starts it before the command line's imports).

The HTML page renders with altair, whose import alone is a quarter of a second of Python. On a thread
that import holds the GIL that the analysis's Python needs; in this process it runs on the second core.
Protocol, over pipes: the parent starts `python -m traceview.report.worker MODULE PREPARE FUNCTION`; the
worker imports traceview.report.MODULE and calls PREPARE(), then reads one pickled document from stdin
and writes one pickled reply to stdout: ("ok", content) or ("error", kind, message, traceback). An
empty stdin (the parent failed before it had a document) ends the worker quietly.
"""

from __future__ import annotations

import importlib
import os
import pickle
import sys
import traceback


def main(module: str, prepare: str, function: str) -> int:
    try:
        loaded = importlib.import_module(f"traceview.report.{module}")
        getattr(loaded, prepare)()
    except Exception:  # the render below raises the same error with the document in hand
        loaded = None
    try:
        document = pickle.load(sys.stdin.buffer)
    except EOFError:
        return 0
    try:
        if loaded is None:
            loaded = importlib.import_module(f"traceview.report.{module}")
        reply = ("ok", getattr(loaded, function)(document))
    except Exception as exc:
        reply = ("error", type(exc).__name__, str(exc), traceback.format_exc())
    pickle.dump(reply, sys.stdout.buffer, protocol=pickle.HIGHEST_PROTOCOL)
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    code = main(*sys.argv[1:4])
    sys.stdout.flush()
    os._exit(code)  # the reply is out: tearing down altair's thousands of objects would only delay the parent 0.1 s
