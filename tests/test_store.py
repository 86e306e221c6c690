"""The run store on real SQLite files: exact roundtrip, one-transaction imports, dedupe by content
hash, window queries against a brute-force filter, refusal of files that are not a store."""

from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pandas as pd
import pytest

from tracelab.errors import BadInput, DuplicateRun, UnknownRun
from tracelab.model import (
    EVENT_COLUMNS,
    ContextInfo,
    DeviceInfo,
    EventKind,
    RunMeta,
    StringInterner,
    build_timeline,
)
from tracelab.store import Store


def _timeline(n: int = 2000, seed: int = 0, source: str = "t.json"):
    """A two-rank timeline in which every event column holds non-default values somewhere."""
    rng = np.random.default_rng(seed)
    s = StringInterner()
    pool = np.array(
        [
            "gemm<128>",
            "cudaLaunchKernel",
            "we\"ird'; DROP TABLE runs;--",
            "<script>x</script>",
            "naïve ünïcode ✓",
            "nccl:all_reduce",
            "",
            "ProfilerStep#1",
        ],
        dtype=object,
    )
    kind = rng.choice([int(k) for k in EventKind], size=n).astype(np.int8)
    start = rng.integers(0, 5_000_000, n)
    dur = np.where(kind == int(EventKind.NVTX_MARK), 0, rng.integers(0, 40_000, n))
    dur[:5] = 2_000_000  # a few long events: the window query must still find them
    gpu = np.isin(kind, [0, 1, 2, 3, 9])
    cols = {
        c: rng.integers(-1, 1 << 40, n)
        for c in ("context", "correlation", "bytes", "graph_id", "graph_node", "green_context", "shared_mem")
    }
    cols.update(
        {
            c: rng.integers(-1, 1 << 20, n).astype(np.int32)
            for c in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "registers")
        }
    )
    cols.update(
        kind=kind,
        start=start,
        end=start + dur,
        rank=rng.integers(0, 2, n),
        device=np.where(gpu, rng.integers(0, 2, n), -1),
        stream=np.where(gpu, rng.integers(7, 10, n), -1),
        pid=np.where(gpu, -1, 4242),
        tid=np.where(gpu, -1, rng.integers(1, 3, n)),
        name=s.intern_array(pool[rng.integers(0, len(pool), n)]),
        category=np.where(rng.random(n) < 0.5, s.intern_array(["domain"] * n), -1),
        copy_kind=rng.integers(0, 6, n),
        src_mem=rng.integers(0, 6, n),
        dst_mem=rng.integers(0, 6, n),
        sync_kind=rng.integers(0, 7, n),
        flags=rng.integers(0, 64, n),
    )
    cols["context"] = np.where(gpu, rng.integers(1, 3, n), -1)
    cols["green_context"] = np.where(gpu, rng.integers(-1, 3, n), -1)
    meta = RunMeta(
        source=source,
        format="kineto",
        ranks=(0, 1),
        schema_version="1.0",
        backend="torch",
        workload="overlap",
        variant="streams_pinned",
        gpu="NVIDIA H200",
        notes=("no NVTX table", "3 orphan kernels"),
        stats={"orphan_gpu_events": 3},
        extra={"meta_json": {"steps": [1.5, 2.5], "driver": "570.1"}, "distributedInfo": {"rank": 0}},
    )
    devices = [
        DeviceInfo(0, 0, "NVIDIA H200", 132, 9, 0, 141 << 30, 2048, 32, 65536, 65536, 233472, 232448),
        DeviceInfo(1, 1, "NVIDIA H200", 132),
    ]
    contexts = [ContextInfo(0, 0, 1), ContextInfo(0, 0, 2, True, 1, 2, 16)]
    blocks = pd.DataFrame(
        {
            "rank": np.zeros(50, np.int32),
            "device": np.zeros(50, np.int32),
            "green_context": np.full(50, 2, np.int64),
            "sm": np.arange(50, dtype=np.int32) % 16,
            "start": np.arange(50, dtype=np.int64) * 10,
            "end": np.arange(50, dtype=np.int64) * 10 + 7,
            "name": np.zeros(50, np.int32),
        }
    )
    return build_timeline(cols, s.strings, meta, devices, contexts, sm_blocks=blocks)


