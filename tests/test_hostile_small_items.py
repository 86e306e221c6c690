"""Issue 11, the smaller items: a BOM or long leading whitespace is accepted; FIFOs, devices and
unreadable files get one clear line without blocking; a directory mixing an nsys export with a Kineto
trace is refused instead of merged; bidi overrides never reach reports; a kernel without
args.device/stream gets the lane of its pid/tid with a note; `.sqlite.gz` and `.json.zst` are read
everywhere inputs are (issue 12, input side)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
import zstandard
from hostile_util import (
    analyze_json,
    cli,
    kineto_doc,
    launch,
    nsys_copy,
    one_error_line,
    two_kernels,
    write_json,
)

from tracelab.errors import TraceFormatError
from tracelab.io import load_trace
from tracelab.io.nsys import files as nsys_files


def _body() -> bytes:
    return json.dumps(kineto_doc(two_kernels())).encode()


@pytest.mark.parametrize(
    "prefix", [b"\xef\xbb\xbf", b" " * 64, b"\n" * 65, b"\xef\xbb\xbf" + b"\r\n\t " * 1000, b" " * (3 << 20)]
)
def test_bom_and_long_leading_whitespace_are_accepted(tmp_path, prefix):
    p = write_json(tmp_path / "t.json", prefix + _body())
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    doc = analyze_json(tmp_path / "s.db", res.stdout.split()[0])
    assert doc["devices"][0]["busy_ns"] == 15_000


@pytest.mark.parametrize("command", ["import", "analyze"])
@pytest.mark.parametrize("special", ["fifo", "/dev/zero", "/dev/null"])
def test_fifo_and_devices_get_one_line_without_blocking(tmp_path, command, special):
    if special == "fifo":
        path = tmp_path / "pipe.json"
        os.mkfifo(path)  # nobody writes to it: opening it for reading would block forever
    else:
        path = Path(special)
    line = one_error_line(cli(tmp_path / "s.db", command, str(path)), path)
    assert "no such file" not in line
    assert ("FIFO" in line) if special == "fifo" else ("device" in line)


@pytest.mark.skipif(not Path("/proc/self/mem").is_file(), reason="needs Linux /proc")
def test_unreadable_file_is_one_line(tmp_path):
    """The tests run as root here, so chmod cannot make a file unreadable; /proc/self/mem is a regular
    file whose read fails (EIO), which takes the same path as EACCES."""
    path = Path("/proc/self/mem")
    line = one_error_line(cli(tmp_path / "s.db", "import", str(path)), path)
    assert "cannot read" in line


def test_directory_with_nsys_and_unrelated_kineto_is_refused(tmp_path):
    d = tmp_path / "mixed"
    d.mkdir()
    nsys_copy(d / "rank0.sqlite")
    write_json(d / "rank1.json", kineto_doc(two_kernels()))
    line = one_error_line(cli(tmp_path / "s.db", "import", str(d)), d)
    assert "mixes nsys exports" in line and "rank0.sqlite" in line and "rank1.json" in line


def test_bidi_override_never_reaches_reports(tmp_path):
    events = two_kernels()
    events[1]["name"] = "\u202egnp.exe\u2066"
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    tl = load_trace(p)
    assert not any(ch in s for s in tl.strings for ch in "\u202e\u2066")
    assert "\ufffdgnp.exe\ufffd" in tl.strings
    res = cli(tmp_path / "s.db", "import", str(p))
    rid = res.stdout.split()[0]
    for fmt in ("md", "html", "json"):
        out = tmp_path / f"r.{fmt}"
        res = cli(tmp_path / "s.db", "report", rid, "-o", str(out))
        assert res.exit_code == 0, res.stderr
        text = out.read_text(encoding="utf-8")
        # (plotly.js, inlined in the HTML, has U+202E in its own code: look at the name only)
        assert "\u202egnp" not in text and "\\u202egnp" not in text.lower()


def test_bidi_override_in_a_device_name_is_neutralized(tmp_path):
    props = [{"id": 0, "name": "NVIDIA \u202eH200", "numSms": 132}]
    tl = load_trace(write_json(tmp_path / "t.json", {"deviceProperties": props, "traceEvents": two_kernels()}))
    assert [d.name for d in tl.devices] == ["NVIDIA \ufffdH200"]
    assert "\u202e" not in tl.meta.gpu


@pytest.mark.parametrize("missing", ["device", "stream", "both"])
def test_kernel_without_device_or_stream_gets_the_lane_of_its_pid_tid(tmp_path, missing):
    events = two_kernels()
    k = {
        "ph": "X",
        "cat": "kernel",
        "name": "lonely",
        "pid": 3,
        "tid": 11,
        "ts": 1030,
        "dur": 4,
        "args": {"device": 3, "stream": 11, "correlation": 9},
    }
    for field in ("device", "stream") if missing == "both" else (missing,):
        del k["args"][field]
    events += [launch(1028, 9), k]
    tl = load_trace(write_json(tmp_path / "t.json", kineto_doc(events)))
    row = tl.events[tl.names(tl.events["name"]) == "lonely"]
    assert (row["device"].tolist(), row["stream"].tolist()) == ([3], [11])
    assert any("placed on the lane of their pid" in n and "lonely" in n for n in tl.meta.notes)


def test_kernel_without_device_and_without_numeric_pid_is_refused_in_one_line(tmp_path):
    """Nothing names a lane for it (no args.device/stream, pid/tid not numbers): the file is refused, as
    before, rather than analysed without that kernel."""
    events = [
        *two_kernels(),
        {
            "ph": "X",
            "cat": "kernel",
            "name": "nowhere",
            "pid": "GPU",
            "tid": "x",
            "ts": 1030,
            "dur": 4,
            "args": {"correlation": 9},
        },
    ]
    p = write_json(tmp_path / "t.json", kineto_doc(events))
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "cannot be placed on a GPU lane" in line and "nowhere" in line


def test_gzipped_nsys_export_and_zstd_kineto_trace_import(tmp_path):
    raw = nsys_copy(tmp_path / "plain.sqlite").read_bytes()
    gz = tmp_path / "in" / "run.sqlite.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(raw, 1))
    zst = tmp_path / "in" / "t.json.zst"
    zst.write_bytes(zstandard.ZstdCompressor().compress(_body()))
    plain = load_trace(tmp_path / "plain.sqlite")
    from_gz = load_trace(gz)
    assert len(from_gz.events) == len(plain.events)
    assert from_gz.meta.source == str(gz)
    assert len(load_trace(zst).gpu_events()) == 2
    for p in (gz, zst):
        res = cli(tmp_path / "s.db", "import", str(p))
        assert res.exit_code == 0, res.stderr


def test_directory_of_zstd_ranks(tmp_path):
    d = tmp_path / "ranks"
    d.mkdir()
    for r in range(2):
        doc = kineto_doc(two_kernels(), distributedInfo={"rank": r, "world_size": 2})
        (d / f"rank{r}.json.zst").write_bytes(zstandard.ZstdCompressor().compress(json.dumps(doc).encode()))
    tl = load_trace(d)
    assert tl.meta.ranks == (0, 1)
    assert len(tl.gpu_events()) == 4


def test_gzipped_export_inflating_past_the_limit_is_refused(tmp_path, monkeypatch):
    p = tmp_path / "big.sqlite.gz"
    p.write_bytes(gzip.compress(nsys_copy(tmp_path / "x.sqlite").read_bytes(), 1))
    monkeypatch.setattr(nsys_files, "MAX_PRIVATE_COPY", 1 << 20)
    with pytest.raises(TraceFormatError, match="inflates to more than"):
        load_trace(p)


def test_corrupt_zstd_is_one_line(tmp_path):
    p = tmp_path / "t.json.zst"
    p.write_bytes(zstandard.ZstdCompressor().compress(_body())[:-20])
    line = one_error_line(cli(tmp_path / "s.db", "import", str(p)), p)
    assert "zstd" in line or "truncated" in line
