"""Parallel chunk decoding of one Kineto file (tracelab.parsers.kineto_parallel) gives the Timeline the
serial parser gives, byte for byte: on recorded traces cut into many small pieces, on a trace whose
strings contain `},` so that speculative cuts are rejected (serial fallback), and on corrupt input
(the serial error message)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

from tracelab.errors import TraceFormatError
from tracelab.parsers import kineto, load_trace
from tracelab.parsers.kineto_parallel import load_kineto_parallel

DATA = Path(__file__).resolve().parent / "data"


def assert_identical(a, b) -> None:
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.lanes, b.lanes)
    assert a.strings == b.strings and a.devices == b.devices and a.meta == b.meta and a.contexts == b.contexts


@pytest.mark.parametrize(
    "trace,block",
    [(DATA / "torch_mixed_small" / "trace.json.gz", 1 << 14), (DATA / "ddp" / "rank1.json.gz", 1 << 16)],
)
def test_same_timeline_as_serial(monkeypatch, trace, block):
    monkeypatch.setattr(kineto, "BLOCK_SIZE", block)  # the serial parser cuts the same pieces
    serial = kineto.load_kineto(trace)
    parallel = load_kineto_parallel(trace, workers=2, block_size=block)
    assert_identical(serial, parallel)
    from tracelab.parsers import kineto_parallel

    # really cut into many pieces and decoded by the workers, without falling back
    assert kineto_parallel.last_stats["pieces"] > 4 and kineto_parallel.last_stats["fallback"] == ""


def _tricky_trace() -> dict:
    """Kernels whose names hold `},` and `}, {` text, so candidate cuts land inside strings."""
    ev = []
    for i in range(400):
        t = 1000.0 + 10 * i
        ev.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 2,
                "ts": t,
                "dur": 2.0,
                "args": {"correlation": i},
            }
        )
        ev.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "k" + str(i % 7) + '<"}, {", {"a": 1}},>',
                "pid": 0,
                "tid": 7,
                "ts": t + 3,
                "dur": 4.0,
                "args": {"device": 0, "stream": 7, "correlation": i},
            }
        )
    return {"schemaVersion": 1, "traceEvents": ev}


def test_rejected_speculative_cuts_fall_back_to_the_serial_result(tmp_path, monkeypatch):
    p = tmp_path / "tricky.json"
    p.write_text(json.dumps(_tricky_trace()))
    monkeypatch.setattr(kineto, "BLOCK_SIZE", 512)
    serial = kineto.load_kineto(p)
    assert len(serial.events) == 800 and any("}, {" in s for s in serial.strings)
    assert_identical(serial, load_kineto_parallel(p, workers=2, block_size=512))
    from tracelab.parsers import kineto_parallel

    # a cut inside a string was rejected by a worker (as invalid JSON, or as a piece that is not all events)
    assert kineto_parallel.last_stats["fallback"] in ("PieceRejected", "ChunkError")


def test_corrupt_file_gives_the_serial_error(tmp_path, monkeypatch):
    doc = _tricky_trace()
    raw = json.dumps(doc).encode()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(gzip.compress(raw[: len(raw) // 2]))
    with pytest.raises(TraceFormatError) as serial_err:
        kineto.load_kineto(p)
    with pytest.raises(TraceFormatError) as parallel_err:
        load_kineto_parallel(p, workers=2, block_size=1024)
    assert str(parallel_err.value) == str(serial_err.value) and "cut.json.gz" in str(parallel_err.value)


def test_opt_in_through_the_environment(monkeypatch):
    trace = DATA / "torch_mixed_small" / "trace.json.gz"
    serial = load_trace(trace)
    monkeypatch.setenv("TRACELAB_DECODE_WORKERS", "2")
    assert_identical(serial, load_trace(trace))
    monkeypatch.setenv("TRACELAB_DECODE_WORKERS", "many")
    with pytest.raises(Exception, match="TRACELAB_DECODE_WORKERS must be a positive integer"):
        load_trace(trace)
