"""Issue 11, "hangs on small inputs": every input path is linear in its size. Each file here took from
half a minute to forever before (times measured on the issue's machine: 64 MB of leading whitespace
28.6 s, 200k nested "traceEvents" keys > 100 s, a recursive view: never ends); the bounds below are
generous for a loaded 2-core CI machine and still far below the old times."""

from __future__ import annotations

import gzip
import json
import sqlite3
import time

import pytest
from hostile_util import cli, kineto_doc, nsys_copy, one_error_line, sql, two_kernels, write_json

from tracelab.errors import TraceFormatError
from tracelab.io import load_trace
from tracelab.io.kineto import stream as kineto_stream

BOUND_S = 15.0


def _timed_load(path):
    t0 = time.monotonic()
    tl = load_trace(path)
    return tl, time.monotonic() - t0


def test_gzip_of_64_mb_leading_whitespace_is_linear(tmp_path):
    p = tmp_path / "bomb.json.gz"
    with gzip.open(p, "wb", compresslevel=9) as f:
        for _ in range(64):
            f.write(b" " * (1 << 20))
        f.write(json.dumps(kineto_doc(two_kernels())).encode())
    assert p.stat().st_size < 200_000  # small on disk
    tl, elapsed = _timed_load(p)
    assert len(tl.gpu_events()) == 2
    assert elapsed < BOUND_S


def test_whitespace_between_events_is_linear(tmp_path):
    raw = json.dumps(kineto_doc(two_kernels())).encode().replace(b"}, {", b"}," + b" " * (16 << 20) + b"{", 2)
    tl, elapsed = _timed_load(write_json(tmp_path / "t.json", raw))
    assert len(tl.gpu_events()) == 2
    assert elapsed < BOUND_S


def test_200k_nested_traceevents_keys_before_the_real_one(tmp_path):
    body = json.dumps(kineto_doc(two_kernels())).encode()
    raw = b'{"a": [' + b",".join([b'{"traceEvents": 1}'] * 200_000) + b"], " + body[1:]
    tl, elapsed = _timed_load(write_json(tmp_path / "t.json", raw))
    assert sorted(tl.names(tl.gpu_events()["name"])) == ["k1", "k2"]
    assert elapsed < BOUND_S


def test_traceevents_keys_inside_a_long_string(tmp_path):
    body = json.dumps(kineto_doc(two_kernels())).encode()
    raw = b'{"x": "' + b'\\"traceEvents\\": [' * 200_000 + b'", ' + body[1:]
    tl, elapsed = _timed_load(write_json(tmp_path / "t.json", raw))
    assert sorted(tl.names(tl.gpu_events()["name"])) == ["k1", "k2"]
    assert elapsed < BOUND_S


def test_event_larger_than_the_limit_is_refused_in_one_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_stream, "MAX_EVENT_BYTES", 1 << 20)
    events = two_kernels()
    events[1]["name"] = "n" * (12 << 20)
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    monkeypatch.setattr("tracelab.io.kineto.load.BLOCK_SIZE", 256 << 10)
    t0 = time.monotonic()
    with pytest.raises(TraceFormatError, match="larger than 1 MB"):
        load_trace(p)
    assert time.monotonic() - t0 < BOUND_S


def test_names_over_1_mib_are_cut_with_a_note(tmp_path):
    events = two_kernels()
    events[1]["name"] = "a" * (1 << 20) + "MIDDLE" + "z" * (1 << 20)
    tl = load_trace(write_json(tmp_path / "t.json", kineto_doc(events)))
    longest = max(tl.strings, key=len)
    assert len(longest) == (1 << 20) + 1 and longest.startswith("a") and longest.endswith("z")
    assert any("over 1 MiB" in n for n in tl.meta.notes)


def test_nsys_table_that_is_a_recursive_view_is_refused_at_once(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    sql(
        p,
        "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k_old; CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS "
        'WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x AS start, x AS "end" FROM r;',
    )
    t0 = time.monotonic()
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "CUPTI_ACTIVITY_KIND_KERNEL is a view" in line
    assert time.monotonic() - t0 < BOUND_S


def test_nsys_reads_run_under_a_time_budget(tmp_path, monkeypatch):
    """The SQLite progress handler stops any query once the export's budget is spent (here made tiny
    on purpose); the file is refused in one line instead of pinning a thread."""
    p = nsys_copy(tmp_path / "t.sqlite")
    monkeypatch.setenv("TRACELAB_SQLITE_BUDGET_S", "0")  # every budget check fails
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "time budget" in line
    monkeypatch.delenv("TRACELAB_SQLITE_BUDGET_S")
    assert len(load_trace(p).events) > 0  # the default budget reads it


def test_nsys_sparse_rowids_take_few_queries(tmp_path):
    """rowids -2^63 and 2^63-1 in one table used to mean 2^64 / 2M range queries."""
    p = nsys_copy(tmp_path / "t.sqlite")
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    sql(
        p,
        f"UPDATE {t} SET rowid = 9223372036854775807 WHERE rowid = (SELECT max(rowid) FROM {t}); "
        f"UPDATE {t} SET rowid = -9223372036854775808 WHERE rowid = (SELECT min(rowid) FROM {t});",
    )
    tl, elapsed = _timed_load(p)
    expected = sqlite3.connect(p).execute(f"SELECT count(*) FROM {t}").fetchone()[0]
    assert int((tl.events["kind"].isin([4, 5])).sum()) == expected
    assert elapsed < BOUND_S
