"""load_trace dispatch by content, multi-rank directories, fingerprints, and bad input."""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_kineto import current_trace, legacy_trace

from tracelab.errors import BadInput, MissingDependency, TraceFormatError
from tracelab.io import load_trace, trace_fingerprint
from tracelab.io.detect import sniff
from tracelab.model import EventKind

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"


def write_json(path: Path, doc, gz: bool = False) -> Path:
    raw = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(raw) if gz else raw)
    return path


def rank_trace(rank: int | None, ts0: float = 1000.0) -> dict:
    doc = current_trace()
    if rank is None:
        doc.pop("distributedInfo")
    else:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": 4}
    for e in doc["traceEvents"]:
        if "ts" in e:
            e["ts"] += ts0
    return doc


def test_kineto_by_content_not_extension(tmp_path):
    p = write_json(tmp_path / "trace.txt", current_trace(), gz=True)
    assert sniff(p) == "json"
    tl = load_trace(p)
    assert tl.meta.format == "kineto" and tl.meta.ranks == (3,)
    assert (tl.events["kind"] == EventKind.KERNEL).sum() == 2


def test_directory_of_ranks_uses_distributed_info(tmp_path):
    d = tmp_path / "job"
    d.mkdir()
    for r in (2, 0, 1):
        write_json(d / f"host_{r * 7}.json", rank_trace(r))
    tl = load_trace(d)
    tl.validate()
    assert tl.meta.ranks == (0, 1, 2)
    assert sorted(set(tl.events["rank"])) == [0, 1, 2]
    assert {(dv.rank, dv.device) for dv in tl.devices} == {(r, g) for r in (0, 1, 2) for g in (0, 1)}
    assert tl.meta.stats["orphan_gpu_events"] == 3  # one per file
    assert tl.meta.extra["files"] == {"host_0.json": 0, "host_14.json": 2, "host_7.json": 1}
    kernels = tl.events[tl.events["kind"] == EventKind.KERNEL]
    assert len(kernels) == 6


def test_directory_ranks_from_names_then_order(tmp_path):
    d = tmp_path / "by_name"
    d.mkdir()
    for r in (5, 3):
        write_json(d / f"worker{r}_step_12.pt.trace.json", rank_trace(None))
    assert load_trace(d).meta.ranks == (3, 5)

    d2 = tmp_path / "by_order"
    d2.mkdir()
    write_json(d2 / "a.json", rank_trace(None))
    write_json(d2 / "b.json.gz", legacy_trace(), gz=True)
    tl = load_trace(d2)
    assert tl.meta.ranks == (0, 1)
    assert tl.meta.extra["files"] == {"a.json": 0, "b.json.gz": 1}

    # two files claiming the same distributedInfo rank fall back to their names
    d3 = tmp_path / "dup"
    d3.mkdir()
    write_json(d3 / "rank-4.json", rank_trace(1))
    write_json(d3 / "rank-6.json", rank_trace(1))
    assert load_trace(d3).meta.ranks == (4, 6)


def test_run_directory_goes_through_load_run_dir(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    write_json(d / "trace.json.gz", current_trace(), gz=True)
    (d / "meta.json").write_text(
        json.dumps(
            {
                "workload": "copy_compute",
                "variant": "print_loss",
                "backend": "torch",
                "trace_file": "trace.json.gz",
                "gpu": {"name": "NVIDIA H100 80GB HBM3"},
            }
        )
    )
    tl = load_trace(d)
    assert (tl.meta.workload, tl.meta.variant, tl.meta.backend) == ("copy_compute", "print_loss", "torch")
    assert tl.meta.source == str(d)


def test_fingerprint_file_and_directory(tmp_path):
    p = write_json(tmp_path / "a.json", current_trace())
    assert trace_fingerprint(p) == hashlib.sha256(p.read_bytes()).hexdigest()
    d = tmp_path / "dir"
    d.mkdir()
    shutil.copy(p, d / "x.json")
    write_json(d / "y.json", legacy_trace())
    before = trace_fingerprint(d)
    (d / "x.json").rename(d / "z.json")  # names do not matter, content does
    assert trace_fingerprint(d) == before
    write_json(d / "y.json", rank_trace(1))
    assert trace_fingerprint(d) != before
    with pytest.raises(BadInput):
        trace_fingerprint(tmp_path / "missing.json")


def test_sqlite_dispatches_to_nsys_parser(tmp_path):
    p = tmp_path / "notnsys.sqlite"
    with sqlite3.connect(p) as db:
        db.execute("create table t (x)")
    db.close()
    assert sniff(p) == "sqlite"
    with pytest.raises(BadInput) as info:
        load_trace(p)
    assert "\n" not in str(info.value) and str(p) in str(info.value)


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not present at {CORPUS}")
def test_real_nsys_sqlite_and_rep():
    tl = load_trace(CORPUS / "nvfuser" / "report2.sqlite")
    assert tl.meta.format == "nsys" and (tl.events["kind"] == EventKind.KERNEL).sum() == 19
    rep = CORPUS / "nvfuser" / "report1.nsys-rep"
    from tracelab.io.nsys.load import find_nsys

    if find_nsys() is None:
        with pytest.raises(MissingDependency) as info:
            load_trace(rep)
        assert "nsys" in str(info.value) and "\n" not in str(info.value)
    else:  # pragma: no cover - only where nsys is installed
        assert load_trace(rep).meta.source == str(rep)


@pytest.mark.parametrize(
    "name,data,words",
    [
        ("empty.json", b"", "empty"),
        ("blank.json", b"  \n ", "empty"),
        ("picture.json", b"\x89PNG\r\n\x1a\n" + b"\x00" * 64, "PNG"),
        ("garbage.json.gz", b"\x1f\x8b\x08\x00" + bytes(range(200)), "gzip"),
        ("noevents.json", b'{"schemaVersion": 1, "deviceProperties": []}', "traceEvents"),
        ("truncated.json", json.dumps(current_trace()).encode()[:-500], "truncated"),
        ("random.bin", bytes(range(3, 200)), "not a trace"),
    ],
)
def test_bad_files_raise_one_line(tmp_path, name, data, words):
    p = tmp_path / name
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        load_trace(p)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(p)) and words.lower() in msg.lower()
    assert p.read_bytes() == data


