"""Issue 11, "writing next to the input": opening an export never creates a file beside it (a WAL-mode
export used to leave X.sqlite-shm / X.sqlite-wal), and the `nsys export` command tracelab suggests
never overwrites a user's file."""

from __future__ import annotations

import hashlib
import shlex

import pytest
from hostile_util import cli, kineto_doc, listing, nsys_copy, sql, two_kernels, write_json

from tracelab.errors import MissingDependency
from tracelab.io import load_trace
from tracelab.io.nsys.export import export_nsys_rep, find_nsys, free_export_path


def _digest(directory) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir())}


def test_wal_mode_export_leaves_nothing_beside_it(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    p = sql(nsys_copy(d / "t.sqlite"), "PRAGMA journal_mode=WAL;")
    assert p.read_bytes()[18:20] == b"\x02\x02"  # really WAL mode
    before = _digest(d)
    tl = load_trace(p)
    assert len(tl.events) > 0
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    res = cli(tmp_path / "s.db", "analyze", str(p))
    assert res.exit_code == 0, res.stderr
    assert _digest(d) == before  # no -shm, no -wal, no change


def test_wal_export_with_its_wal_file_reads_the_wal_content_without_touching_either(tmp_path):
    """An export whose last writes are still in X.sqlite-wal: the private copy takes both files, so the
    rows in the WAL are read, and neither file changes."""
    import sqlite3

    d = tmp_path / "in"
    d.mkdir()
    p = sql(nsys_copy(d / "t.sqlite"), "PRAGMA journal_mode=WAL;")
    writer = sqlite3.connect(p)
    writer.execute("PRAGMA wal_autocheckpoint=0")
    n_before = writer.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    writer.execute(
        "DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    )
    writer.commit()
    try:
        assert (d / "t.sqlite-wal").stat().st_size > 0
        before = _digest(d)
        tl = load_trace(p)
        assert int((tl.events["kind"] == 0).sum()) == n_before - 1
        assert _digest(d) == before
    finally:
        writer.close()


def test_rollback_journal_export_is_opened_immutable(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    p = nsys_copy(d / "t.sqlite")
    before = _digest(d)
    load_trace(p)
    assert _digest(d) == before


def test_kineto_and_gzip_exports_leave_their_directory_alone(tmp_path):
    import gzip

    d = tmp_path / "in"
    d.mkdir()
    write_json(d / "t.json", kineto_doc(two_kernels()))
    (d / "t.sqlite.gz").write_bytes(gzip.compress(nsys_copy(tmp_path / "x.sqlite").read_bytes()))
    before = listing(d)
    load_trace(d / "t.json")
    load_trace(d / "t.sqlite.gz")
    assert listing(d) == before


def test_suggested_export_path_never_names_an_existing_file(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")
    assert free_export_path(rep) == tmp_path / "run.sqlite"
    (tmp_path / "run.sqlite").write_bytes(b"mine")
    (tmp_path / "run-1.sqlite").write_bytes(b"mine too")
    assert free_export_path(rep) == tmp_path / "run-2.sqlite"


@pytest.mark.skipif(find_nsys() is not None, reason="nsys is installed: tracelab exports by itself")
def test_suggested_nsys_command_does_not_overwrite(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x")
    (tmp_path / "run.sqlite").write_bytes(b"the user's own export")
    with pytest.raises(MissingDependency) as info:
        export_nsys_rep(rep, tmp_path / "out")
    msg = str(info.value)
    cmd = shlex.split(msg.split("run `", 1)[1].split("`", 1)[0])
    assert "--force-overwrite" not in cmd
    assert cmd[cmd.index("--output") + 1] == str((tmp_path / "run-1.sqlite").resolve())
    assert (tmp_path / "run.sqlite").read_bytes() == b"the user's own export"
