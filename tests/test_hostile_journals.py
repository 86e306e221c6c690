"""Issue 30, class 1: uncommitted SQLite data. A writer killed (or still holding its transaction) after
SQLite spilled its uncommitted pages into the file leaves a hot `-journal`; the file alone then holds
data that was never committed. Exports are read from a private copy rolled back with that journal (and
a note says so); a store on read-only media likewise. Input files and journals stay byte-identical."""

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
from hostile_util import cli, nsys_copy

from tracelab.io import load_trace

KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"

# a writer that changes every kernel's end by +1 s, pads the file so SQLite must spill its dirty pages
# into the database file (cache_size=2), then dies without committing or rolling back
_KILLED_WRITER = r"""
import os, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=DELETE")
c.execute("PRAGMA cache_size=2")
c.execute("BEGIN")
c.execute(sys.argv[2])
c.execute("CREATE TABLE pad(x)")
c.execute("INSERT INTO pad SELECT randomblob(4000) FROM (SELECT 1 FROM sqlite_master, sqlite_master, sqlite_master) LIMIT 400")
os._exit(0)
"""


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def _kill_mid_transaction(db: Path, statement: str) -> None:
    subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(db), statement], check=True)
    assert Path(f"{db}-journal").stat().st_size > 0  # the hot journal a killed writer leaves


def _committed(db: Path) -> tuple[int, int, int]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f'SELECT count(*), min(start), max("end") FROM {KERNELS}').fetchone()
    finally:
        conn.close()


