"""traceview vs nsys-ai on the same Nsight Systems SQLite export, and the SQLite row floor.

A script, not a test. Input: the generated nsys export that bench/ingest.py builds (2,000,000 kernels,
2,000,000 cudaLaunchKernel rows, 200,000 NVTX ranges; cached in --workdir). `--kernels N` builds (and
caches) a smaller one with the same builder for quick checks.

    .venv/bin/python bench/nsys_compare.py --output /tmp/traceview-bench/nsys_compare.md
    .venv/bin/python bench/nsys_compare.py --quick                 # 20,000 kernels, end to end check

nsys-ai (PyPI `nsys-ai`) is not a project dependency. It is measured in two venvs of its own:

  stock    python3 -m venv /tmp/nsysai-venv && /tmp/nsysai-venv/bin/pip install nsys-ai
           nsys-ai opens the export through DuckDB's `sqlite_scanner` extension, which DuckDB
           downloads on first use. Offline that download fails (each ATTACH retries it), and nsys-ai
           falls back to plain sqlite3 queries with no Parquet cache. This is what a user gets on
           an offline machine.
  ext      python3 -m venv /tmp/nsysai-ext-venv && /tmp/nsysai-ext-venv/bin/pip install nsys-ai \\
               duckdb==1.5.5 duckdb-extension-sqlite-scanner==1.5.5
           The extension from PyPI, placed (by this script) in a private DuckDB home
           (--nsysai-home, default /tmp/nsysai-home: HOME/.duckdb/extensions/v1.5.5/linux_amd64/),
           so nsys-ai runs as designed, offline: first command builds its Parquet cache beside the
           profile (cold), later commands read the cache (warm).

Cases (each one fresh process; wall time and peak RSS = ru_maxrss from os.wait4 on that child,
which on Linux also covers its own reaped children, as a max, not a sum):
  traceview report      `traceview report FILE --format html,json -o OUT.html`
  traceview audit       `traceview audit FILE --json OUT.json` (one file: runs in-process)
  traceview --cache-dir the same two with `--cache-dir`, cold (ingest + save) then warm
  floor                 stdlib sqlite3: fetchall() of kernels, runtime and NVTX rows (bench/ingest.py)
  nsys-ai               `analyze --format json` (deterministic findings, no LLM), `report --gpu G
                        --trim 0 END` (the Markdown report), `summary`; cold = its cache deleted first

nsys-ai's `ask`, `chat` and `agent` commands need an LLM (network, API key) and are not run.
Nothing here asserts on time; numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import ingest  # bench/ingest.py: build_nsys (in a child), environment(), SQLITE_ALL_CHILD

REPO = BENCH.parent
TRACEVIEW = Path(sys.executable).parent / "traceview"
SMALL_REAL = ingest.TRACES / "nsys" / "bolongcheng__assignment2-systems__profile_small_fwd_A100.sqlite"
QUICK_KERNELS = 20_000

BUILD_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import ingest
n = int(sys.argv[3])
ingest.NSYS_KERNELS = n  # build_nsys, _nsys_timeline and _nsys_ranges read this module-level constant
ingest.NSYS_NVTX_RANGES = n // ingest.KERNELS_PER_BLOCK * (1 + ingest.INNER_RANGES_PER_BLOCK)
path, info = ingest.build_nsys(Path(sys.argv[2]), sys.argv[4])
print(json.dumps([str(path), info]))
"""


def log(message: str) -> None:
    print(f"[nsys_compare] {message}", file=sys.stderr, flush=True)


def nsys_dir(workdir: Path, kernels: int) -> Path:
    """Where the export with `kernels` kernels is cached.

    ingest.build_nsys names its file nsys_{kernels // 1M}M_kernels_*.sqlite, so sizes that are not
    whole millions get a directory of their own (the 2 M export stays where ingest.py puts it)."""
    return workdir if kernels % 1_000_000 == 0 else workdir / f"nsys-{kernels}-kernels"


