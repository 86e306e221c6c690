"""The store where it lives: read-only media, a read-only store file, a full disk, a store locked by
another writer, a failed first import, Ctrl-C at the commit, and identifiers that need quoting.

Everything runs for real: `python -m tracelab` subprocesses, read-only bind mounts and small tmpfs
mounts (the tests run as root here, and root ignores file permissions, so chmod proves nothing), a
second SQLite connection holding the write lock, and a real SIGINT sent while the import is paused
right before or right after its COMMIT (a test-only environment hook in tracelab/store/store.py).
Without the privileges to mount, the mount tests skip and say why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.errors import StoreError
from tracelab.store import Store

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "tests" / "data" / "torch_mixed_small"  # a real recorded Kineto run (970 events)


def _parsed_events() -> int:
    from tracelab.io import load_trace

    return len(load_trace(TRACE).events)


TRACE_EVENTS = _parsed_events()  # what the parser makes of it, without any store


def cli(*args: str, db: Path | None = None, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "TRACELAB_STORE_TIMEOUT_S": "1", **env}
    full_env.pop("TRACELAB_DEBUG", None)
    if db is not None:
        full_env["TRACELAB_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "-m", "tracelab", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=timeout,
        check=False,
    )


def one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return lines[0]


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def mounts():
    """mount helpers that undo themselves: read_only(src, at) and tmpfs(at, size)."""
    done: list[Path] = []

    class Mounts:
        def read_only(self, src: Path, at: Path) -> Path:
            if at.suffix or src.is_file():
                at.touch()
            else:
                at.mkdir(exist_ok=True)
            if os.geteuid() != 0 or not _mount("--bind", str(src), str(at)):
                pytest.skip("needs root and mount --bind to make read-only media (root ignores chmod)")
            done.append(at)
            if not _mount("-o", "remount,ro,bind", str(at)):
                pytest.skip("cannot remount a bind mount read-only here")
            return at

        def tmpfs(self, at: Path, size: str) -> Path:
            at.mkdir(exist_ok=True)
            if os.geteuid() != 0 or not _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(at)):
                pytest.skip("needs root and tmpfs mounts to make a full disk")
            done.append(at)
            return at

    yield Mounts()
    for at in reversed(done):
        if subprocess.run(["umount", str(at)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(at)], capture_output=True, check=False)  # still open


def imported_store(directory: Path) -> tuple[Path, str, dict]:
    """A store holding TRACE, and the analysis document of that run taken while it was writable."""
    directory.mkdir(exist_ok=True)
    db = directory / "t.db"
    imp = cli("import", str(TRACE), db=db)
    assert imp.returncode == 0, imp.stderr
    rid = imp.stdout.strip()
    doc = cli("analyze", rid, "--json", db=db)
    assert doc.returncode == 0, doc.stderr
    assert sorted(p.name for p in directory.iterdir()) == ["t.db"]  # the writer removed its WAL files
    return db, rid, json.loads(doc.stdout)


# ---- reading on read-only media -------------------------------------------------------------------


def test_read_only_media_runs_analyze_and_serve(tmp_path, mounts):
    _db, rid, before = imported_store(tmp_path / "src")
    ro = mounts.read_only(tmp_path / "src", tmp_path / "ro")
    assert sorted(p.name for p in ro.iterdir()) == ["t.db"]
    with pytest.raises(OSError):
        (ro / "probe").write_text("x")  # really read-only, even for root

    runs = cli("runs", "--json", db=ro / "t.db")
    assert runs.returncode == 0, runs.stderr
    listed = json.loads(runs.stdout)
    assert [r["id"] for r in listed] == [rid]
    assert listed[0]["events"] == TRACE_EVENTS

    after = cli("analyze", rid, "--json", db=ro / "t.db")
    assert after.returncode == 0, after.stderr
    assert json.loads(after.stdout) == before  # the same analysis as from the writable store

    # `serve` opens the store as a writer would (uploads write); on read-only media it reads anyway
    store = Store(ro / "t.db")
    assert store.read_only and [r.id for r in store.runs()] == [rid]
    assert len(store.load(rid).events) == TRACE_EVENTS
    store.close()
    assert sorted(p.name for p in ro.iterdir()) == ["t.db"]


def test_reading_on_writable_media_leaves_no_side_files(tmp_path):
    db, rid, _ = imported_store(tmp_path / "src")
    assert cli("runs", db=db).returncode == 0
    assert cli("analyze", rid, db=db).returncode == 0
    assert sorted(p.name for p in db.parent.iterdir()) == ["t.db"]


def test_import_into_store_on_read_only_media(tmp_path, mounts):
    _db, rid, _ = imported_store(tmp_path / "src")
    ro = mounts.read_only(tmp_path / "src", tmp_path / "ro")
    proc = cli("import", str(TRACE), "--replace", db=ro / "t.db")
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line.startswith(f"error: {ro / 't.db'}: ") and "read-only" in line
    # a trace already in the store still answers with its id (that needs no write)
    again = cli("import", str(TRACE), db=ro / "t.db")
    assert again.returncode == 0 and again.stdout.strip() == rid
    delete = cli("delete", rid, db=ro / "t.db")
    assert delete.returncode == 2 and "read-only" in one_error_line(delete)


def test_import_into_read_only_store_file(tmp_path, mounts):
    """The directory is writable, the store file is not (a read-only bind mount of the file)."""
    db, rid, _ = imported_store(tmp_path / "src")
    work = tmp_path / "work"
    work.mkdir()
    ro_file = mounts.read_only(db, work / "t.db")
    proc = cli("import", str(TRACE), "--replace", db=ro_file)
    assert proc.returncode == 2
    assert "read-only" in one_error_line(proc) and str(ro_file) in proc.stderr
    runs = cli("runs", "--json", db=ro_file)
    assert runs.returncode == 0 and [r["id"] for r in json.loads(runs.stdout)] == [rid]
    assert sorted(p.name for p in work.iterdir()) == ["t.db"]  # no -wal / -shm created beside it


# ---- full disk ------------------------------------------------------------------------------------


def _fill(directory: Path, leave_bytes: int) -> None:
    """Fill the tmpfs at directory until only about leave_bytes are free."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    with open(directory / "filler", "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