def _fp(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()


def _counts(path) -> dict[str, int]:
    """Rows per table; for `events` (one row per chunk) the number of events the chunks hold."""
    with sqlite3.connect(path) as c:
        counts = {
            t: c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "strings", "lanes", "events", "sm_blocks")
        }
        counts["events"] = c.execute("SELECT coalesce(sum(n), 0) FROM events").fetchone()[0]
        return counts


def test_roundtrip_is_identical(tmp_path):
    tl = _timeline()
    db = tmp_path / "s.db"
    rid = Store(db).import_timeline(tl, source_path="/x/t.json", fingerprint=_fp("a"))
    assert rid == _fp("a")[:8]
    back = Store(db).load(rid)  # a fresh connection: it really came from the file
    pd.testing.assert_frame_equal(back.events, tl.events, check_exact=True)
    assert [str(back.events[c].dtype) for c in EVENT_COLUMNS] == list(EVENT_COLUMNS.values())
    pd.testing.assert_frame_equal(back.lanes, tl.lanes, check_exact=True)
    assert back.strings == tl.strings
    assert back.devices == tl.devices and back.contexts == tl.contexts
    assert back.meta == tl.meta
    pd.testing.assert_frame_equal(back.sm_blocks, tl.sm_blocks, check_exact=True)
    back.validate()


def test_runs_listing_and_resolution(tmp_path):
    st = Store(tmp_path / "s.db")
    a = st.import_timeline(_timeline(seed=1), source_path="a.json", fingerprint=_fp("a"))
    b = st.import_timeline(
        _timeline(seed=2, source="b"), source_path="b.json", fingerprint=_fp("b"), name="mine"
    )
    recs = st.runs()
    assert [r.id for r in recs] == [a, b]
    assert recs[0].name == "overlap/streams_pinned/torch" and recs[1].name == "mine"
    assert recs[0].gpu == "NVIDIA H200" and recs[0].events == 2000 and recs[0].ranks == (0, 1)
    assert st.get_run(b).fingerprint == _fp("b")
    assert st.resolve("mine") == b and st.resolve(a[:5]) == a
    assert st.load("mine").meta.source == "b"
    with pytest.raises(UnknownRun, match="'nope'"):
        st.load("nope")
    with pytest.raises(BadInput, match="matches 2 runs"):
        st.import_timeline(_timeline(seed=3), source_path="c.json", fingerprint=_fp("c"), name="mine")
        st.resolve("mine")


def test_failed_import_leaves_nothing(tmp_path):
    db = tmp_path / "s.db"
    st = Store(db)
    keep = st.import_timeline(_timeline(seed=5), source_path="k.json", fingerprint=_fp("keep"))
    before = _counts(db)
    big = _timeline(n=250_000, seed=6)  # several insert chunks

    def interrupt(done, total):
        if done >= 100_000:
            raise KeyboardInterrupt  # the user pressed Ctrl-C midway

    with pytest.raises(KeyboardInterrupt):
        st.import_timeline(big, source_path="big.json", fingerprint=_fp("big"), progress=interrupt)
    assert _counts(db) == before
    assert [r.id for r in Store(db).runs()] == [keep]
    # the same import succeeds afterwards: nothing of the failed attempt is in the way
    rid = st.import_timeline(big, source_path="big.json", fingerprint=_fp("big"))
    assert _counts(db)["events"] == before["events"] + 250_000
    assert len(st.load(rid).events) == 250_000


def test_duplicate_content_is_detected(tmp_path):
    st = Store(tmp_path / "s.db")
    tl = _timeline()
    rid = st.import_timeline(tl, source_path="t.json", fingerprint=_fp("same"))
    with pytest.raises(DuplicateRun) as e:
        st.import_timeline(tl, source_path="copy-of-t.json", fingerprint=_fp("same"))
    assert e.value.run_id == rid and "copy-of-t.json: already imported as run " + rid in str(e.value)
    assert st.find_fingerprint(_fp("same")) == rid and st.find_fingerprint(_fp("other")) is None
    assert len(st.runs()) == 1


