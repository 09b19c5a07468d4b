"""The traceview GitHub action: diff base runs against head runs, optionally audit, and report to the job.

A composite action gets no INPUT_* variables of its own, so action.yml passes each input as one. The
Markdown goes to the job summary, the verdict and file paths to the step's outputs, and the exit code is
the gate's: the step fails exactly when `traceview diff` (or the audit) fails. Standard library only, so it
runs under any interpreter; traceview itself runs under $TRACEVIEW_PYTHON (the action's own venv).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

USAGE_ERROR = 2


class ActionError(Exception):
    """A bad input, or traceview unable to run: one line for the log and the annotation, exit code 2."""


def _input(name: str, default: str = "") -> str:
    """The action input `name` (e.g. fail-on-regression), as action.yml passes it: INPUT_FAIL_ON_REGRESSION."""
    return os.environ.get("INPUT_" + name.upper().replace("-", "_"), "").strip() or default


def _paths(name: str, *, required: bool) -> list[str]:
    """One path a line, or several on one line split at spaces; globs expand, sorted, so runs keep their order."""
    text = _input(name)
    entries = [line.strip() for line in text.splitlines()] if "\n" in text else text.split()
    paths: list[str] = []
    for entry in filter(None, entries):
        if glob.escape(entry) != entry:
            matches = sorted(glob.glob(entry, recursive=True))
            if not matches:
                raise ActionError(f"{name}: {entry} matches no file")
            paths.extend(matches)
        elif not Path(entry).exists():
            raise ActionError(f"{name}: {entry}: no such file or directory")
        else:
            paths.append(entry)
    if required and not paths:
        raise ActionError(f"{name}: give at least one trace, rank directory or traceview JSON report")
    return paths


def _flag(name: str) -> bool:
    value = _input(name, "false").lower()
    if value not in ("true", "false"):
        raise ActionError(f"{name}: {value!r} is neither true nor false")
    return value == "true"


def _output_dir() -> Path:
    """The output-dir input, else $RUNNER_TEMP/traceview: outside the workspace, so no output lands in a commit."""
    chosen = _input("output-dir") or str(Path(os.environ.get("RUNNER_TEMP") or tempfile.gettempdir()) / "traceview")
    return Path(chosen).absolute()


def _traceview(args: list[str], produces: Path) -> int:
    """Run `traceview ARGS`, whose result is the file `produces`; without that file its last error line is ours.

    The file is removed first, so a result left by an earlier run in the same directory never passes for
    this one. The summary variable is withheld: audit would append to it itself, out of the action's order.
    """
    produces.unlink(missing_ok=True)
    python = os.environ.get("TRACEVIEW_PYTHON") or sys.executable
    environment = {key: value for key, value in os.environ.items() if key != "GITHUB_STEP_SUMMARY"}
    done = subprocess.run([python, "-m", "traceview", *args], stderr=subprocess.PIPE, text=True, env=environment)
    if not produces.exists():
        lines = done.stderr.strip().splitlines()
        raise ActionError(lines[-1] if lines else f"traceview {args[0]} exited with code {done.returncode}")
    sys.stderr.write(done.stderr)
    return done.returncode


def _diff_args(markdown: Path) -> list[str]:
    """The `traceview diff` command line for the inputs, writing MARKDOWN and the JSON and HTML beside it."""
    args = ["diff"]
    for side, paths in (("base", _paths("base", required=True)), ("head", _paths("head", required=True))):
        args += [arg for path in paths for arg in (f"--{side}", path)]
    args += ["--format", "md,json,html", "-o", str(markdown), "--confidence", _input("confidence", "95%")]
    limit = _input("fail-on-regression")
    if limit:
        args += ["--fail-on-regression", limit]
    if _flag("fail-on-inconclusive"):
        args.append("--fail-on-inconclusive")
    return args


def _audit_args(paths: list[str], markdown: Path) -> list[str]:
    """The `traceview audit` command line, writing MARKDOWN and the JSON beside it."""
    return ["audit", *paths, "--markdown", str(markdown), "--json", str(markdown.with_suffix(".json")),
            "--fail-on", _input("audit-fail-on", "error")]


def _append_summary(markdown_files: list[Path]) -> None:
    """Append each file to the job summary, a blank line apart so a table never runs into the next heading."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return
    with open(summary, "a", encoding="utf-8") as out:
        for path in markdown_files:
            out.write(path.read_text(encoding="utf-8").rstrip("\n") + "\n\n")


def _set_outputs(values: dict[str, str]) -> None:
    """`name=value` lines into $GITHUB_OUTPUT; on stdout when run outside GitHub, to show what a step would get."""
    lines = "".join(f"{name}={value}\n" for name, value in values.items())
    target = os.environ.get("GITHUB_OUTPUT")
    if target:
        with open(target, "a", encoding="utf-8") as out:
            out.write(lines)
    else:
        sys.stdout.write(lines)


def run() -> int:
    """The diff's exit code, or the audit's when only the audit failed. Every input is checked before either runs."""
    output_dir = _output_dir()
    diff_markdown, diff_json = output_dir / "diff.md", output_dir / "diff.json"
    diff = _diff_args(diff_markdown)
    audit_paths = _paths("audit", required=False)
    audit_markdown = output_dir / "audit.md"
    audit = _audit_args(audit_paths, audit_markdown) if audit_paths else None
    output_dir.mkdir(parents=True, exist_ok=True)
    diff_code = _traceview(diff, produces=diff_json)
    verdict = json.loads(diff_json.read_text(encoding="utf-8"))["verdict"]
    summaries, audit_code = [diff_markdown], 0
    if audit:
        audit_code = _traceview(audit, produces=audit_markdown)
        summaries.append(audit_markdown)
    _append_summary(summaries)
    _set_outputs({"verdict": verdict, "markdown": str(diff_markdown), "json": str(diff_json),
                  "html": str(diff_markdown.with_suffix(".html"))})
    return diff_code or audit_code


def main() -> int:
    try:
        return run()
    except ActionError as error:
        message = str(error).replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        print(f"::error title=traceview::{message}", file=sys.stderr)
        return USAGE_ERROR


if __name__ == "__main__":
    sys.exit(main())
