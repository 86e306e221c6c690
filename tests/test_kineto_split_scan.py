"""A piece of traceEvents scanned in two halves on two threads (`kineto_rows.split_point` /
`merge_rows`) gives exactly what one scan of the whole piece gives: the same string table, the same
columns. A cut that is not between two top-level events (a `},{` inside a string or a nested array) is
declined by the scanner, and the parser then scans the whole piece."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelab.errors import TracelabError
from tracelab.parsers import kineto, kineto_rows
from tracelab.parsers.detect import load_trace

needs_scanner = pytest.mark.skipif(not kineto_rows.scanner_available(), reason="C scanner not built")
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DATA = Path(__file__).parent / "data"
_CANDIDATE = re.compile(rb"\}[ \t\r\n]*,[ \t\r\n]*\{")

_text = st.text(alphabet=st.sampled_from(list('ab{}[],: "\\é\n')), max_size=10)
_int = st.integers(-(2**40), 2**40)
_args = st.fixed_dictionaries(
    {},
    optional={
        "device": _int, "stream": _int, "correlation": _int, "note": _text,
        "grid": st.tuples(_int, _int, _int).map(list),
        "list": st.lists(st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 9), max_size=2), max_size=3),
    },
)
_event = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "X", "X", "i", "s"]),
        "cat": st.sampled_from(["kernel", "cpu_op", "cuda_runtime", "gpu_memcpy", "python_function"]),
        "name": _text,
        "pid": st.one_of(st.integers(0, 5), st.sampled_from(["Traces", "7"])),
        "tid": st.one_of(st.integers(0, 5), _text),
        "ts": st.floats(0, 1e9, allow_nan=False),
        "dur": st.floats(0, 1e4, allow_nan=False),
        "args": _args,
    }
)


def _piece(events: list, sep: str) -> bytes:
    return ("[" + sep.join(json.dumps(e, ensure_ascii=False) for e in events) + "]").encode()


def _halves(piece: bytes, cut: int):
    return kineto_rows.scan(piece[:cut] + b"]"), kineto_rows.scan(b"[" + piece[cut + 1 :])


def _same_rows(a, b) -> None:
    assert a.n == b.n and a.table == b.table and set(a.cols) == set(b.cols)
    for k in a.cols:
        assert a.cols[k].dtype == b.cols[k].dtype, k
        np.testing.assert_array_equal(a.cols[k], b.cols[k], err_msg=k)


@needs_scanner
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(events=st.lists(_event, min_size=2, max_size=12), sep=st.sampled_from([",", ", ", ",\n  ", " ,\t"]))
def test_halves_merge_to_the_whole_scan_at_every_candidate_cut(events, sep):
    piece = _piece(events, sep)
    whole = kineto_rows.scan(piece)
    if whole is None:  # left to msgspec as a whole: the parser scans halves only to merge them
        return
    boundaries = set()  # the commas between top-level events, found independently of the scanner
    at = 1
    for e in events[:-1]:
        at += len(json.dumps(e, ensure_ascii=False).encode())
        boundaries.add(at + sep.index(","))
        at += len(sep.encode())
    for m in _CANDIDATE.finditer(piece):
        cut = m.start() + m.group().index(b",")
        first, second = _halves(piece, cut)
        if cut in boundaries:
            assert first is not None and second is not None
            _same_rows(kineto_rows.merge_rows(first, second), whole)
        else:  # inside a string or a nested array: a half is not a valid array of events
            assert first is None or second is None


@needs_scanner
def test_split_point_is_near_the_middle_and_skips_small_pieces(monkeypatch):
    piece = _piece([{"ph": "X", "name": "k" * 50, "ts": i, "dur": 1} for i in range(40_000)], ", ")
    cut = kineto_rows.split_point(memoryview(piece))
    assert cut is not None and piece[cut : cut + 1] == b"," and abs(cut - len(piece) / 2) < 200
    assert kineto_rows.split_point(piece[: kineto_rows.SPLIT_MIN - 1]) is None


def _load(path: Path, monkeypatch, split_min: int):
    with monkeypatch.context() as m:
        m.setattr(kineto_rows, "SPLIT_MIN", split_min)
        try:
            return load_trace(path)
        except TracelabError as e:  # the same refusal either way
            return f"{type(e).__name__}: {e}"


def _same_timeline(a, b) -> None:
    if isinstance(a, str) or isinstance(b, str):
        assert a == b
        return
    assert a.strings == b.strings
    assert list(a.events.columns) == list(b.events.columns)
    for c in a.events.columns:
        np.testing.assert_array_equal(a.events[c].to_numpy(), b.events[c].to_numpy(), err_msg=c)
    assert a.lanes.equals(b.lanes) and a.meta == b.meta and a.devices == b.devices


@needs_scanner
@pytest.mark.parametrize("name", ["fixtures", "corpus"])
def test_every_piece_split_gives_the_same_timeline(monkeypatch, name):
    if name == "corpus":
        files = sorted((CORPUS / "hta").glob("*.json.gz"))
        if not files:
            pytest.skip("../shared/corpus absent")
    else:
        files = [f for f in sorted(DATA.rglob("*.json")) + sorted(DATA.rglob("*.json.gz"))
                 if not f.name.endswith("meta.json") and f.stat().st_size > 200][:20]
    merged = []
    real = kineto_rows.merge_rows

    def counting(a, b):
        merged.append(a.n + b.n)
        return real(a, b)

    monkeypatch.setattr(kineto, "merge_rows", counting)
    for path in files:
        _same_timeline(_load(path, monkeypatch, 1), _load(path, monkeypatch, 1 << 40))
    assert merged  # halves were really scanned and merged


@needs_scanner
def test_a_wrong_cut_in_the_middle_falls_back_to_the_whole_piece(tmp_path, monkeypatch):
    """Every event's name holds `}, {` and the pieces are cut where one sits: the halves are declined,
    the whole piece is scanned, and the Timeline is the one an unsplit parse gives."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a}, {" * 30, "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(3000)
    ]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": events}))
    monkeypatch.setattr(kineto, "BLOCK_SIZE", 64 << 10)
    monkeypatch.setattr(kineto_rows, "_BOUNDARY", re.compile(rb"\}, \{"))  # the cut lands inside the names
    declined = []
    real = kineto_rows.scan

    def watching(piece):
        got = real(piece)
        declined.append(got is None)
        return got

    monkeypatch.setattr(kineto, "scan", watching)
    split = _load(p, monkeypatch, 1)
    assert any(declined)  # halves were refused ...
    monkeypatch.setattr(kineto, "scan", real)
    _same_timeline(split, _load(p, monkeypatch, 1 << 40))  # ... and the whole pieces scanned instead