def test_short_id_collision_gets_a_longer_id(tmp_path):
    st = Store(tmp_path / "s.db")
    a = st.import_timeline(_timeline(seed=1), source_path="a", fingerprint="abcdef12" + "0" * 56)
    b = st.import_timeline(_timeline(seed=2), source_path="b", fingerprint="abcdef12" + "1" * 56)
    assert (a, b) == ("abcdef12", "abcdef1211")


def test_delete_run(tmp_path):
    db = tmp_path / "s.db"
    st = Store(db)
    a = st.import_timeline(_timeline(seed=1), source_path="a", fingerprint=_fp("a"))
    st.import_timeline(_timeline(seed=2), source_path="b", fingerprint=_fp("b"))
    st.delete_run(a)
    with sqlite3.connect(db) as c:
        for t in ("strings", "lanes", "events", "sm_blocks"):
            assert c.execute(f"SELECT count(*) FROM {t} WHERE run_id = ?", (a,)).fetchone()[0] == 0
    assert len(st.runs()) == 1
    with pytest.raises(UnknownRun):
        st.get_run(a)


def _brute(ev: pd.DataFrame, t0: int, t1: int) -> pd.DataFrame:
    s, e = ev["start"], ev["end"]
    return ev[(s < t1) & ((e > t0) | (s >= t0))]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_window_matches_brute_force(tmp_path, seed):
    tl = _timeline(n=5000, seed=seed)
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="w", fingerprint=_fp(f"w{seed}"))
    rng = np.random.default_rng(seed)
    ev = tl.events
    edges = [(0, 1), (int(ev["start"].iloc[10]), int(ev["end"].iloc[10])), (-10, 10**12)]
    edges += [tuple(sorted(rng.integers(0, 5_100_000, 2).tolist())) for _ in range(20)]
    for t0, t1 in edges:
        got = st.window(rid, t0, t1)
        want = _brute(ev, t0, t1)
        assert sorted(got.index) == sorted(want.index)
        pd.testing.assert_frame_equal(
            got.sort_index(), want.rename_axis("event").sort_index(), check_exact=True
        )
        assert got["start"].is_monotonic_increasing
    t0, t1 = 1_000_000, 3_000_000
    lanes = [0, 2, 3]
    got = st.window(rid, t0, t1, lanes=lanes, kinds=[0, 1])
    want = _brute(ev, t0, t1)
    want = want[want["lane"].isin(lanes) & want["kind"].isin([0, 1])]
    assert sorted(got.index) == sorted(want.index) and len(got) > 0
    assert len(st.window(rid, t0, t1, limit=7)) == 7
    assert st.window(rid, t0, t0).empty and st.window(rid, t1, t0).empty


def test_window_uses_the_chunk_index(tmp_path):
    st = Store(tmp_path / "s.db")
    st.import_timeline(_timeline(n=100), source_path="w", fingerprint=_fp("p"))
    plan = st.conn.execute(
        "EXPLAIN QUERY PLAN SELECT lane, n, data FROM events WHERE run_id = ? AND lane = ?"
        " AND start_min >= ? AND start_min < ? AND end_max >= ? AND (kinds & ?) != 0",
        ("x", 0, 0, 1, 0, 1),
    ).fetchall()
    assert "USING INDEX events_window (run_id=? AND lane=? AND start_min>? AND start_min<?)" in str(plan)
    plan = st.conn.execute(
        "EXPLAIN QUERY PLAN SELECT lane FROM lanes WHERE run_id = ? AND device = ?", ("x", 0)
    ).fetchall()
    assert "lanes_device" in str(plan)


