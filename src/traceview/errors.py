"""The one error type a user sees: a single line, exit code 2, no traceback."""

from __future__ import annotations

import click


class TraceviewError(click.ClickException):
    """An input or usage problem explained in one line (exit code 2)."""

    exit_code = 2