def test_missing_path_and_empty_dir(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_trace(tmp_path / "nope.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="no traces"):
        load_trace(tmp_path / "empty")


def test_bad_file_inside_rank_directory_names_that_file(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    write_json(d / "rank0.json", rank_trace(0))
    (d / "rank1.json").write_bytes(b'{"traceEvents": [{"ph": "X"')
    with pytest.raises(TraceFormatError) as info:
        load_trace(d)
    assert str(d / "rank1.json") in str(info.value)


def test_progress_over_directory(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(3):
        write_json(d / f"rank{r}.json", rank_trace(r))
    seen: list[tuple[int, int]] = []
    load_trace(d, progress=lambda done, total: seen.append((done, total)))
    total = sum(p.stat().st_size for p in d.iterdir())
    assert seen[-1] == (total, total)
    assert all(a <= b for (a, _), (b, _) in itertools.pairwise(seen))


def zlib_raw(data: bytes) -> bytes:
    """Raw deflate data (no zlib / gzip wrapper) followed by a gzip trailer (CRC-32, size)."""
    import struct
    import zlib

    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush() + struct.pack("<II", zlib.crc32(data), len(data))


def _gzip_module_head(path: Path, n: int = 16) -> bytes:
    """The reference: what the `gzip` module reads first from the file (b'' when it cannot)."""
    import zlib

    try:
        with gzip.open(path, "rb") as g:
            return g.read(n)
    except (OSError, EOFError, zlib.error):
        return b""


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(gzip.compress(b"SQLite format 3\x00" + b"x" * 5000), id="sqlite header"),
        pytest.param(gzip.compress(b'{"traceEvents": []}'), id="json"),
        pytest.param(gzip.compress(b"") + gzip.compress(b"SQLite format 3\x00rest"), id="empty first member"),
        pytest.param(gzip.compress(b"SQLite") + gzip.compress(b" format 3\x00rest"), id="header over two members"),
        pytest.param(gzip.compress(b"short"), id="fewer than 16 bytes"),
        pytest.param(gzip.compress(b"SQLite format 3\x00" * 100)[:30], id="truncated"),
        pytest.param(gzip.compress(b"SQLite format 3\x00")[:12] + b"\xff" * 40, id="corrupt deflate data"),
        pytest.param(b"\x1f\x8b\x09" + gzip.compress(b"abc" * 20)[3:], id="unknown method"),
        pytest.param(b"\x1f\x8b" + b"\x00" * 30, id="bad header"),
        pytest.param(
            b"\x1f\x8b\x08\x02" + b"\x00" * 6 + b"\xde\xad" + zlib_raw(b"SQLite format 3\x00tail"), id="header CRC (wrong)"
        ),
    ],
)
def test_gzip_sniff_reads_what_the_gzip_module_reads(tmp_path, data):
    """The sniff's first bytes of a gzip file (zlib on the first member's start, `gzip` when that gives too
    few) are those the `gzip` module reads, for odd members and broken files too; the kind follows."""
    from tracelab.io.detect import _gzip_head

    p = tmp_path / "t.gz"
    p.write_bytes(data)
    assert _gzip_head(p) == _gzip_module_head(p)
    assert _gzip_head(p, 4) == _gzip_module_head(p, 4)

