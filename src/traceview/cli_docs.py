"""docs/cli.md: every command's --help, generated so the reference cannot drift from the code."""

from __future__ import annotations

import click

from traceview.cli import cli, rules


def reference_markdown() -> str:
    """docs/cli.md: every command's --help, so the reference cannot drift from the code."""
    parts = ["# traceview command line", "",
             "Generated from `--help` by `traceview.cli_docs.reference_markdown()`; a test keeps it current.", ""]
    # the group's context settings (`-h` beside `--help`), as the real command line applies them
    root = click.Context(cli, info_name="traceview", terminal_width=100, max_content_width=100, **cli.context_settings)
    commands = [("traceview", cli)] + sorted(cli.commands.items())
    commands += [(f"rules {name}", command) for name, command in sorted(rules.commands.items())]
    for name, command in commands:
        context = root if command is cli else click.Context(command, info_name=name, parent=root, terminal_width=100, max_content_width=100)
        parts += [f"## {'traceview' if command is cli else 'traceview ' + name}", "", "```", command.get_help(context), "```", ""]
    return "\n".join(parts)
