"""The block reader under the Kineto parser: gzip inflated in big zlib steps gives exactly what
`gzip.decompress` gives (several members, zero padding, any block size), corrupt and truncated gzip
are one-line errors, and a reader started ahead of the parse is handed to the parse of that very
file only."""

from __future__ import annotations

import gzip
import os
import threading
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelab.parsers import file_reader
from tracelab.parsers.file_reader import BlockReader, ChunkError, claim, read_ahead, release_unclaimed


def _read_all(path, block: int) -> bytes:
    reader = BlockReader(path, block)
    try:
        parts = []
        while data := reader.read():
            assert len(data) <= block
            parts.append(data)
        return b"".join(parts)
    finally:
        reader.close()


@settings(max_examples=40, deadline=None)
@given(
    members=st.lists(st.binary(max_size=3000), min_size=1, max_size=4),
    padding=st.lists(st.integers(0, 5), min_size=4, max_size=4),
    block=st.integers(1, 5000),
    level=st.integers(0, 9),
)
def test_gunzip_gives_what_gzip_gives(tmp_path_factory, members, padding, block, level):
    data = b"".join(gzip.compress(m, level) + b"\x00" * padding[i] for i, m in enumerate(members))
    p = tmp_path_factory.mktemp("gz") / "t.json.gz"
    p.write_bytes(data)
    assert _read_all(p, block) == gzip.decompress(data)


def test_big_member_in_megabyte_steps(tmp_path, monkeypatch):
    monkeypatch.setattr(file_reader, "_GZIP_INPUT", 1000)  # many input steps per block
    raw = os.urandom(1 << 16).hex().encode() * 8  # ~1 MB, compresses ~2:1
    p = tmp_path / "big.json.gz"
    p.write_bytes(gzip.compress(raw) + gzip.compress(b"tail"))
    assert _read_all(p, 1 << 18) == raw + b"tail"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (gzip.compress(b"x" * 10_000)[:-40], "truncated gzip stream"),
        (gzip.compress(b"abc") + b"xy", "corrupt gzip data (Not a gzipped file (b'xy'))"),
        (gzip.compress(b"abc") + b"\x00\x00z", "corrupt gzip data (Not a gzipped file (b'z'))"),
        (b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4, "corrupt gzip data ("),
        (gzip.compress(b"abc")[:-8] + b"\x00" * 8, "corrupt gzip data ("),  # wrong CRC and length
    ],
)
def test_bad_gzip_is_one_line(tmp_path, data, message):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(data)
    with pytest.raises(ChunkError) as info:
        _read_all(p, 4096)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert p.read_bytes() == data


def test_read_ahead_is_claimed_once_by_the_same_file(tmp_path):
    raw = b'{"traceEvents": [' + b",".join(b'{"ph": "X"}' for _ in range(1000)) + b"]}"
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(raw))
    before = sorted(os.listdir(tmp_path))
    assert read_ahead(p, 4096)
    assert claim(p, 8192) is None  # another block size: not this reader
    reader = claim(p, 4096)
    assert reader is not None and claim(p, 4096) is None  # handed over once
    parts = []
    while data := reader.read():
        parts.append(data)
    reader.close()
    assert b"".join(parts) == raw
    assert sorted(os.listdir(tmp_path)) == before  # nothing written beside the input


def test_read_ahead_of_a_changed_file_is_not_claimed(tmp_path):
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": []}')
    assert read_ahead(p, 4096)
    p.write_bytes(b'{"traceEvents": [], "x": 1}')  # another size: another file
    assert claim(p, 4096) is None
    release_unclaimed()
    assert not [t for t in threading.enumerate() if t.name == "tracelab-read"]


@pytest.mark.parametrize(
    ("head", "started"),
    [
        (b"SQLite format 3\x00" + b"\x00" * 100, False),
        (b"\x89PNG\r\n\x1a\n", False),
        (b"", False),
        (b"\xef\xbb\xbf  \n{", True),
        (b"[{}]", True),
        (zlib.compress(b"{}"), False),  # zlib, not gzip
        (gzip.compress(b"{}"), True),
    ],
)
def test_read_ahead_starts_only_for_json_traces(tmp_path, head, started):
    p = tmp_path / "f"
    p.write_bytes(head)
    assert read_ahead(p, 4096) is started
    assert read_ahead(tmp_path, 4096) is False and read_ahead(tmp_path / "missing", 4096) is False
    release_unclaimed()