def build_nsys(workdir: Path, kernels: int, builder: str = "generator") -> tuple[Path, dict]:
    """Build (or find) an export with `kernels` kernels through ingest.build_nsys, in a child process.

    Not in this process: a child started by fork + exec inherits the parent's RSS high-water mark in
    its ru_maxrss, so a parent that once held the build's rows would inflate every row."""
    directory = nsys_dir(workdir, kernels)
    directory.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([sys.executable, "-c", BUILD_CHILD, str(BENCH), str(directory), str(kernels), builder],
                         stdout=subprocess.PIPE, check=True, text=True).stdout
    path, info = json.loads(out.strip().splitlines()[-1])
    return Path(path), info


def run(argv: list[str], timeout: float, cwd: Path = REPO, env: dict | None = None, ok: tuple[int, ...] = (0,)) -> dict:
    """Run argv in a fresh process: wall time and that child's peak RSS (os.wait4), like compare.run."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, cwd=cwd, env=env)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            proc.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    rc = os.waitstatus_to_exitcode(status)
    result = {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "rss_mb": usage.ru_maxrss / 1024, "rc": rc, "ok": rc in ok and not killed.is_set(),
              "stdout_tail": stdout[-2000:], "stderr_head": stderr[:2000], "stderr_tail": stderr[-3000:]}
    if killed.is_set():
        result["error"] = f"timed out after {timeout:.0f} s"
    elif rc not in ok:
        result["error"] = (stderr.strip() or stdout.strip())[-3000:]
    return result


# --------------------------------------------------------------------------------------------
# nsys-ai setup
# --------------------------------------------------------------------------------------------


def venv_versions(python: Path) -> dict:
    probe = subprocess.run(
        [str(python), "-c", ("import importlib.metadata as m, platform, json\n"
                             "def v(p):\n try:\n  return m.version(p)\n except m.PackageNotFoundError:\n  return None\n"
                             "print(json.dumps({'nsys-ai': v('nsys-ai'), 'duckdb': v('duckdb'),"
                             " 'sqlite_scanner_pkg': v('duckdb-extension-sqlite-scanner'),"
                             " 'python': platform.python_version()}))")],
        check=False, capture_output=True, text=True)
    return json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr[-500:]}


def prepare_ext_home(venv: Path, home: Path) -> str | None:
    """Put the PyPI sqlite_scanner extension where DuckDB looks for installed extensions (HOME/.duckdb).

    Returns None when ready, else why not."""
    python = venv / "bin" / "python"
    if not python.exists():
        return f"no venv at {venv}"
    found = list(venv.glob("lib/python*/site-packages/duckdb_extension_sqlite_scanner/extensions/v*/"
                           "sqlite_scanner.duckdb_extension"))
    if not found:
        return f"{venv} lacks duckdb-extension-sqlite-scanner"
    source = found[0]
    version = source.parent.name  # v1.5.5
    duck = venv_versions(python).get("duckdb")
    if f"v{duck}" != version:
        return f"{venv}: duckdb {duck} cannot load the {version} sqlite_scanner extension"
    target = home / ".duckdb" / "extensions" / version / "linux_amd64" / source.name
    if not target.exists() or target.stat().st_size != source.stat().st_size:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    return None


def nsysai_env(home: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}  # no LLM can be reached
    if home is not None:
        env["HOME"] = str(home)
    return env


def clear_nsysai_cache(profile: Path) -> None:
    """nsys-ai keeps its Parquet cache in PROFILE.nsys-cache beside the profile (and a .build.lock)."""
    for base in {profile, profile.resolve()}:
        cache = base.with_suffix(".nsys-cache")
        shutil.rmtree(cache, ignore_errors=True)
        Path(str(cache) + ".build.lock").unlink(missing_ok=True)


def profile_facts(path: Path) -> dict:
    """GPU id and the end of the last kernel (seconds, for nsys-ai's required --trim)."""
    con = sqlite3.connect(f"file:{path.resolve().as_posix()}?mode=ro&immutable=1", uri=True)
    try:
        device, end_ns, kernels = con.execute(
            "SELECT min(deviceId), max(\"end\"), count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    finally:
        con.close()
    return {"gpu": device, "trim_end_s": int(end_ns / 1e9) + 1, "kernels": kernels}


# --------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------


def cases_for(profile: Path, label: str, out: Path, args, tools: list[str]) -> list[dict]:
    """The measured commands for one export, in run order (order matters: cold before warm)."""
    facts = profile_facts(profile)
    cases: list[dict] = []

    def add(tool: str, case: str, argv: list[str], **kw) -> None:
        cases.append({"tool": tool, "case": case, "argv": argv, **kw})

    if "traceview" in tools:
        add("traceview", "traceview report (html,json)",
            [str(TRACEVIEW), "report", str(profile), "--format", "html,json", "-o", str(out / f"report_{label}.html")])
        add("traceview", "traceview audit (--json)",
            [str(TRACEVIEW), "audit", str(profile), "--json", str(out / f"audit_{label}.json")], ok=(0, 1))
        cache = out / f"tv-cache-{label}"
        add("traceview", "traceview --cache-dir report, cold (ingest + save)",
            [str(TRACEVIEW), "--cache-dir", str(cache), "report", str(profile), "--format", "html,json",
             "-o", str(out / f"report_cached_{label}.html")], before=lambda c=cache: shutil.rmtree(c, ignore_errors=True))
        add("traceview", "traceview --cache-dir report, warm",
            [str(TRACEVIEW), "--cache-dir", str(cache), "report", str(profile), "--format", "html,json",
             "-o", str(out / f"report_cached_{label}.html")])
        add("traceview", "traceview --cache-dir audit, warm",
            [str(TRACEVIEW), "--cache-dir", str(cache), "audit", str(profile), "--json",
             str(out / f"audit_cached_{label}.json")], ok=(0, 1))
    if "floor" in tools:
        add("floor", "floor: sqlite3 fetchall kernels+runtime+NVTX", [sys.executable, "-c", ingest.SQLITE_ALL_CHILD,
                                                                     str(profile.resolve())])
    if "nsys-ai" in tools:
        # A directory of its own per export: nsys-ai writes PROFILE.nsys-cache beside the profile and
        # .nsys-ai/ (sessions, locks) in the working directory.
        scratch = out / f"nsysai-{label}"
        scratch.mkdir(parents=True, exist_ok=True)
        link = scratch / "profile.sqlite"
        if not link.is_symlink():
            link.symlink_to(profile.resolve())
        trim = ["--gpu", str(facts["gpu"]), "--trim", "0", str(facts["trim_end_s"])]
        stock = args.nsysai_venv / "bin" / "nsys-ai"
        if stock.exists():
            env = nsysai_env(None)
            add("nsys-ai stock", "nsys-ai analyze --format json (stock, offline)",
                [str(stock), "analyze", str(link), "--format", "json", "-o", str(scratch / "analyze_stock.json")],
                cwd=scratch, env=env, before=lambda p=link: clear_nsysai_cache(p), timeout=args.nsysai_timeout)
        else:
            log(f"no nsys-ai at {stock}; skipping the stock nsys-ai cases")
        ext = args.nsysai_ext_venv / "bin" / "nsys-ai"
        why = prepare_ext_home(args.nsysai_ext_venv, args.nsysai_home)
        if why is None:
            env = nsysai_env(args.nsysai_home)
            add("nsys-ai ext", "nsys-ai analyze --format json, cold (builds its cache)",
                [str(ext), "analyze", str(link), "--format", "json", "-o", str(scratch / "analyze_cold.json")],
                cwd=scratch, env=env, before=lambda p=link: clear_nsysai_cache(p), timeout=args.nsysai_timeout)
            add("nsys-ai ext", "nsys-ai analyze --format json, warm",
                [str(ext), "analyze", str(link), "--format", "json", "-o", str(scratch / "analyze_warm.json")],
                cwd=scratch, env=env, timeout=args.nsysai_timeout)
            add("nsys-ai ext", "nsys-ai report (markdown), warm",
                [str(ext), "report", str(link), *trim, "-o", str(scratch / "report_warm.md")],
                cwd=scratch, env=env, timeout=args.nsysai_timeout)
            add("nsys-ai ext", "nsys-ai summary, warm", [str(ext), "summary", str(link)],
                cwd=scratch, env=env, timeout=args.nsysai_timeout)
        else:
            log(f"nsys-ai with sqlite_scanner not available: {why}")
    return cases


def check_output(case: dict, result: dict) -> str:
    """A one-line sanity note: what the tool said it found."""
    try:
        argv = case["argv"]
        if case["tool"] == "nsys-ai stock" and "falling back to sqlite3" in result["stderr_head"] + result["stderr_tail"]:
            prefix = "DuckDB could not attach the export (sqlite_scanner download failed); nsys-ai fell back to sqlite3; "
        else:
            prefix = ""
        if "-o" in argv and argv[argv.index("-o") + 1].endswith(".json") and case["tool"].startswith("nsys-ai"):
            doc = json.loads(Path(argv[argv.index("-o") + 1]).read_text())
            return prefix + f"{len(doc.get('findings', []))} findings, {len(doc.get('skipped', []))} skipped"
        if "--json" in argv:
            doc = json.loads(Path(argv[argv.index("--json") + 1]).read_text())
            row = doc["rows"][0]
            if row.get("status") != "ok":
                return f"audit row: {row.get('status')}: {row.get('error', '')[:100]}"
            return f"{row['kernels']:,} kernels, {len(row['findings'])} findings"
        if case["tool"] == "floor":
            counts = json.loads(result["stdout_tail"].strip().splitlines()[-1])["counts"]
            return f"{sum(counts.values()):,} rows"
        if argv[1:2] == ["summary"] or "report" in argv[1:2]:
            for line in (result["stdout_tail"] + result["stderr_tail"]).splitlines():
                if "Kernels:" in line or "Wrote" in line or "written" in line:
                    return line.strip()[:100]
    except Exception as exc:  # noqa: BLE001 - a note, never a failure
        return f"(no check: {type(exc).__name__})"
    return ""


def measure(cases: list[dict], timeout: float) -> list[dict]:
    rows = []
    for case in cases:
        if case.get("before"):
            case["before"]()
        log(f"{case['case']} ...")
        r = run(case["argv"], case.get("timeout", timeout), cwd=case.get("cwd", REPO), env=case.get("env"),
                ok=case.get("ok", (0,)))
        r["note"] = check_output(case, r) if r["ok"] else ""
        status = "ok" if r["ok"] else f"FAILED rc={r['rc']}: {(r.get('error') or '')[-400:]}"
        log(f"{case['case']}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, {r['rss_mb']:,.0f} MB peak RSS, "
            f"{status} {r['note']}")
        rows.append({k: v for k, v in case.items() if k not in ("before", "env")} | r)
    return rows


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------


def git_state() -> str:
    """The commit measured, and any uncommitted changes under src/ (read-only git commands)."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=REPO, check=False, capture_output=True, text=True).stdout

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = [line[3:] for line in git("status", "--porcelain", "--", "src").splitlines()]
    return f"commit {head}" + (f" plus uncommitted changes to {', '.join(dirty)}" if dirty else "")


def versions(args) -> dict:
    env = ingest.environment()
    env["traceview"] = subprocess.run(
        [sys.executable, "-c", "import importlib.metadata as m; print(m.version('traceview'))"],
        check=False, capture_output=True, text=True).stdout.strip()
    for key, venv in (("nsysai_stock", args.nsysai_venv), ("nsysai_ext", args.nsysai_ext_venv)):
        python = venv / "bin" / "python"
        env[key] = venv_versions(python) if python.exists() else {"error": f"no venv at {venv}"}
    return env


def short(text: str, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    return (text[:limit] + "…") if len(text) > limit else text


def command_text(argv: list[str]) -> str:
    """argv with paths shortened to their names (the venv shows in the case name)."""
    return " ".join(Path(a).name if a.startswith("/") else a for a in argv)


def markdown(sections: list[tuple[str, dict, list[dict]]], env: dict) -> str:
    stock, ext = env.get("nsysai_stock", {}), env.get("nsysai_ext", {})
    lines = [
        (f"Machine: {env['cores']} cores ({env['cpu']}), {env['mem_gib']:.1f} GiB RAM, {env['os']}; "
        f"traceview {env['traceview']} ({env['git']}), Python {env['python']}, duckdb {env['duckdb']}, "
        f"SQLite {env['sqlite']}; "
        f"nsys-ai {stock.get('nsys-ai', '?')} stock venv (duckdb {stock.get('duckdb', '?')}, no sqlite_scanner "
        f"extension, offline); nsys-ai {ext.get('nsys-ai', '?')} ext venv (duckdb {ext.get('duckdb', '?')} + "
        f"duckdb-extension-sqlite-scanner {ext.get('sqlite_scanner_pkg', '?')} from PyPI, installed into a private "
        f"DuckDB home)."),
        "",
        (f"Load average (1 min) when the run started: {env.get('load_start', float('nan')):.2f}, when it ended: "
        f"{env.get('load_end', float('nan')):.2f} (other work shares this machine)."),
        "",
        ("Each row is one fresh process, run once, in the order shown (cold rows delete the tool's cache first; "
        "warm rows reuse what the row before built). Wall = the whole process; peak RSS = `ru_maxrss` from "
        "`os.wait4`; CPU = user + system seconds of the process and the children it reaped (less "
        "sensitive than wall to other work on the machine)."),
    ]
    for title, info, rows in sections:
        c = info.get("counts", {})
        lines += ["", f"### {title}", ""]
        if c:
            lines.append(f"Input: {info['bytes'] / 1e6:,.0f} MB SQLite; {c.get('CUPTI_ACTIVITY_KIND_KERNEL', 0):,} kernels, "
                         f"{c.get('CUPTI_ACTIVITY_KIND_RUNTIME', 0):,} runtime rows, {c.get('NVTX_EVENTS', 0):,} NVTX rows "
                         f"({info.get('builder', 'real export')}).")
        else:
            lines.append(f"Input: {info['bytes'] / 1e6:,.1f} MB SQLite ({info.get('builder', 'real export')}).")
        base = next((r for r in rows if r["case"].startswith("traceview report (") and r["ok"]), None)
        lines += ["", ("| case | command | wall s | CPU s | peak RSS MB | wall vs traceview report | CPU vs traceview report "
                   "| result |"),
                  "|---|---|---:|---:|---:|---:|---:|---|"]
        for r in rows:
            cmd = f"`{command_text(r['argv'])}`" if r["tool"] != "floor" else "`python -c <sqlite3 fetchall>`"
            if not r["ok"]:
                lines.append(f"| {r['case']} | {cmd} | failed ({r['wall_s']:.1f} s) | {r['cpu_s']:.1f} | {r['rss_mb']:,.0f} | | | "
                             f"rc {r['rc']}: `{short(r.get('error', ''), 200)}` |")
                continue
            ratio = f"{r['wall_s'] / base['wall_s']:.2f}×" if base else "n/a"
            cpu_ratio = f"{r['cpu_s'] / base['cpu_s']:.2f}×" if base else "n/a"
            lines.append(f"| {r['case']} | {cmd} | {r['wall_s']:.2f} | {r['cpu_s']:.2f} | {r['rss_mb']:,.0f} | {ratio} | {cpu_ratio} | {short(r['note'], 160)} |")
        for r in rows:
            text = r.get("stderr_head", "") + r.get("stderr_tail", "")
            if r["tool"] == "nsys-ai stock" and "DuckDB unavailable" in text:
                start = text.index("DuckDB unavailable")
                end = text.find("falling back to sqlite3.", start)
                message = text[start:end + len("falling back to sqlite3.")] if end > 0 else text[start:start + 600]
                lines += ["", f"Stock nsys-ai stderr (offline), {r['case']}: `{short(message, 1500)}`"]
                break
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--workdir", type=Path, default=Path("/tmp/traceview-bench"))
    p.add_argument("--kernels", type=int, default=ingest.NSYS_KERNELS,
                   help="kernels in the generated export (default 2,000,000, the one bench/ingest.py builds)")
    p.add_argument("--quick", action="store_true", help=f"--kernels {QUICK_KERNELS:,}: check the harness end to end")
    p.add_argument("--no-real", action="store_true", help=f"skip the small real export ({SMALL_REAL.name}) run first")
    p.add_argument("--only", choices=["traceview", "floor", "nsys-ai"], action="append",
                   help="run only these tools (repeatable); default all")
    p.add_argument("--nsysai-venv", type=Path, default=Path("/tmp/nsysai-venv"), help="venv with stock nsys-ai")
    p.add_argument("--nsysai-ext-venv", type=Path, default=Path("/tmp/nsysai-ext-venv"),
                   help="venv with nsys-ai + duckdb==1.5.5 + duckdb-extension-sqlite-scanner==1.5.5")
    p.add_argument("--nsysai-home", type=Path, default=Path("/tmp/nsysai-home"),
                   help="HOME for the ext venv's nsys-ai (its DuckDB extension directory lives here)")
    p.add_argument("--timeout", type=float, default=1800, help="per child, seconds")
    p.add_argument("--nsysai-timeout", type=float, default=600, help="per nsys-ai child, seconds")
    p.add_argument("--output", type=Path, help="also write the Markdown and raw JSON (FILE with .json suffix)")
    p.add_argument("--from-json", type=Path, help="measure nothing: print the Markdown of an earlier run's raw JSON")
    args = p.parse_args(argv)
    if args.from_json:
        raw = json.loads(args.from_json.read_text())
        print(markdown([(x["section"], x["info"], x["rows"]) for x in raw["sections"]], raw["env"]))
        return 0
    if args.quick:
        args.kernels = QUICK_KERNELS
    tools = args.only or ["traceview", "floor", "nsys-ai"]
    load_start, git_start = os.getloadavg()[0], git_state()
    out = args.workdir / "nsys-compare-out"
    out.mkdir(parents=True, exist_ok=True)

    sections = []
    if not args.no_real:
        if SMALL_REAL.exists():
            # A copy: ../shared is read-only and nsys-ai writes its cache beside the profile.
            real = out / "real" / SMALL_REAL.name
            if not real.exists():
                real.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(SMALL_REAL, real)
            info = {"bytes": real.stat().st_size, "builder": f"real export ../shared/traces/nsys/{SMALL_REAL.name}"}
            sections.append((f"Small real export ({SMALL_REAL.name})", info,
                             measure(cases_for(real, "real", out, args, tools), args.timeout)))
        else:
            log(f"missing {SMALL_REAL}; skipping the real export")
    profile, info = build_nsys(args.workdir, args.kernels)
    log(f"input {profile} ({info['bytes'] / 1e6:,.0f} MB)")
    sections.append((f"Generated export, {args.kernels:,} kernels ({profile.name})", info,
                     measure(cases_for(profile, f"{args.kernels}", out, args, tools), args.timeout)))

    env = versions(args)
    env["load_start"], env["load_end"] = load_start, os.getloadavg()[0]
    env["git"] = git_start if git_start == git_state() else f"{git_start} at the start; {git_state()} at the end"
    text = markdown(sections, env)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        raw = [{"section": title, "info": info, "rows": rows} for title, info, rows in sections]
        args.output.with_suffix(".json").write_text(json.dumps({"env": env, "sections": raw}, indent=1, default=str))
        log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
