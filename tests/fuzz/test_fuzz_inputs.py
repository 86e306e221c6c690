"""Fuzz suite (issue 11): >= 500 seeded mutations of the bundled fixtures go through the real CLI.

For every case: `tracelab import FILE` exits 0 or 2 (never 1: an internal error), and with 2 prints
exactly one line on stderr naming the file; it finishes within a time bound proportional to the size;
a failed import leaves the store as it was; nothing is created, changed or removed in the input's
directory. A case that imports is then analysed (`analyze RUN --json`) and must exit 0. Most cases run
in-process (click's CliRunner); a handful run as real subprocesses.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from fuzz_cases import Case, all_cases

from tracelab.cli import main

CASES = all_cases()
SECONDS_BASE = 10.0  # generous: the CI machine is small and shared
SECONDS_PER_MB = 4.0


def test_the_suite_has_at_least_500_cases():
    assert len(CASES) >= 500
    assert len({c.name for c in CASES}) == len(CASES)


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file and folder under `directory` (recursively) with its content hash."""
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(directory.rglob("*"))
    }


def _store_state(db: Path) -> tuple:
    """What a failed import must not change: the runs and the number of event chunks."""
    if not db.exists():
        return ("absent",)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        runs = tuple(r[0] for r in conn.execute("SELECT id FROM runs ORDER BY id"))
        chunks = conn.execute("SELECT count(*) FROM events").fetchone()[0]
    finally:
        conn.close()
    return runs, chunks


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("store") / "fuzz.db"
    # a store with one run already in it, so "unchanged" means something
    from fuzz_cases import kineto_cases

    seed_dir = tmp_path_factory.mktemp("seed")
    path = kineto_cases()[0].write(seed_dir)
    res = CliRunner().invoke(main, ["--db", str(db), "import", str(path)], catch_exceptions=False)
    assert res.exit_code == 0, res.stderr
    return db


def _check(case: Case, tmp_path: Path, store: Path) -> int:
    case_dir = tmp_path / "in"
    case_dir.mkdir()
    path = case.write(case_dir)
    before_dir = _snapshot(case_dir)
    before_store = _store_state(store)
    size_mb = path.stat().st_size / 1e6
    t0 = time.monotonic()
    res = CliRunner().invoke(main, ["--db", str(store), "import", str(path)])
    elapsed = time.monotonic() - t0
    err_lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert res.exit_code in (0, 2), f"{case.name}: exit {res.exit_code}: {res.stderr} {res.exception!r}"
    assert elapsed < SECONDS_BASE + SECONDS_PER_MB * size_mb, f"{case.name}: {elapsed:.1f} s"
    assert _snapshot(case_dir) == before_dir, f"{case.name}: the input directory changed"
    if res.exit_code == 2:
        assert len(err_lines) == 1, f"{case.name}: {res.stderr!r}"
        assert path.name in err_lines[0], err_lines[0]
        assert _store_state(store) == before_store, f"{case.name}: a failed import changed the store"
        return 2
    run_id = res.stdout.split()[0]
    res = CliRunner().invoke(main, ["--db", str(store), "analyze", run_id, "--json"])
    assert res.exit_code == 0, f"{case.name}: analyze exit {res.exit_code}: {res.stderr} {res.exception!r}"
    doc = json.loads(res.stdout)
    for dev in doc["devices"]:
        assert 0 <= dev["busy_ns"] <= dev["span_ns"] < 2**63
        assert dev["idle_ns"] == dev["span_ns"] - dev["busy_ns"]
    assert _snapshot(case_dir) == before_dir, f"{case.name}: analyze changed the input directory"
    return 0


# mutations that keep the trace valid (or hostile only in form): these must import, not be refused
MUST_IMPORT = {
    "kineto-base",
    "kineto-enc-bom",
    "kineto-enc-ws-10",
    "kineto-enc-ws-64",
    "kineto-enc-ws-100k",
    "kineto-enc-ws-between",
    "kineto-enc-crlf",
    "kineto-enc-gzip",
    "kineto-enc-gzip-ws-bomb",
    "kineto-enc-zstd",
    "kineto-enc-nested-keys-20k",
    "kineto-enc-key-in-string",
    "kineto-enc-bare-array",
    "kineto-enc-bidi-names",
    "kineto-enc-big-name",
    "nsys-base",
    "nsys-gzip",
    "nsys-schema-wal-mode",
    "nsys-schema-view-unrelated",
    "nsys-schema-quoted-pdl-column",
    "nsys-schema-sparse-rowids",
    "nsys-schema-bad-utf8-table-name",
    "nsys-schema-stringids-bad-utf8",
    "nsys-schema-enum-huge-id",
    "nsys-schema-gpu-huge-sms",
    "nsys-schema-gpu-duplicated",
    "nsys-schema-kernel-end-before-start",
    "nsys-schema-kernel-huge-duration",
    "nsys-schema-drop-runtime",
    "rundir-base",
    "rundir-meta-traversal",
}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fuzz_case(case: Case, tmp_path: Path, store: Path) -> None:
    exit_code = _check(case, tmp_path, store)
    if case.name in MUST_IMPORT:
        assert exit_code == 0, f"{case.name} was refused"


SUBPROCESS_CASES = [
    "kineto-enc-gzip-ws-bomb",
    "kineto-utf8-name",
    "kineto-deep-args-5000",
    "nsys-schema-view-kernel-recursive",
    "nsys-schema-wal-mode",
    "nsys-schema-kernel-start-null-all",
]


@pytest.mark.parametrize("name", SUBPROCESS_CASES)
def test_fuzz_case_in_a_real_process(name: str, tmp_path: Path) -> None:
    """The same checks through a real `python -m tracelab` process (its own stderr, exit status and
    signal handling), into a fresh store."""
    case = next(c for c in CASES if c.name == name)
    case_dir = tmp_path / "in"
    case_dir.mkdir()
    path = case.write(case_dir)
    before = _snapshot(case_dir)
    db = tmp_path / "store" / "t.db"
    db.parent.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("TRACELAB_DEBUG", None)
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tracelab", "--db", str(db), "import", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    elapsed = time.monotonic() - t0
    assert proc.returncode in (0, 2), proc.stderr
    assert elapsed < 20 + SECONDS_PER_MB * path.stat().st_size / 1e6
    assert _snapshot(case_dir) == before
    if proc.returncode == 2:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and path.name in lines[0], proc.stderr