@pytest.fixture
def hot_export(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    p = nsys_copy(d / "t.sqlite")
    committed = _committed(p)  # read before the writer starts: the truth
    _kill_mid_transaction(p, f'UPDATE {KERNELS} SET "end" = "end" + 1000000000')
    return p, committed


def test_hot_journal_export_reads_the_committed_state_with_a_note(hot_export):
    p, (n, lo, hi) = hot_export
    assert n > 0
    # what an immutable reader of the file alone sees: not the committed state
    raw = sqlite3.connect(p.absolute().as_uri() + "?immutable=1", uri=True)
    try:
        try:
            seen = raw.execute(f'SELECT max("end") FROM {KERNELS}').fetchone()[0]
            assert seen != hi
        except sqlite3.DatabaseError:
            pass  # or the spilled pages make it unreadable
    finally:
        raw.close()
    before = _digest(p.parent)
    t0 = time.monotonic()
    tl = load_trace(p)
    assert time.monotonic() - t0 < 10 + 4 * p.stat().st_size / 1e6
    k = tl.events[tl.events["kind"] == 0]
    assert (len(k), int(k["start"].min()), int(k["end"].max())) == (n, lo, hi)
    assert any("t.sqlite-journal" in note and "uncommitted" in note for note in tl.meta.notes)
    assert _digest(p.parent) == before  # export and journal untouched, nothing created beside them


def test_hot_journal_export_through_the_cli(tmp_path, hot_export):
    p, _ = hot_export
    before = _digest(p.parent)
    res = cli(tmp_path / "s.db", "analyze", str(p), "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert any("t.sqlite-journal" in note for note in doc["notes"])
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    assert _digest(p.parent) == before


def test_cold_persist_journal_is_not_rolled_back(tmp_path):
    """journal_mode=PERSIST leaves a journal whose header is zeroed after each commit: not hot."""
    d = tmp_path / "in"
    d.mkdir()
    p = nsys_copy(d / "t.sqlite")
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA journal_mode=PERSIST")
    conn.execute(f'UPDATE {KERNELS} SET "end" = "end" + 5')
    conn.commit()
    conn.close()
    j = Path(f"{p}-journal")
    assert j.stat().st_size > 0 and j.read_bytes()[:1] == b"\x00"
    hi = _committed(p)[2]
    before = _digest(d)
    tl = load_trace(p)
    assert int(tl.events["end"][tl.events["kind"] == 0].max()) == hi
    assert not any("journal" in note for note in tl.meta.notes)
    assert _digest(d) == before


def test_unrecoverable_hot_journal_is_one_line(tmp_path):
    """A journal that SQLite cannot roll back (garbage after a valid first byte): refused, or read with
    the note; never exit 1, never a change to either file."""
    d = tmp_path / "in"
    d.mkdir()
    p = nsys_copy(d / "t.sqlite")
    Path(f"{p}-journal").write_bytes(b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + os.urandom(4096))
    before = _digest(d)
    res = cli(tmp_path / "s.db", "analyze", str(p), "--json")
    assert res.exit_code in (0, 2), res.stderr
    if res.exit_code == 2:
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "t.sqlite" in lines[0]
    else:
        assert any("t.sqlite-journal" in note for note in json.loads(res.stdout)["notes"])
    assert _digest(d) == before


def _cli_proc(db: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI in a subprocess (so no connection to the store outlives the command)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run(
        [sys.executable, "-m", "tracelab", "--db", str(db), *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


def test_store_with_a_killed_import_on_read_only_media(tmp_path):
    """A store whose import was killed mid-commit, on read-only media: the runs committed before are
    listed and analysed as before; the killed import's pages are not read."""
    src = tmp_path / "src"
    src.mkdir()
    db = src / "t.db"
    trace = nsys_copy(tmp_path / "a.sqlite")
    imp = _cli_proc(db, "import", str(trace))
    assert imp.returncode == 0, imp.stderr
    rid = imp.stdout.split()[0]
    doc = json.loads(_cli_proc(db, "analyze", rid, "--json").stdout)
    conn = sqlite3.connect(db)
    runs_before = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
    conn.close()
    _kill_mid_transaction(db, "DELETE FROM events")
    ro = tmp_path / "ro"
    ro.mkdir()
    if os.geteuid() != 0 or not _mount("--bind", str(src), str(ro)):
        pytest.skip("needs root and mount --bind to make read-only media (root ignores chmod)")
    try:
        if not _mount("-o", "remount,ro,bind", str(ro)):
            pytest.skip("cannot remount a bind mount read-only here")
        before = _digest(ro)
        runs = _cli_proc(ro / "t.db", "runs", "--json")
        assert runs.returncode == 0, runs.stderr
        assert len(json.loads(runs.stdout)) == runs_before
        again = _cli_proc(ro / "t.db", "analyze", rid, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["devices"] == doc["devices"]
        assert _digest(ro) == before
    finally:
        if subprocess.run(["umount", str(ro)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(ro)], capture_output=True, check=False)


def test_export_while_a_live_writer_holds_its_exclusive_transaction(tmp_path):
    """A writer still inside BEGIN EXCLUSIVE, its uncommitted pages spilled into the file: tracelab reads
    the committed state without waiting for (or touching) the writer's lock, file or journal."""
    d = tmp_path / "in"
    d.mkdir()
    p = nsys_copy(d / "t.sqlite")
    n, lo, hi = _committed(p)
    holding = _KILLED_WRITER.replace('c.execute("BEGIN")', 'c.execute("BEGIN EXCLUSIVE")').replace(
        "os._exit(0)", "print('ready', flush=True); sys.stdin.read()"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", holding, str(p), f'UPDATE {KERNELS} SET "end" = "end" + 1000000000'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert writer.stdout.readline().strip() == "ready"
        before = _digest(d)
        t0 = time.monotonic()
        tl = load_trace(p)
        assert time.monotonic() - t0 < 10 + 4 * p.stat().st_size / 1e6
        k = tl.events[tl.events["kind"] == 0]
        assert (len(k), int(k["start"].min()), int(k["end"].max())) == (n, lo, hi)
        assert any("t.sqlite-journal" in note for note in tl.meta.notes)
        assert _digest(d) == before
    finally:
        writer.kill()
        writer.wait()