def test_full_disk_new_store(tmp_path, mounts):
    disk = mounts.tmpfs(tmp_path / "disk", "1m")
    _fill(disk, 64 * 1024)  # the store of TRACE takes 92 KiB (measured), so the import cannot fit
    proc = cli("import", str(TRACE), db=disk / "t.db")
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line.startswith(f"error: {disk / 't.db'}: ") and "disk is full" in line
    assert sorted(p.name for p in disk.iterdir()) == ["filler"]  # no empty store left behind


def test_full_disk_existing_store_is_unchanged(tmp_path, mounts):
    disk = mounts.tmpfs(tmp_path / "disk", "2m")
    db = disk / "t.db"
    first = cli("import", str(TRACE / "trace.json.gz"), db=db)
    assert first.returncode == 0, first.stderr
    rid = first.stdout.strip()
    _fill(disk, 48 * 1024)  # room to open the store and start, not for the ~90 KiB of the run
    proc = cli("import", str(TRACE), "--replace", db=db)
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert line.startswith(f"error: {db}: ") and ("disk is full" in line or "full or failing disk" in line)
    (disk / "filler").unlink()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert [r[0] for r in conn.execute("SELECT id FROM runs")] == [rid]
    finally:
        conn.close()
    assert [r["id"] for r in json.loads(cli("runs", "--json", db=db).stdout)] == [rid]


# ---- locked ---------------------------------------------------------------------------------------


def test_locked_store(tmp_path):
    db, rid, _ = imported_store(tmp_path / "src")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer holds the store
    try:
        t0 = time.monotonic()
        proc = cli("import", str(TRACE), "--replace", db=db, TRACELAB_STORE_TIMEOUT_S="1")
        waited = time.monotonic() - t0
        assert proc.returncode == 2
        line = one_error_line(proc)
        assert line.startswith(f"error: {db}: ") and "locked by another process" in line
        assert waited < 30  # the 1 s busy timeout, plus start-up and parsing
        runs = cli("runs", "--json", db=db)  # readers are not blocked by a writer (WAL)
        assert [r["id"] for r in json.loads(runs.stdout)] == [rid]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    again = cli("import", str(TRACE), "--replace", db=db)
    assert again.returncode == 0, again.stderr


