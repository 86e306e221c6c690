"""Measured per-block SM records (Timeline.sm_blocks) in the store: as one columnar blob (schema version 3,
what imports write), read back identically, and as a row per block (version 2, what older tracelab
wrote), still read identically; the store is marked version 3 only once it holds such a blob."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from test_store import _fp, _timeline

from tracelab.errors import BadInput
from tracelab.store import STORE_SCHEMA_VERSION, Store
from tracelab.store.chunks import decode_columns, encode_columns
from tracelab.store.writes import insert_blocks


def _version(db) -> int:
    c = sqlite3.connect(db)
    try:
        return int(c.execute("SELECT value FROM store_meta WHERE key = 'schema_version'").fetchone()[0])
    finally:
        c.close()


def _blocks(n: int, seed: int = 0) -> pd.DataFrame:
    """Blocks as a probe records them: a few hundred kernels over 132 SMs, epoch-ns times."""
    rng = np.random.default_rng(seed)
    start = 1_700_000_000_000_000_000 + np.sort(rng.integers(0, 30_000_000, n))
    return pd.DataFrame(
        {
            "rank": np.zeros(n, np.int32),
            "device": np.zeros(n, np.int32),
            "green_context": rng.choice([-1, 2, 3], n).astype(np.int64),
            "sm": rng.integers(0, 132, n).astype(np.int32),
            "start": start.astype(np.int64),
            "end": (start + rng.integers(1_000, 90_000, n)).astype(np.int64),
            "name": rng.integers(0, 7, n).astype(np.int32),
            "kernel": rng.integers(0, 300, n).astype(np.int64),
        }
    )


def test_columns_codec_roundtrips_extremes():
    i64 = np.iinfo(np.int64)
    cols = [
        np.array([i64.min, i64.max, 0, -1], np.int64),
        np.array([True, False, True, True]),
        np.array([7, 7, 7, 7], np.int32),
        np.array([-(2**31), 2**31 - 1, 5, 6], np.int32),
        np.array([0, 255, 3, 1], np.uint8),
    ]
    dtypes = ["int64", "bool", "int32", "int32", "uint8"]
    for compress in (False, True):
        back = decode_columns(encode_columns(cols, compress=compress), 4, dtypes)
        for a, b in zip(cols, back):
            assert b.dtype == a.dtype and np.array_equal(a, b)
    assert [len(c) for c in decode_columns(encode_columns([np.zeros(0, np.int64)]), 0, ["int64"])] == [0]
    with pytest.raises(ValueError):
        encode_columns([np.array([0.5])])
    with pytest.raises(ValueError):
        decode_columns(encode_columns(cols)[:-1], 4, dtypes)


def test_blocks_are_one_blob_and_the_store_becomes_version_3(tmp_path):
    db = tmp_path / "s.db"
    st = Store(db)
    plain = st.import_timeline(replace(_timeline(n=200), sm_blocks=None), source_path="p", fingerprint=_fp("p"))
    assert _version(db) == 2  # nothing only version 3 can read: older tracelab still read it
    tl = replace(_timeline(n=200), sm_blocks=_blocks(150_000))
    rid = st.import_timeline(tl, source_path="b", fingerprint=_fp("b"))
    assert _version(db) == STORE_SCHEMA_VERSION == 3
    c = sqlite3.connect(db)
    try:
        assert c.execute("SELECT count(*) FROM sm_blocks").fetchone()[0] == 0
        n, size = c.execute("SELECT n, length(data) FROM sm_block_columns WHERE run_id = ?", (rid,)).fetchone()
    finally:
        c.close()
    assert n == 150_000 and size < 20 * n  # ~2 MB where rows took ~7 MB
    back = Store(db).load(rid)
    pd.testing.assert_frame_equal(back.sm_blocks, tl.sm_blocks, check_exact=True)
    assert Store(db).load(plain).sm_blocks is None
    st.delete_run(rid)
    c = sqlite3.connect(db)
    try:
        assert c.execute("SELECT count(*) FROM sm_block_columns").fetchone()[0] == 0
    finally:
        c.close()


def test_blocks_stored_as_rows_by_an_older_tracelab_still_load(tmp_path):
    """A version 2 store (blocks one row each, under metadata key `sm_blocks`), written through the
    row path this store keeps for them, loads the same blocks; a new import into it marks it 3."""
    db = tmp_path / "s.db"
    st = Store(db)
    tl = replace(_timeline(n=200), sm_blocks=_blocks(5_000, seed=1))
    rid = st.import_timeline(tl, source_path="a", fingerprint=_fp("a"))
    c = sqlite3.connect(db)  # rewrite the run as a version 2 tracelab stored it
    try:
        with c:
            doc = json.loads(c.execute("SELECT metadata FROM runs WHERE id = ?", (rid,)).fetchone()[0])
            assert doc["sm_block_columns"] and doc["sm_blocks"] is None
            doc["sm_blocks"] = doc.pop("sm_block_columns")  # a version 2 tracelab knew only this key
            c.execute("UPDATE runs SET metadata = ? WHERE id = ?", (json.dumps(doc), rid))
            c.execute("DELETE FROM sm_block_columns")
            c.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
    finally:
        c.close()
    old = Store(db)
    with old._transaction():
        insert_blocks(old.conn, rid, tl.sm_blocks)
    assert _version(db) == 2
    pd.testing.assert_frame_equal(Store(db).load(rid).sm_blocks, tl.sm_blocks, check_exact=True)
    other = st.import_timeline(replace(_timeline(n=200, seed=2), sm_blocks=_blocks(10, seed=2)), source_path="b",
                               fingerprint=_fp("b"))
    assert _version(db) == 3 and len(Store(db).load(other).sm_blocks) == 10
    pd.testing.assert_frame_equal(Store(db).load(rid).sm_blocks, tl.sm_blocks, check_exact=True)


def test_blocks_with_a_non_integer_column_stay_rows(tmp_path):
    db = tmp_path / "s.db"
    blocks = _blocks(100).assign(occupancy=np.linspace(0, 1, 100))
    tl = replace(_timeline(n=200), sm_blocks=blocks)
    rid = Store(db).import_timeline(tl, source_path="a", fingerprint=_fp("a"))
    assert _version(db) == 2
    pd.testing.assert_frame_equal(Store(db).load(rid).sm_blocks, blocks, check_exact=True)


def test_corrupt_block_blob_is_bad_input(tmp_path):
    db = tmp_path / "s.db"
    rid = Store(db).import_timeline(replace(_timeline(n=200), sm_blocks=_blocks(100)), source_path="a",
                                    fingerprint=_fp("a"))
    c = sqlite3.connect(db)
    try:
        with c:
            c.execute("UPDATE sm_block_columns SET data = substr(data, 1, 50)")
    finally:
        c.close()
    with pytest.raises(BadInput) as e:
        Store(db).load(rid)
    assert "corrupt store" in str(e.value) and rid in str(e.value) and "\n" not in str(e.value)