def test_lanes_table_has_window_bounds(tmp_path):
    tl = _timeline()
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="l", fingerprint=_fp("l"))
    lanes = st.lanes(rid)
    ev = tl.events
    g = ev.assign(d=ev["end"] - ev["start"]).groupby("lane")
    assert lanes["events"].tolist() == g.size().tolist()
    assert lanes["max_dur"].tolist() == g["d"].max().tolist()
    assert lanes["first_start"].tolist() == g["start"].min().tolist()


def test_empty_timeline_roundtrip(tmp_path):
    tl = build_timeline({}, [], RunMeta(source="e.json", format="kineto"))
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="e.json", fingerprint=_fp("e"))
    back = st.load(rid)
    assert len(back.events) == 0 and back.meta == tl.meta and back.sm_blocks is None
    assert st.get_run(rid).start_ns is None and st.window(rid, 0, 10).empty


def test_files_that_are_not_a_store_are_refused_untouched(tmp_path):
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 20)
    other = tmp_path / "report.sqlite"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER)")
    for path in (garbage, other):
        before = path.read_bytes()
        with pytest.raises(BadInput) as e:
            Store(path)
        assert str(path) in str(e.value) and "not a tracelab store" in str(e.value)
        assert "\n" not in str(e.value)
        assert path.read_bytes() == before
    with pytest.raises(BadInput, match="is a directory"):
        Store(tmp_path)
    with pytest.raises(BadInput, match="no tracelab store here"):
        Store(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


def test_store_created_in_new_directory_and_reopened(tmp_path):
    db = tmp_path / "deep" / "er" / "s.db"
    Store(db).import_timeline(_timeline(n=10), source_path="x", fingerprint=_fp("x"))
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == 0x54524C42
    assert len(Store(db, create=False).runs()) == 1


def test_corrupt_chunk_blob_is_bad_input(tmp_path):
    db = tmp_path / "s.db"
    rid = Store(db).import_timeline(_timeline(n=50), source_path="x", fingerprint=_fp("x"))
    with sqlite3.connect(db) as c:
        lane = c.execute("SELECT lane FROM events ORDER BY n DESC LIMIT 1").fetchone()[0]
        c.execute("UPDATE events SET data = x'00ff00ff' WHERE lane = ?", (lane,))
    with pytest.raises(BadInput, match="corrupt store: an event chunk of run") as e:
        Store(db).load(rid)
    assert str(db) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadInput, match="corrupt store"):
        Store(db).window(rid, -(10**12), 10**12)
    with sqlite3.connect(db) as c:  # a chunk gone: the load notices the missing rows
        c.execute("DELETE FROM events WHERE lane = ?", (lane,))
    with pytest.raises(BadInput, match="corrupt store: run .* lacks"):
        Store(db).load(rid)


def test_empty_sm_blocks_frame_roundtrip(tmp_path):
    tl = _timeline(n=20)
    empty = tl.sm_blocks.iloc[:0]
    from dataclasses import replace

    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(replace(tl, sm_blocks=empty), source_path="x", fingerprint=_fp("x"))
    back = st.load(rid).sm_blocks
    assert back is not None and len(back) == 0 and dict(back.dtypes) == dict(empty.dtypes)


