"""The data files reach traceview one way (traceview.resources), from the checkout and from a built wheel alike.

The wheel test builds the project, installs the wheel into a fresh venv (its dependencies come from this venv
through a .pth file, nothing is downloaded but the build backend) and runs `traceview report` outside the checkout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import built_once
from traceview.compat import tomllib
from traceview.resources import DATA_PACKAGE, data_dir

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "llm_serving.pt.trace.json.gz"
DATA_FOLDERS = ("hardware", "rules", "templates", "sample_traces")
BUILD_INPUTS = ("pyproject.toml", "README.md", "src", *DATA_FOLDERS)
SETUPTOOLS = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def run(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result


def expected_wheel_files() -> set[str]:
    """Every data file of the top-level folders and every file of the package sources, as wheel paths."""
    data = {
        f"{DATA_PACKAGE}/{folder}/{path.name}"
        for folder, pattern in (("hardware", "*.toml"), ("rules", "*.toml"), ("templates", "*"),
                                ("sample_traces", "*.json.gz"), ("sample_traces", "*.sqlite"))
        for path in (REPO / folder).glob(pattern)
        if path.is_file()
    }
    sources = {
        path.relative_to(REPO / "src").as_posix()
        for path in (REPO / "src" / "traceview").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    return data | sources


def dependency_dirs() -> list[str]:
    """Where this interpreter imports from. A .pth appends them after the venv's own site-packages, so the
    wheel's traceview shadows any other (the report test checks where it was imported from)."""
    return [entry for entry in dict.fromkeys(sys.path) if entry and Path(entry).is_dir()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built once a session from a copy of the build inputs (an in-tree build would write build/ into
    the checkout)."""
    def build(out: Path) -> None:
        tree = tmp_path_factory.mktemp("tree")
        for name in BUILD_INPUTS:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, tree / name, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
            else:
                shutil.copy2(source, tree / name)
        out.mkdir()
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(tree)], cwd=out)

    (built,) = built_once("wheel", build).glob("traceview-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding the wheel; this venv's site-packages supply the dependencies, not traceview."""
    root = tmp_path_factory.mktemp("venv")
    run([sys.executable, "-m", "venv", "--without-pip", str(root)], cwd=root)
    python = root / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root)
    (Path(purelib.stdout.strip()) / "_project_deps.pth").write_text("\n".join(dependency_dirs()) + "\n")
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index",
         "--ignore-installed", str(wheel)], cwd=root)
    return root


def test_every_package_under_src_is_declared():
    found = {".".join(p.parent.relative_to(REPO / "src").parts) for p in (REPO / "src").rglob("__init__.py")}
    data_packages = {f"{DATA_PACKAGE}.{folder}" for folder in DATA_FOLDERS}
    assert set(SETUPTOOLS["packages"]) == found | data_packages
    assert {p: SETUPTOOLS["package-dir"][p] for p in data_packages} == {
        f"{DATA_PACKAGE}.{folder}": folder for folder in DATA_FOLDERS
    }


@pytest.mark.parametrize("folder", DATA_FOLDERS)
def test_editable_install_reads_the_checkout_folder(folder: str):
    assert data_dir(folder) == REPO / folder


@pytest.mark.slow
def test_wheel_holds_every_data_and_source_file(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = expected_wheel_files()
    assert len([n for n in expected if n.startswith(f"{DATA_PACKAGE}/hardware/")]) == len(
        list((REPO / "hardware").glob("*.toml"))
    ) > 30
    assert expected - names == set()


@pytest.mark.slow
def test_installed_wheel_reports_like_the_checkout(venv: Path, tmp_path: Path):
    located = run([str(venv / "bin" / "python"), "-c",
                   "import traceview, traceview.resources as r; print(traceview.__file__); "
                   "print(*(r.data_dir(f) for f in ('hardware', 'rules', 'templates')), sep='\\n')"], cwd=tmp_path)
    paths = [Path(line) for line in located.stdout.splitlines()]
    assert len(paths) == 4 and all(p.resolve().is_relative_to(venv.resolve()) for p in paths), paths

    installed, checkout = tmp_path / "installed.json", tmp_path / "checkout.json"
    run([str(venv / "bin" / "traceview"), "report", str(SAMPLE), "--format", "json", "-o", str(installed)],
        cwd=tmp_path)
    run([sys.executable, "-m", "traceview", "report", str(SAMPLE), "--format", "json", "-o", str(checkout)],
        cwd=tmp_path)
    report = json.loads(installed.read_text())
    assert report["gpu"]["name"] == "NVIDIA H100 80GB HBM3" and report["gpu"]["spec_id"] == "h100-sxm"
    assert report["gpu"]["hbm_tbps"] == 3.35 and report["gpu"]["peak_tflops"]["bf16"] == 989.4
    rule_files = {path.name.split("-")[0] for path in (REPO / "rules").glob("*.toml")}
    assert report["findings"] and {f["rule"] for f in report["findings"]} <= rule_files
    assert report == json.loads(checkout.read_text())

    bundled = tmp_path / "bundled.json"  # no TRACE: the sample trace the wheel carries
    run([str(venv / "bin" / "traceview"), "report", "--format", "json", "-o", str(bundled)], cwd=tmp_path)
    assert json.loads(bundled.read_text())["findings"] == report["findings"]

    page = tmp_path / "installed.html"
    run([str(venv / "bin" / "traceview"), "report", str(SAMPLE), "--format", "html", "-o", str(page)], cwd=tmp_path)
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and "NVIDIA H100 SXM5 80GB" in html
