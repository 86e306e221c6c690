"""Precomputed views stored with a run (the `run_views` table, added within store schema version 2): written
in the import's transaction, read back byte for byte, deleted and replaced with their run, never taken
for the views of another run under the same id, and absent (not an error) in a store written before
the table existed, read-only or not."""

from __future__ import annotations

import sqlite3
from dataclasses import replace

import pytest
from test_store import _fp, _timeline
from test_store_faults import mounts  # noqa: F401 - the fixture

from tracelab.errors import StoreError
from tracelab.store import Store

VIEWS = {"a.rows": b'{"x": [1, 2]}', "a.tile": bytes(range(256)) * 40}


def _old_store_with_one_run(db) -> str:
    """A store holding one run, as a tracelab from before `run_views` left it; the run's id."""
    st = Store(db)
    rid = st.import_timeline(_timeline(n=300), source_path="a", fingerprint=_fp("a"))
    st.close()
    _without_views_table(db)
    return rid


def _without_views_table(db) -> None:
    """The store as a tracelab before `run_views` wrote it: the same schema without that table."""
    c = sqlite3.connect(db)
    try:
        with c:
            c.execute("DROP INDEX IF EXISTS run_views_key")
            c.execute("DROP TABLE IF EXISTS run_views")
    finally:
        c.close()


def test_views_are_stored_with_the_run_and_read_back_exactly(tmp_path):
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(_timeline(n=300), source_path="a", fingerprint=_fp("a"), views=VIEWS)
    assert st.views(rid, VIEWS) == VIEWS
    assert st.views(rid, ["a.tile", "nope"]) == {"a.tile": VIEWS["a.tile"]}
    assert st.views(rid, []) == {}
    plain = st.import_timeline(_timeline(n=300, seed=1), source_path="b", fingerprint=_fp("b"))
    assert st.views(plain, VIEWS) == {}
    # by id prefix, like every other read
    assert st.views(rid[:6], ["a.rows"]) == {"a.rows": VIEWS["a.rows"]}


def test_a_failed_import_stores_no_views(tmp_path):
    st = Store(tmp_path / "s.db")

    def boom(done: int, total: int) -> None:
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        st.import_timeline(_timeline(n=300), source_path="a", fingerprint=_fp("a"), views=VIEWS, progress=boom)
    with sqlite3.connect(tmp_path / "s.db") as c:
        assert c.execute("SELECT count(*) FROM run_views").fetchone()[0] == 0
        assert c.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_views_go_with_their_run_on_delete_and_replace(tmp_path):
    db = tmp_path / "s.db"
    st = Store(db)
    rid = st.import_timeline(_timeline(n=300), source_path="a", fingerprint=_fp("a"), views=VIEWS)
    again = st.import_timeline(
        _timeline(n=300), source_path="a", fingerprint=_fp("a"), replace=True, views={"a.rows": b"new"}
    )
    assert again == rid
    assert st.views(rid, VIEWS) == {"a.rows": b"new"}  # the old tile went with the replaced run
    st.delete_run(rid)
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT count(*) FROM run_views").fetchone()[0] == 0


def test_views_left_by_an_older_tracelab_never_pass_for_a_new_run(tmp_path):
    """A tracelab that did not know `run_views` deletes a run without its views (it opens only stores
    of schema version 2: no run with SM blocks as columns); the same content imported again gets the
    same id, and must not see the old views."""
    db = tmp_path / "s.db"
    st = Store(db)
    tl = replace(_timeline(n=300), sm_blocks=None)
    rid = st.import_timeline(tl, source_path="a", fingerprint=_fp("a"), views=VIEWS)
    with sqlite3.connect(db) as c:  # the older tracelab's delete: every table it knew
        for table, key in (("events", "run_id"), ("lanes", "run_id"), ("strings", "run_id"), ("sm_blocks", "run_id"), ("runs", "id")):
            c.execute(f"DELETE FROM {table} WHERE {key} = ?", (rid,))
    assert st.import_timeline(tl, source_path="a", fingerprint=_fp("a")) == rid
    assert st.views(rid, VIEWS) == {}
    st.put_views(rid, {"a.rows": b"fresh"})
    assert st.views(rid, VIEWS) == {"a.rows": b"fresh"}


def test_a_store_written_before_views_existed_works_and_gets_the_table_on_write(tmp_path):
    db = tmp_path / "s.db"
    old = _old_store_with_one_run(db)
    st = Store(db)
    assert st.views(old, VIEWS) == {}
    st.delete_run(old)  # deleting works without the table
    old = st.import_timeline(_timeline(n=300), source_path="a", fingerprint=_fp("a"))
    new = st.import_timeline(_timeline(n=300, seed=3), source_path="b", fingerprint=_fp("b"), views=VIEWS)
    assert st.views(new, VIEWS) == VIEWS and st.views(old, VIEWS) == {}
    _without_views_table(db)
    st.put_views(old, VIEWS)  # the dashboard storing an old run's views (see app.timeline_view)
    assert st.views(old, VIEWS) == VIEWS
    assert Store(db, read_only=True).views(old, VIEWS) == VIEWS


def test_read_only_media_without_the_table_read_no_views(tmp_path, mounts):  # noqa: F811 - the fixture
    """An old store on read-only media (a real read-only bind mount: root ignores chmod): opened
    read-only, no views, a write is one StoreError, nothing created beside the file."""
    src = tmp_path / "src"
    src.mkdir()
    rid = _old_store_with_one_run(src / "s.db")
    ro = mounts.read_only(src, tmp_path / "ro")
    store = Store(ro / "s.db")
    assert store.read_only and store.views(rid, VIEWS) == {}
    with pytest.raises(StoreError):
        store.put_views(rid, VIEWS)
    store.close()
    assert sorted(p.name for p in ro.iterdir()) == ["s.db"]


def test_query_only_store_without_the_table_reads_no_views_and_refuses_writes(tmp_path):
    db = tmp_path / "s.db"
    rid = _old_store_with_one_run(db)
    ro = Store(db, read_only=True)
    assert ro.views(rid, VIEWS) == {}
    with pytest.raises(StoreError):
        ro.put_views(rid, VIEWS)
    with sqlite3.connect(db) as c:
        assert not c.execute("SELECT 1 FROM sqlite_master WHERE name = 'run_views'").fetchone()