def test_second_writer_waits_for_the_first(tmp_path):
    """Two stores on one file (two processes in real life): an import while the other holds the
    write lock waits for it instead of failing, and both runs land."""
    import threading

    db = tmp_path / "s.db"
    a, b = Store(db), Store(db)
    blocker = sqlite3.connect(db, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    done = []
    t = threading.Thread(
        target=lambda: done.append(
            b.import_timeline(_timeline(n=100, seed=1), source_path="b", fingerprint=_fp("b"))
        )
    )
    t.start()
    t.join(0.5)
    assert not done  # waiting on the lock
    blocker.execute("ROLLBACK")
    t.join(30)
    assert done and a.get_run(done[0]).events == 100


def test_import_alone_writes_through_a_rollback_journal_and_returns_to_wal(tmp_path):
    """Alone on the store, an import is written once (rollback journal, no WAL copy) and the store is
    in WAL mode again afterwards; with a reader open the import goes through the WAL, and the reader
    sees the run once it is committed."""
    from pathlib import Path

    db = tmp_path / "j.db"
    store = Store(db)
    tl = _timeline(n=300)
    store.import_timeline(tl, source_path="a", fingerprint=_fp("a"))
    wal = Path(f"{db}-wal")
    assert not wal.exists() or wal.stat().st_size == 0  # nothing went through the WAL
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert not Path(f"{db}-journal").exists()

    reader = Store(db, read_only=True)
    assert len(reader.runs()) == 1
    rid = store.import_timeline(_timeline(n=300, seed=2), source_path="b", fingerprint=_fp("b"))
    assert wal.stat().st_size > 0  # the reader kept the import in the WAL
    assert {r.id for r in reader.runs()} >= {rid} and len(reader.runs()) == 2
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    reader.close()
    store.close()
    again = Store(db, read_only=True)
    assert [len(again.load(r.id).events) for r in sorted(again.runs(), key=lambda r: r.source)] == [300, 300]


def test_window_boundaries(tmp_path):
    # kernels on one stream: [0,10) [10,10] (an instant) [10,20) [5,30) [20,20] [30,40)
    starts = np.array([0, 10, 10, 5, 20, 30])
    ends = np.array([10, 10, 20, 30, 20, 40])
    tl = build_timeline(
        {
            "kind": 0,
            "start": starts,
            "end": ends,
            "device": 0,
            "stream": 7,
            "name": np.arange(6, dtype=np.int32),
        },
        [f"k{i}" for i in range(6)],
        RunMeta(source="b", format="kineto"),
    )
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="b", fingerprint=_fp("b"))

    def names(t0, t1):
        return sorted(tl.names(st.window(rid, t0, t1)["name"]))

    assert names(10, 20) == ["k1", "k2", "k3"]  # [0,10) ends at t0: out; the instant at 10: in
    assert names(20, 30) == [
        "k3",
        "k4",
    ]  # [10,20) out, [5,30) in, instant at 20 in, [30,40) starts at t1: out
    assert names(39, 100) == ["k5"]
    assert names(40, 100) == []


def test_window_over_many_lanes(tmp_path):
    n = 1000
    streams = np.arange(n) % 450  # 450 lanes: more than one compound SELECT
    tl = build_timeline(
        {"kind": 0, "start": np.arange(n) * 10, "end": np.arange(n) * 10 + 5, "device": 0, "stream": streams},
        [],
        RunMeta(source="m", format="kineto"),
    )
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="m", fingerprint=_fp("m"))
    got = st.window(rid, 2000, 6000)
    want = _brute(tl.events, 2000, 6000)
    assert len(tl.lanes) == 450 and sorted(got.index) == sorted(want.index) and len(got) == 400


def test_replace_swaps_the_run_in_one_transaction(tmp_path):
    db = tmp_path / "s.db"
    st = Store(db)
    rid = st.import_timeline(_timeline(n=100, seed=1), source_path="a", fingerprint=_fp("a"))
    newer = _timeline(n=300, seed=2)

    def fail(done, total):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        st.import_timeline(newer, source_path="a", fingerprint=_fp("a"), replace=True, progress=fail)
    assert st.get_run(rid).events == 100  # the old run survived the failed replacement
    again = st.import_timeline(newer, source_path="a", fingerprint=_fp("a"), replace=True)
    assert again == rid and st.get_run(rid).events == 300 and len(st.runs()) == 1
    assert _counts(db)["events"] == 300


