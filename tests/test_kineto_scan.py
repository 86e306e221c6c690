"""The C scanner (`tracelab/parsers/_kineto_scan.c`) against the msgspec reference path.

The scanner either declines a piece (the parser then decodes it with msgspec) or must give exactly what
the msgspec path gives. Each check loads the same file twice, with and without the scanner, and
compares the whole Timeline (or the error message)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tracelab.errors import TracelabError
from tracelab.parsers import kineto_rows
from tracelab.parsers.detect import load_trace

pytestmark = pytest.mark.skipif(not kineto_rows.scanner_available(), reason="C scanner not built")

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DATA = Path(__file__).parent / "data"


def _load(path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool):
    with monkeypatch.context() as m:
        if not scanner:
            m.setattr(kineto_rows, "_scan", None)
        try:
            return load_trace(path)
        except TracelabError as e:
            return f"{type(e).__name__}: {e}"


def _same(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.strings == b.strings
    assert set(a.events.columns) == set(b.events.columns)
    for c in a.events.columns:
        np.testing.assert_array_equal(a.events[c].to_numpy(), b.events[c].to_numpy(), err_msg=c)
        assert a.events[c].dtype == b.events[c].dtype
    assert a.lanes.equals(b.lanes)
    assert a.meta == b.meta
    assert a.devices == b.devices


def _kineto_files() -> list[Path]:
    files = sorted(DATA.rglob("*.json")) + sorted(DATA.rglob("*.json.gz"))
    return [f for f in files if f.name != "meta.json" and f.stat().st_size > 200][:40]


@pytest.mark.parametrize("path", _kineto_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_fixtures_same_with_and_without_scanner(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


@pytest.mark.corpus
def test_corpus_same_and_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted((CORPUS / "hta").glob("*.json.gz"))
    if not files:
        pytest.skip("../shared/corpus absent")
    for path in files:
        _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))
    # and the scanner really reads the pieces of an ordinary trace (string pids "Traces" included)
    calls: list[bool] = []
    real = kineto_rows._scan
    monkeypatch.setattr(kineto_rows, "_scan", lambda piece: calls.append((r := real(piece)) is not None) or r)
    load_trace(CORPUS / "hta" / "df_index_resolver__df_index_resolver.json.gz")
    assert calls and all(calls), calls


BASE = {
    "ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100.5, "dur": 2.25,
    "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [4, 5, 6],
             "registers per thread": 32, "shared memory": 0, "External id": 9},
}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 99.0,
          "dur": 1.0, "args": {"correlation": 5}}
META = {"ph": "M", "name": "process_name", "pid": "Traces", "tid": "Trace PyTorch Profiler", "args": {"name": "x"}}

# each variant is one raw JSON text for the kernel event: odd types, escapes, duplicates, nulls, ...
VARIANTS = [
    '{"ph": "X", "cat": "kernel", "name": "k\\u00e9\\n\\"q\\"", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e2, "dur": 2E0, "args": null}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": "3", "tid": "stream 9", "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": null, "tid": null, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "ts": 50}',
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0.0, "stream": 7}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": true, "stream": 7}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "grid": [1, 2], "block": null}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "grid": [1, 2, 3000000000], "block": [-2147483648, 1, 1]}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "registers per thread": 4294967296}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 123456789012345678901, "stream": 7}}'),
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e400, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": -0, "dur": -0.0}',
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": -5, '
    '"args": {"x": [1, {"y": "\\ud800"}]}}'),
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "extra": "\\q"}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "extra": [1,]}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "t\\u0073": 7}',
    '{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "x": "\xff"}',
    '{"ph": "X", "cat": 5, "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "\xff", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "\xe9": 1}',
    ('{"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "correlation": 5, "cuda_sync_kind": ""}}'),
    ('{"ph": "X", "cat": "cuda_sync", "name": "x", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 4294967295, "correlation": 5, "cuda_sync_kind": "event sync"}}'),
    '{"ph": "i", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "s": "g"}',
    '{"ph": "X", "cat": "gpu_user_annotation", "name": "a", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "nest": ' + "[" * 70 + "]" * 70 + "}}",
    '{"ph" : "X" ,\t"cat":"kernel" ,\r\n"name":"k","pid":0,"tid":7,"ts":100,"dur":2 }',
    "{}",
]


@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_odd_events_same_with_and_without_scanner(
    variant: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ",\n".join([json.dumps(LAUNCH), VARIANTS[variant], json.dumps(BASE), json.dumps(META)])
    text = '{"schemaVersion": 1, "traceEvents": [' + body + "]}"
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


def test_truncated_and_corrupt_pieces_give_the_reference_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ",\n".join(json.dumps(dict(BASE, ts=100.0 + i)) for i in range(2000))
    full = '{"traceEvents": [' + body + "]}"
    for cut in (len(full) // 3, len(full) // 2, len(full) - 3):
        for text in (full[:cut], full[:cut] + '"}' + full[cut:], full.replace('"dur": 2.25', '"dur" 2.25', 1)):
            path = tmp_path / "c.json.gz"
            path.write_bytes(gzip.compress(text.encode()))
            _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))