# ---- failed first import --------------------------------------------------------------------------


def test_failed_first_import_leaves_no_store(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    db = tmp_path / "new" / "t.db"
    proc = cli("import", str(bad), db=db)
    assert proc.returncode == 2
    assert "bad.json" in one_error_line(proc)
    assert not db.exists() and not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()


def test_failed_import_into_existing_store_keeps_it(tmp_path):
    db, rid, _ = imported_store(tmp_path / "src")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    proc = cli("import", str(bad), db=db)
    assert proc.returncode == 2
    assert db.exists() and [r["id"] for r in json.loads(cli("runs", "--json", db=db).stdout)] == [rid]


# ---- Ctrl-C at the commit -------------------------------------------------------------------------


_WITH_CTRL_C = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('tracelab', run_name='__main__')"
)


def _interrupt_at(stage: str, db: Path, marker: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "TRACELAB_DB": str(db),
        "_TRACELAB_TEST_PAUSE_AT": stage,
        "_TRACELAB_TEST_PAUSE_FILE": str(marker),
    }
    proc = subprocess.Popen(
        # `python -m tracelab import TRACE`, with Python's Ctrl-C handler put back first: a shell starts a
        # background job (`pytest &`, a CI step without a terminal) with SIGINT ignored, an ignored signal
        # stays ignored across exec, and Python then installs no KeyboardInterrupt handler, so the Ctrl-C
        # below would be lost. The command then runs as it does in a terminal.
        [sys.executable, "-c", _WITH_CTRL_C, "import", str(TRACE)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the import never reached the commit"
        time.sleep(0.05)
    assert marker.read_text() == stage
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigint_right_after_commit_reports_the_stored_run(tmp_path):
    db = tmp_path / "t.db"
    proc = _interrupt_at("after-commit", db, tmp_path / "marker")
    assert proc.returncode == 130
    conn = sqlite3.connect(db)
    stored = conn.execute("SELECT id, events FROM runs").fetchall()
    conn.close()
    assert len(stored) == 1
    rid, events = stored[0]
    assert proc.stdout.strip() == rid  # the id is printed, as for a normal import
    assert f"run {rid} had already been stored" in proc.stderr
    assert events == TRACE_EVENTS  # complete, not partial


def test_sigint_reaches_the_import_when_the_test_runs_in_the_background(tmp_path):
    """Run as a background job, pytest (and what it starts) has SIGINT ignored: the Ctrl-C still lands."""
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc = _interrupt_at("before-commit", tmp_path / "t.db", tmp_path / "marker")
    finally:
        signal.signal(signal.SIGINT, before)
    assert proc.returncode == 130 and "rolled back" in proc.stderr


def test_sigint_right_before_commit_stores_nothing(tmp_path):
    db = tmp_path / "t.db"
    proc = _interrupt_at("before-commit", db, tmp_path / "marker")
    assert proc.returncode == 130
    assert proc.stdout.strip() == ""
    assert "rolled back" in proc.stderr and "stored" not in proc.stderr.replace("rolled back", "")
    assert not db.exists()  # it was a new store: nothing stored, nothing left


# ---- quoting ----------------------------------------------------------------------------------------


def test_hostile_column_names_are_quoted(tmp_path):
    """sm_blocks keeps extra columns by name: a name built to break out of an identifier is stored as
    a column of that exact name and the runs table survives."""
    from test_app_callbacks import synthetic_timeline

    tl = synthetic_timeline(source="quoted")
    hostile = 'x" INTEGER); DROP TABLE runs; --'
    blocks = pd.DataFrame(
        {
            "rank": np.zeros(3, np.int32),
            "device": np.zeros(3, np.int32),
            "green_context": np.full(3, -1, np.int64),
            "sm": np.arange(3, dtype=np.int32),
            "start": np.array([10, 20, 30], np.int64),
            "end": np.array([15, 25, 35], np.int64),
            "name": np.zeros(3, np.int32),
            hostile: np.array([7, 8, 9], np.int64),
        }
    )
    # integer columns go into one columnar blob (their names in the run's metadata); a float column
    # keeps the blocks as rows of the sm_blocks table, where the hostile name becomes a column
    for i, frame in enumerate((blocks, blocks.assign(occupancy=np.array([0.5, 0.25, 1.0])))):
        tl_i = dataclasses.replace(tl, sm_blocks=frame)
        store = Store(tmp_path / f"t{i}.db")
        rid = store.import_timeline(tl_i, source_path="q", fingerprint="q" * 64)
        back = store.load(rid).sm_blocks
        assert list(back[hostile]) == [7, 8, 9]
        assert [r.id for r in store.runs()] == [rid]
        cols = [r[1] for r in store.conn.execute("PRAGMA table_info(sm_blocks)")]
        assert (hostile in cols) == (i == 1)


def test_store_error_is_bad_input_naming_the_file(tmp_path, mounts):
    _db, _, _ = imported_store(tmp_path / "src")
    ro = mounts.read_only(tmp_path / "src", tmp_path / "ro")
    store = Store(ro / "t.db")
    try:
        with pytest.raises(StoreError) as info:
            store.delete_run(store.runs()[0].id)
    finally:
        store.close()
    assert str(info.value).startswith(f"{ro / 't.db'}: ") and info.value.exit_code == 2


def test_read_only_media_with_a_crashed_writers_wal(tmp_path, mounts):
    """A store copied (or mounted read-only) while a writer had it open: the last import lives only
    in the -wal file. Reading it read-only must see that run (through the WAL, not as immutable)."""
    import shutil

    from test_app_callbacks import synthetic_timeline

    live = tmp_path / "live"
    live.mkdir()
    writer = Store(live / "t.db")
    reader = Store(live / "t.db", read_only=True)  # an open reader keeps the import in the WAL
    rid = writer.import_timeline(synthetic_timeline(source="wal"), source_path="w", fingerprint="w" * 64)
    assert Path(f"{live / 't.db'}-wal").stat().st_size > 0  # the run is in the WAL, not yet in t.db
    snap = tmp_path / "snap"
    snap.mkdir()
    for suffix in ("", "-wal", "-shm"):
        shutil.copy2(f"{live / 't.db'}{suffix}", f"{snap / 't.db'}{suffix}")
    writer.close()
    reader.close()
    ro = mounts.read_only(snap, tmp_path / "ro")
    runs = cli("runs", "--json", db=ro / "t.db")
    assert runs.returncode == 0, runs.stderr
    assert [r["id"] for r in json.loads(runs.stdout)] == [rid]
    assert sorted(p.name for p in ro.iterdir()) == ["t.db", "t.db-shm", "t.db-wal"]


def test_cli_last_resort_maps_store_side_sqlite_errors_only(tmp_path):
    """An environment SQLite error that escaped the Store still ends as exit 2 naming the store; a
    SQLite error that means a bug (no such table) stays exit 1."""
    import click

    from tracelab.cli import _store_error, main

    db = tmp_path / "t.db"
    ctx = click.Context(main, obj={"db": str(db)})
    full = _store_error(ctx, sqlite3.OperationalError("database or disk is full"))
    assert full is not None and full.exit_code == 2
    assert str(full) == f"{db}: the disk is full (SQLite: database or disk is full)"
    locked = _store_error(ctx, sqlite3.OperationalError("database is locked"))
    assert locked is not None and "locked by another process" in str(locked)
    assert _store_error(ctx, sqlite3.OperationalError("no such table: runz")) is None
    assert _store_error(ctx, ValueError("x")) is None
    enospc = _store_error(ctx, OSError(28, "No space left on device", str(tmp_path / "r.html")))
    assert str(enospc) == f"{tmp_path / 'r.html'}: No space left on device"