def test_chunk_summaries_are_plain_sql(tmp_path):
    """Events live in per-lane chunks; their summaries (lane, n, start_min, end_max, kinds) and the
    strings stay plain SQL for sqlite-utils / sqlite3; event-level queries go through Store.window."""
    tl = _timeline(n=500)
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="q", fingerprint=_fp("q"))
    ev = tl.events
    per_lane = dict(
        st.db.execute("SELECT lane, sum(n) FROM events WHERE run_id = ? GROUP BY lane", [rid]).fetchall()
    )
    assert per_lane == ev.groupby("lane").size().to_dict()
    bounds = st.db.execute(
        "SELECT min(start_min), max(end_max), count(*) FROM events WHERE run_id = ? AND (kinds & 1) != 0",
        [rid],
    ).fetchone()
    k = ev[ev["kind"] == 0]
    with_kernels = ev[ev["lane"].isin(k["lane"])]  # 500 events: one chunk per lane
    assert bounds == (int(with_kernels["start"].min()), int(with_kernels["end"].max()), k["lane"].nunique())
    kernels = st.window(rid, -(10**15), 10**15, kinds=[0])
    assert (len(kernels), int((kernels["end"] - kernels["start"]).sum())) == (
        len(k),
        int((k["end"] - k["start"]).sum()),
    )
    names = dict(st.db.execute("SELECT id, value FROM strings WHERE run_id = ?", [rid]).fetchall())
    assert tuple(names[i] for i in range(len(names))) == tl.strings


def _one_lane_run(tmp_path, starts, ends, kinds=None, tag="c"):
    n = len(starts)
    tl = build_timeline(
        {
            "kind": np.zeros(n, np.int8) if kinds is None else kinds,
            "start": starts,
            "end": ends,
            "device": 0,
            "stream": 7,
            "name": (np.arange(n) % 5).astype(np.int32),
            "correlation": np.arange(n) * 3,
        },
        [f"k{i}" for i in range(5)],
        RunMeta(source=tag, format="kineto"),
    )
    st = Store(tmp_path / f"{tag}.db")
    return tl, st, st.import_timeline(tl, source_path=tag, fingerprint=_fp(tag))


def _check(st, rid, ev, t0, t1, **kw):
    got = st.window(rid, t0, t1, **kw)
    want = _brute(ev, t0, t1)
    if "kinds" in kw:
        want = want[want["kind"].isin(kw["kinds"])]
    pd.testing.assert_frame_equal(got.sort_index(), want.rename_axis("event").sort_index(), check_exact=True)
    return got


