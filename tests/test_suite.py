"""The suite's own promise: a run that could not read ../shared/traces never goes green quietly."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, STORE_VARIABLE


@pytest.mark.parametrize("ci", ["true", ""], ids=["under-ci", "locally"])
def test_a_run_without_the_shared_traces_fails_under_ci_and_warns_otherwise(tmp_path: Path, ci: str) -> None:
    """This suite's conftest.py beside one passing test, in a checkout with no ../shared/traces next to it."""
    tests = tmp_path / "checkout" / "tests"
    tests.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "conftest.py", tests / "conftest.py")
    (tests / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    environment = {name: value for name, value in os.environ.items() if name not in (STORE_VARIABLE, "CI")}
    run = subprocess.run([sys.executable, "-m", "pytest", str(tests), "-q", "-p", "no:cacheprovider"], cwd=tmp_path,
                         env={**environment, "CI": ci}, capture_output=True, text=True, timeout=120)
    output = run.stdout + run.stderr
    if ci:
        assert run.returncode == pytest.ExitCode.USAGE_ERROR, output
        assert "is missing: under CI (CI=true) the real traces are required" in output
        assert "1 passed" not in output
    else:
        assert run.returncode == pytest.ExitCode.OK, output
        assert "TRACES MISSING" in run.stdout and "1 passed" in run.stdout
        assert "tested much less than the suite" in run.stdout
