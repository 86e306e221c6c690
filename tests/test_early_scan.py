"""The early scanner (`tracelab/parsers/early_scan.py`): pieces cut and scanned while the command line
imports numpy, taken by the parser, which goes on from where the scan stopped. Whatever the scan did
before the parser arrived (everything, nothing, or up to a piece it declined), the Timeline, or the
one-line error, is the one the parser gives alone."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_kineto import BAD, current_trace
from timeline_compare import assert_same_timeline

from tracelab.errors import TracelabError
from tracelab.parsers import early_scan, kineto, kineto_rows
from tracelab.parsers.block_reader import file_key

pytestmark = pytest.mark.skipif(early_scan.scan is None, reason="C scanner not built")

ROOT = Path(__file__).resolve().parents[1]
CORPUS_TRACE = ROOT.parent / "shared" / "corpus" / "hta" / "df_index_resolver__df_index_resolver.json.gz"


def _parse(path: Path):
    try:
        return kineto.load_kineto(path)
    except TracelabError as e:
        return f"{type(e).__name__}: {e}"


def _settle(path: Path) -> None:
    """Wait until the early scan of `path` has done all it will do before a parser arrives."""
    scan = early_scan._early[file_key(path)]
    deadline = time.monotonic() + 20
    while scan._thread.is_alive() and scan._results.qsize() < early_scan.AHEAD and time.monotonic() < deadline:
        time.sleep(0.002)


def _early_then_parse(path: Path, block: int, monkeypatch, settle: bool = True):
    """(the parse after an early scan, how many of its pieces the parser took)"""
    monkeypatch.setattr(kineto, "BLOCK_SIZE", block)
    taken = []
    real = kineto._Parsed.add_scanned
    monkeypatch.setattr(kineto._Parsed, "add_scanned", lambda self, piece: taken.append(1) or real(self, piece))
    started = early_scan.start(path, block)
    if started and settle:
        _settle(path)
    try:
        return _parse(path), len(taken), started
    finally:
        early_scan.discard()


def _alone(path: Path, block: int, monkeypatch):
    monkeypatch.setattr(kineto, "BLOCK_SIZE", block)
    return _parse(path)


def _many_events(copies: int = 40) -> dict:
    """current_trace() repeated, with an event whose strings hold '},{' and escaped quotes."""
    doc = current_trace()
    tricky = {
        "ph": "X", "cat": "cpu_op", "name": 'weird "}, {" name \\\\', "pid": 100, "tid": 101, "ts": 1001.0,
        "dur": 1.0, "args": {"list": [{"a": 1}, {"b": "}, {"}]},
    }  # fmt: skip
    events = []
    for i in range(copies):
        for e in [*doc["traceEvents"], tricky]:
            e = json.loads(json.dumps(e))
            e["ts"] += i * 1000
            if "correlation" in e.get("args", {}):
                e["args"]["correlation"] += i * 100
            events.append(e)
    return {**doc, "traceEvents": events}


def _write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    data = text.encode() if isinstance(text, str) else text
    p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return p


@pytest.mark.parametrize("block", [97, 1000, 4096, 1 << 20])
@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
@pytest.mark.parametrize("settle", [True, False], ids=["scanned ahead", "parser at once"])
def test_same_timeline_with_and_without_the_early_scan(tmp_path, monkeypatch, block, name, settle):
    p = _write(tmp_path, name, "\n  " + json.dumps(_many_events(), indent=1))
    alone = _alone(p, block, monkeypatch)
    early, taken, started = _early_then_parse(p, block, monkeypatch, settle)
    assert started
    assert_same_timeline(early, alone)
    if settle and block < 4096:
        assert taken > 1  # the parser really took scanned pieces (a 1 MB block holds the whole file)


@pytest.mark.parametrize(
    "case",
    [
        "metadata first (the array starts past the first block)",
        "bare array",
        "BOM",
        "a piece the scanner declines",
        "whitespace between events",
    ],
)
def test_cases_the_early_scan_leaves_to_the_parser(tmp_path, monkeypatch, case):
    doc = _many_events(20)
    if case.startswith("metadata first"):
        text = json.dumps({"otherData": ["x" * 100] * 50, **doc})
    elif case == "bare array":
        text = json.dumps(doc["traceEvents"])
    elif case == "BOM":
        text = "\ufeff" + json.dumps(doc)
    elif case == "a piece the scanner declines":
        doc["traceEvents"][150]["ts"] = "1" * 30  # a string timestamp: the scanner declines, msgspec reads
        text = json.dumps(doc)
    else:
        text = json.dumps(doc).replace('}, {"ph"', '},    \n\n   {"ph"')
    p = _write(tmp_path, "t.json", text)
    for block in (97, 1000):
        assert_same_timeline(_early_then_parse(p, block, monkeypatch)[0], _alone(p, block, monkeypatch))


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_gives_the_same_error(tmp_path, monkeypatch, name):
    p = tmp_path / name
    p.write_bytes(BAD[name]())
    for block in (97, 4096):
        early, _taken, _started = _early_then_parse(p, block, monkeypatch)
        alone = _alone(p, block, monkeypatch)
        assert isinstance(alone, str) and early == alone


def test_corrupt_gzip_after_scanned_pieces_is_the_same_error(tmp_path, monkeypatch):
    good = gzip.compress(json.dumps(_many_events()).encode())
    p = tmp_path / "t.json.gz"
    p.write_bytes(good[: len(good) // 2] + bytes(200) + good[len(good) // 2 :])
    early, taken, _ = _early_then_parse(p, 1000, monkeypatch)
    alone = _alone(p, 1000, monkeypatch)
    assert isinstance(alone, str) and "corrupt gzip data" in alone and early == alone and taken > 0


def test_an_error_of_the_scanning_thread_is_raised_not_skipped(tmp_path, monkeypatch):
    """Pieces are never lost: a failure of the early thread itself (not of the file) stops the parse."""
    p = _write(tmp_path, "t.json", json.dumps(_many_events()))
    calls = []
    real = early_scan.scan

    def failing(piece):
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("simulated")
        return real(piece)

    monkeypatch.setattr(early_scan, "scan", failing)
    with pytest.raises(MemoryError, match="simulated"):
        _early_then_parse(p, 1000, monkeypatch)


def test_discard_stops_an_untaken_scan_and_its_reader(tmp_path):
    p = _write(tmp_path, "t.json", json.dumps(_many_events()))
    assert early_scan.start(p, 97)
    scan = early_scan._early[file_key(p)]
    _settle(p)
    early_scan.discard()
    assert not early_scan._early and not scan._thread.is_alive() and not scan.reader._thread.is_alive()


def test_early_scan_starts_only_for_regular_json_or_gzip_files(tmp_path):
    sqlite = _write(tmp_path, "t.sqlite", b"SQLite format 3\x00" + bytes(100))
    assert not early_scan.start(sqlite)
    assert not early_scan.start(tmp_path)
    assert not early_scan.start(tmp_path / "missing.json")
    if hasattr(os, "mkfifo"):  # opening a FIFO must not wait for a writer
        fifo = tmp_path / "pipe.json"
        os.mkfifo(fifo)
        assert not early_scan.start(fifo)
    assert not early_scan._early


def test_scanner_off_gives_no_early_scan(tmp_path, monkeypatch):
    monkeypatch.setattr(early_scan, "scan", None)
    assert not early_scan.start(_write(tmp_path, "t.json", json.dumps(current_trace())))
    assert kineto_rows.scanner_available()  # (only the early path was turned off)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS_TRACE.exists(), reason="../shared/corpus absent")
def test_the_command_gives_the_same_document_with_and_without_the_early_scan():
    """`tracelab analyze --json` on a 54 MB corpus trace: the early scan is on by default;
    TRACELAB_DECODE_WORKERS (here 1: this process) turns it off."""
    run = [sys.executable, "-m", "tracelab", "analyze", "--json", str(CORPUS_TRACE)]
    env = {k: v for k, v in os.environ.items() if k != "TRACELAB_DECODE_WORKERS"}
    with_early = subprocess.run(run, capture_output=True, env=env, check=True, timeout=300)
    without = subprocess.run(run, capture_output=True, env={**env, "TRACELAB_DECODE_WORKERS": "1"}, check=True, timeout=300)
    assert with_early.stdout == without.stdout and with_early.stdout.startswith(b"{")
