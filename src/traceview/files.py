"""Writing outputs safely: never over an input, never half a file."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from traceview.errors import TraceviewError


def write_atomically(path: Path, text: str | bytes) -> None:
    """Write beside the target, then rename: an interrupted run never leaves half a file.

    The file gets the permissions a plain open() would give (mkstemp's are owner-only).
    """
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with (os.fdopen(fd, "wb") if isinstance(text, bytes) else os.fdopen(fd, "w", encoding="utf-8")) as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
        raise TraceviewError(f"{path}: cannot write ({exc.strerror or exc})") from None


def user_cache_dir() -> Path:
    """Where traceview keeps what it can rebuild: $TRACEVIEW_CACHE_DIR, else the XDG cache directory."""
    if configured := os.environ.get("TRACEVIEW_CACHE_DIR"):
        return Path(configured)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "traceview"
