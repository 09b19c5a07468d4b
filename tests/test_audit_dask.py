"""`traceview audit --scheduler`: a Dask cluster's workers give the rows local processes give; clear one-line errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from commands import traceview_process
from conftest import DLRM_DIR, on_all_cores
from traceview import audit as auditing
from traceview.analysis.pipeline import AnalysisOptions
from traceview.errors import TraceviewError
from traceview.rules import load_config, load_rules
from traceview.testing import llm_serving_spec, write_kineto, write_nsys
from traceview.workflow import CheckOptions

pytestmark = pytest.mark.slow  # a Dask cluster of worker processes


@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    import dask

    # a worker that dies once is reported at once, instead of after three retries; no dashboard, and the
    # scheduler's HTTP endpoint on a free port rather than 8787
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with on_all_cores():  # its worker processes inherit the cores they start with
            local = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                             dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"})
        with local:
            yield local


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """traces/: generated Kineto and nsys traces and a broken one."""
    root = tmp_path_factory.mktemp("dask")
    traces = root / "traces"
    traces.mkdir()
    for i in range(2):
        write_kineto(llm_serving_spec(seed=i), traces / f"t{i}.json.gz")
    write_nsys(llm_serving_spec(), traces / "n.sqlite")
    (traces / "broken.json").write_text('{"traceEvents": [')
    return root


def audit(*args: object, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return traceview_process("audit", *args, cwd=cwd, env=env, timeout=300)


def options() -> auditing.AuditOptions:
    config = load_config(None)
    return auditing.AuditOptions(check=CheckOptions(AnalysisOptions(), config, tuple(load_rules(config.rules_dirs))))


def test_cluster_rows_equal_local_rows(cluster, workdir: Path) -> None:
    # a relative path: workers get absolute ones, and the rows come back naming the path as given;
    # the real 8-rank DLRM job (read in place) is one target with per-rank rows
    paths = ["traces"] + ([DLRM_DIR] if DLRM_DIR.is_dir() else [])
    remote = audit(*paths, "--scheduler", cluster.scheduler_address, "--json", "cluster.json",
                   "--junit", "cluster.xml", cwd=workdir)
    assert remote.returncode == 2, remote.stderr  # broken.json
    assert "Traceback" not in remote.stderr
    local = audit(*paths, "--jobs", "1", "--json", "local.json", "--junit", "local.xml", cwd=workdir)
    assert local.returncode == 2 and local.stdout == remote.stdout
    assert (workdir / "cluster.json").read_bytes() == (workdir / "local.json").read_bytes()
    assert (workdir / "cluster.xml").read_bytes() == (workdir / "local.xml").read_bytes()
    document = json.loads((workdir / "cluster.json").read_text())
    rows = {r["path"]: r for r in document["rows"]}
    assert rows["traces/broken.json"]["status"] == "error"
    assert rows["traces/broken.json"]["error"].startswith("traces/broken.json: ")  # not the absolute path
    assert rows["traces/t0.json.gz"]["findings_by_severity"] == {"error": 0, "warning": 3, "info": 0}
    if DLRM_DIR.is_dir():
        job = rows[str(DLRM_DIR)]
        assert (job["kind"], job["ranks"]) == ("job", 8)
        assert [r["kernels"] for r in job["rank_rows"]] == [245, 310, 246, 315, 251, 245, 246, 246]


def test_workers_write_the_reports_where_the_client_asked(cluster, workdir: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(workdir)
    target = auditing.Target(os.path.join("traces", "n.sqlite"), "file")
    given = replace(options(), reports_dir="reports")
    (workdir / "reports").mkdir()  # as `audit --reports-dir` does
    [row] = auditing.run_on_cluster([target], given, cluster.scheduler_address)
    assert row["reports"] == [os.path.join("reports", f"n.sqlite.{ext}") for ext in ("html", "md", "json")]
    assert all((workdir / path).stat().st_size for path in row["reports"])
    assert row == auditing.audit_one(target, given)


def test_a_task_that_fails_on_the_cluster_is_one_error_row(cluster, workdir: Path) -> None:
    def flaky(target: auditing.Target, options: auditing.AuditOptions) -> dict:
        if target.path.endswith("t1.json.gz"):
            raise RuntimeError("the worker fell over")
        return auditing.audit_one(target, options)

    traces = workdir / "traces"
    targets = [auditing.Target(str(traces / name), "file") for name in ("t0.json.gz", "t1.json.gz")]
    rows = auditing.run_on_cluster(targets, options(), cluster.scheduler_address, task=flaky)
    assert [r["status"] for r in rows] == ["ok", "error"]
    assert rows[1] == {"path": targets[1].path, "kind": "file", "status": "error",
                       "error": "on the cluster: RuntimeError: the worker fell over"}


def test_a_worker_that_dies_is_an_error_row(cluster, workdir: Path) -> None:
    def fatal(target: auditing.Target, options: auditing.AuditOptions) -> dict:
        os._exit(1)  # the worker process ends mid-task; the scheduler gives up on the task at once (allowed-failures 0)

    target = auditing.Target(str(workdir / "traces" / "t0.json.gz"), "file")
    [row] = auditing.run_on_cluster([target], options(), cluster.scheduler_address, task=fatal)
    assert row["status"] == "error" and row["error"].startswith("on the cluster: KilledWorker: ")


def test_unreachable_scheduler_is_one_line(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("distributed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    monkeypatch.setattr(auditing, "CONNECT_TIMEOUT_S", 1)
    target = auditing.Target(str(workdir / "traces" / "t0.json.gz"), "file")
    with pytest.raises(TraceviewError) as error:
        auditing.run_on_cluster([target], options(), f"tcp://127.0.0.1:{port}")
    assert error.value.exit_code == 2
    assert error.value.format_message() == (f"cannot connect to the Dask scheduler at tcp://127.0.0.1:{port}: "
                                            f"Timed out trying to connect to tcp://127.0.0.1:{port} after 1 s")


def test_malformed_address_is_one_line_on_stderr(workdir: Path) -> None:
    pytest.importorskip("distributed")
    result = audit("traces", "--scheduler", "not-an-address", cwd=workdir)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("traceview: cannot connect to the Dask scheduler at not-an-address: "
                             "missing port number in address 'not-an-address'\n")


def test_without_the_dask_extra(workdir: Path, tmp_path: Path) -> None:
    stub = tmp_path / "stub" / "distributed"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text('raise ModuleNotFoundError("no distributed here", name="distributed")\n')
    path = os.pathsep.join(filter(None, [str(stub.parent), os.environ.get("PYTHONPATH")]))
    result = audit("traces", "--scheduler", "tcp://127.0.0.1:8786", cwd=workdir, env={"PYTHONPATH": path})
    assert result.returncode == 2
    assert result.stderr == "traceview: audit --scheduler needs the dask extra: pip install 'traceview[dask]'\n"


def test_scheduler_and_jobs_are_exclusive(workdir: Path) -> None:
    result = audit("traces", "--scheduler", "tcp://127.0.0.1:8786", "--jobs", "2", cwd=workdir)
    assert result.returncode == 2
    assert result.stderr == ("traceview: --scheduler and --jobs are exclusive: "
                             "on a cluster, the workers set the parallelism\n")


def test_a_worker_without_this_traceview_stops_the_audit() -> None:
    class Cluster:
        def run(self, function, on_error: str) -> dict:
            return {"tcp://10.0.0.6:4000": "0.0.9", "tcp://10.0.0.5:4000": auditing._installed_version(),
                    "tcp://10.0.0.7:4000": ModuleNotFoundError("No module named 'traceview'")}

    with pytest.raises(TraceviewError, match=r"dask worker tcp://10.0.0.6:4000 has traceview 0.0.9, this client has"):
        auditing._check_workers(Cluster(), auditing._installed_version())