def test_window_at_chunk_edges(tmp_path):
    """Windows that start or end exactly on the first/last event of a chunk, instants on the edges."""
    from tracelab.store.chunks import CHUNK_EVENTS

    n = 3 * CHUNK_EVENTS + 17  # three full chunks and a short one
    starts = np.arange(n, dtype=np.int64) * 100
    ends = starts + 50
    kinds = np.zeros(n, np.int8)
    instants = np.arange(0, n, CHUNK_EVENTS // 2)  # on every chunk's first event and mid-chunk
    instants = np.unique(np.r_[instants, instants[1:] - 1, n - 1])  # and every chunk's last
    ends[instants] = starts[instants]
    kinds[instants] = int(EventKind.MEMSET)  # zero-length, on the same stream lane
    tl, st, rid = _one_lane_run(tmp_path, starts, ends, kinds)
    rows = st.conn.execute(
        "SELECT start_min, start_max, end_max, n FROM events ORDER BY start_min"
    ).fetchall()
    assert [r[3] for r in rows] == [CHUNK_EVENTS] * 3 + [17]
    ev = tl.events
    for s_min, s_max, e_max, _ in rows:
        for t0, t1 in [
            (s_min, s_min + 1),  # one ns at a chunk's first start (an instant there)
            (s_max, s_max + 1),  # at a chunk's last start
            (e_max, e_max + 100),  # starting where the chunk's last event ends
            (s_min - 50, s_min),  # ending exactly at a chunk's first start: that event is out
            (s_max, s_max + 100),  # straddling two chunks
            (s_min, s_max + 1),  # exactly one chunk
        ]:
            _check(st, rid, ev, t0, t1)
    got = _check(st, rid, ev, int(starts[CHUNK_EVENTS]), int(starts[CHUNK_EVENTS]) + 1)
    assert got.index.tolist() == [CHUNK_EVENTS]  # the instant opening chunk 2
    got = _check(st, rid, ev, int(starts[CHUNK_EVENTS]), int(starts[2 * CHUNK_EVENTS]), kinds=[2])
    assert set(got.index) == {i for i in instants if CHUNK_EVENTS <= i < 2 * CHUNK_EVENTS}


def test_long_event_spanning_many_chunks(tmp_path):
    from tracelab.store.chunks import CHUNK_EVENTS

    n = 6 * CHUNK_EVENTS
    starts = np.arange(n, dtype=np.int64) * 10
    ends = starts + 5
    ends[3] = starts[-1] + 1_000  # event 3 lasts past every other event on the lane
    ends[CHUNK_EVENTS + 1] = starts[4 * CHUNK_EVENTS]  # ends exactly where chunk 5 begins
    tl, st, rid = _one_lane_run(tmp_path, starts, ends, tag="long")
    ev = tl.events
    span = st.conn.execute("SELECT chunk_span FROM lanes").fetchone()[0]
    assert span == int(ends[3] - starts[0])
    for t0, t1 in [
        (int(starts[-1]) + 500, int(starts[-1]) + 501),  # only the long event is there
        (int(starts[4 * CHUNK_EVENTS]), int(starts[4 * CHUNK_EVENTS]) + 1),
        (int(starts[4 * CHUNK_EVENTS]) - 1, int(starts[4 * CHUNK_EVENTS])),
        (int(starts[3 * CHUNK_EVENTS]), int(starts[3 * CHUNK_EVENTS + 10])),
    ]:
        got = _check(st, rid, ev, t0, t1)
        assert 3 in got.index
    got = _check(st, rid, ev, int(starts[-1]) + 500, int(starts[-1]) + 501)
    assert got.index.tolist() == [3]
    assert st.window(rid, int(ends[3]), int(ends[3]) + 10).empty
    got = st.window(rid, 0, 10**9, limit=5)
    assert got.index.tolist() == [0, 1, 2, 3, 4]


def test_old_or_newer_store_schema_is_refused(tmp_path):
    from tracelab.store import STORE_SCHEMA_VERSION

    db = tmp_path / "s.db"
    Store(db).import_timeline(_timeline(n=10), source_path="x", fingerprint=_fp("x"))
    for version in (1, STORE_SCHEMA_VERSION + 1):
        with sqlite3.connect(db) as c:
            c.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", (str(version),))
        before = db.read_bytes()
        with pytest.raises(BadInput) as e:
            Store(db)
        msg = str(e.value)
        assert f"store schema version {version}; this tracelab reads versions 2-3" in msg
        assert str(db) in msg and "\n" not in msg
        assert ("re-import" in msg) == (version < STORE_SCHEMA_VERSION)
        assert db.read_bytes() == before


def test_extreme_values_roundtrip_through_chunks(tmp_path):
    """Offsets that span the whole range of a column's type (int64 min and max in one chunk)."""
    n = 300
    rng = np.random.default_rng(7)
    i64 = np.iinfo(np.int64)
    cols = {
        "kind": 0,
        "start": np.sort(rng.integers(0, 1 << 62, n)),
        "device": 0,
        "stream": 7,
        "correlation": rng.choice([i64.min, i64.max, -1, 0], n),
        "bytes": rng.integers(i64.min, i64.max, n, dtype=np.int64),
        "grid_x": rng.choice([np.iinfo(np.int32).min, np.iinfo(np.int32).max], n).astype(np.int32),
        "flags": rng.choice([-(1 << 15), (1 << 15) - 1], n).astype(np.int16),
        "copy_kind": rng.choice([-128, 127], n).astype(np.int8),
    }
    cols["end"] = cols["start"] + rng.integers(0, 1 << 61, n)
    tl = build_timeline(cols, [], RunMeta(source="x", format="kineto"))
    st = Store(tmp_path / "s.db")
    rid = st.import_timeline(tl, source_path="x", fingerprint=_fp("x"))
    pd.testing.assert_frame_equal(st.load(rid).events, tl.events, check_exact=True)
    _check(st, rid, tl.events, int(tl.events["start"].iloc[100]), int(tl.events["start"].iloc[200]))
