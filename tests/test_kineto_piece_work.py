"""The Kineto parser's per-piece work on the scan threads (issue 26): `piece_work` runs on each part of a
piece, `_Parsed._merge` puts the parts back together in file order. Checked against the pieces read whole
(no parts) on a trace made to hit the order-dependent parts of the merge: the bounds on overhead events
and `[memory]` instants, the first examples of dropped events, strings first seen in a later part; and
the helpers that keep work off the parser's thread (dense parts, pages mapped ahead, the GIL-free search
for collective args) against what they replace."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from timeline_compare import assert_same_timeline

from tracelab.io.kineto import comm_args, memory, piece_work, pieces
from tracelab.io.kineto import load as kineto
from tracelab.io.kineto.columns import ColumnAssembler, dense_part, populate

DATA = Path(__file__).parent / "data"


def _trace(n: int, bad_ts: object = 1e300) -> dict:
    """Launches, kernels, CPU ops with names new every 97 events, CUPTI overhead events (some with `bad_ts`:
    no valid time), `[memory]` instants, events out of the time range and GPU work without args.stream. A
    string `bad_ts` makes the C scanner decline every piece (msgspec reads them, whole)."""
    ev = []
    for i in range(n):
        t = 1000.0 + 10 * i
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": t,
                   "dur": 2.0, "args": {"correlation": i}})
        ev.append({"ph": "X", "cat": "kernel", "name": f"kernel_{i // 97}", "pid": 0, "tid": 7, "ts": t + 3,
                   "dur": 4.0, "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i % 5, 1, 1]}})
        if i % 7 == 0:
            ts = bad_ts if i % 21 == 0 else t + 1  # no valid time: still a candidate
            ev.append({"ph": "X", "cat": "overhead", "name": f"Buffer Flush {i}", "pid": -1, "tid": 0, "ts": ts,
                       "dur": 1.0})
        if i % 5 == 0:
            ev.append({"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 2, "ts": t,
                       "s": "t", "args": {"Device Type": 1, "Device Id": 0, "Bytes": 512 * i, "Addr": i,
                                          "Total Allocated": i, "Total Reserved": 2 * i}})
        if i % 301 == 150:
            ev.append({"ph": "X", "cat": "cpu_op", "name": f"far_{i}", "pid": 1, "tid": 2, "ts": 1e300, "dur": 1})
        if i % 401 == 200:
            ev.append({"ph": "X", "cat": "kernel", "name": f"laneless_{i}", "pid": 0, "tid": 9, "ts": t + 5,
                       "dur": 1.0, "args": {"device": 0, "correlation": i}})
    return {"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [{"id": 0, "name": "GPU"}]}


@pytest.mark.parametrize("parts", [2, 4])
@pytest.mark.parametrize("bounds", [(10**9, 10**9), (23, 17), (1, 1)])
@pytest.mark.parametrize("bad_ts", [1e300, "bad"])
def test_parts_merged_as_the_whole_piece(tmp_path, monkeypatch, parts, bounds, bad_ts):
    if not pieces.scanner_available():
        pytest.skip("the C scanner is not built")
    max_overhead, max_memory = bounds
    monkeypatch.setattr(pieces, "MAX_OVERHEAD", max_overhead)
    monkeypatch.setattr(piece_work, "MAX_OVERHEAD", max_overhead)
    monkeypatch.setattr(pieces, "MAX_EVENTS", max_memory)
    monkeypatch.setattr(memory, "MAX_EVENTS", max_memory)
    p = tmp_path / "t.json"
    raw = _trace(4000, bad_ts)
    p.write_text(json.dumps(raw))
    monkeypatch.setattr(kineto, "BLOCK_SIZE", 1 << 16)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 40)
    whole = kineto.load_kineto(p)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 12)
    monkeypatch.setattr(pieces, "usable_cores", lambda: parts)
    seen = []
    scan_halves = kineto._Parsed._scan_halves

    def counted(self, piece):
        got = scan_halves(self, piece)
        seen.append(0 if got is None else len(got))
        return got

    monkeypatch.setattr(kineto._Parsed, "_scan_halves", counted)
    split = kineto.load_kineto(p)
    # every piece in `parts` parts, unless the scanner declines them (then tried twice, read whole)
    assert seen == ([parts] * len(seen) if isinstance(bad_ts, float) else [0, 0])
    assert_same_timeline(split, whole)
    # and the bounded lists hold what the raw JSON says: overhead events with a time, in file order, at most
    # max_overhead (all of them without a bound)
    valid = [e["name"] for e in raw["traceEvents"] if e["cat"] == "overhead" and e["ts"] != bad_ts]
    got = split.meta.extra["health"]["overhead"]["name"]
    assert 0 < len(got) <= max_overhead
    assert got == valid if max_overhead >= len(valid) else set(got) <= set(valid)
    assert got == sorted(got, key=valid.index)
    mem = [e for e in raw["traceEvents"] if e["name"] == "[memory]"]
    assert len(split.meta.extra["memory"]["bytes"]) == min(len(mem), max_memory)
    assert split.meta.stats["trace_events"] == len(raw["traceEvents"])


def test_dense_parts_assemble_as_the_sparse_ones():
    parsed = kineto._Parsed()  # no pipeline: the pieces' columns kept as the parser makes them (sparse)
    from tracelab.io.kineto.stream import EventChunks

    for _ in EventChunks(DATA / "torch_mixed_small" / "trace.json.gz", parsed.add_chunk, block_size=1 << 12):
        pass
    parsed.close()
    parts = parsed.parts
    assert len(parts) > 3 and any("k_rows" in p for p in parts) and any("a_sync" in p for p in parts)
    sparse, dense = ColumnAssembler(), ColumnAssembler()
    for p in parts:
        sparse.add(p)
        dense.add(dense_part(p))
    a, b = sparse.result(), dense.result()
    assert list(a) == list(b)
    for c in a:
        assert a[c].dtype == b[c].dtype and np.array_equal(a[c], b[c]), c


def test_populate_keeps_the_bytes():
    rng = np.random.default_rng(1)
    a = rng.integers(-(1 << 40), 1 << 40, 3_000_000)
    want = a.copy()
    fresh = np.empty(2_000_000, dtype=np.int32)
    populate([a, a[5:17], fresh, fresh[:0], np.zeros(0)])
    assert np.array_equal(a, want)
    fresh[:] = 7  # the mapped pages are the array's own
    assert int(fresh.sum()) == 7 * len(fresh)


def test_key_search_is_bytes_find():
    rng = random.Random(3)
    key = comm_args.KEY
    for _ in range(300):
        body = bytearray(rng.choice(b'ab"C {}') for _ in range(rng.randint(0, 200)))
        if rng.random() < 0.5:
            at = rng.randint(0, len(body))
            body[at:at] = key[: rng.randint(1, len(key))] if rng.random() < 0.3 else key
        head = rng.randint(0, len(body))
        for data in (body, bytes(body)):
            assert comm_args._holds_key(data, head) == (data.find(key, head) >= 0)
    buf = bytearray(b"x" * 100 + key)
    assert comm_args._holds_key(buf, 100) and not comm_args._holds_key(buf, 101)
    del buf[:50]  # no export of the buffer is left behind
