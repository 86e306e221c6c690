"""The event chunk encoder (tracelab/store/chunks.py `encode`) gives the same chunks whether its columns
are encoded one after the other or on several threads, on real recorded traces, with chunks of every size."""

from __future__ import annotations

import lzma
from pathlib import Path

import numpy as np
import pytest

from tracelab.io.detect import load_trace
from tracelab.store.chunks import decode, encode
from tracelab.store.schema import CHUNK_COLUMNS

DATA = Path(__file__).parent / "data"


def _nsys(name: str, tmp_path: Path) -> Path:
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    return out


@pytest.mark.parametrize("name", ["nsys_mixed_small", "host_blocked_nsys", "train_plain_nsys", "torch_mixed_small"])
@pytest.mark.parametrize("size", [None, 1, 7, 100])
def test_parallel_encoder_equals_serial(name: str, size: int | None, tmp_path: Path) -> None:
    path = DATA / name if (DATA / name).is_dir() else _nsys(name, tmp_path)
    ev = load_trace(path).events
    serial = encode(ev, CHUNK_COLUMNS, size=size, workers=1)
    for workers in (2, 5):
        par = encode(ev, CHUNK_COLUMNS, size=size, workers=workers)
        assert par.blobs == serial.blobs
        for f in ("lane", "start_min", "start_max", "end_max", "max_dur", "n", "kinds"):
            np.testing.assert_array_equal(getattr(par, f), getattr(serial, f), err_msg=f)
    # and the chunks decode back to the events
    chunks = [decode(b, int(k), list(CHUNK_COLUMNS)) for b, k in zip(serial.blobs, serial.n)]
    seq = np.concatenate([c["seq"] for c in chunks])
    assert sorted(seq.tolist()) == list(range(len(ev)))
    for c in CHUNK_COLUMNS[1:]:
        np.testing.assert_array_equal(np.concatenate([ch[c] for ch in chunks]), ev[c].to_numpy()[seq], err_msg=c)


def test_empty_timeline_encodes_no_chunk(tmp_path: Path) -> None:
    ev = load_trace(_nsys("nsys_mixed_small", tmp_path)).events.iloc[:0]
    for workers in (1, 3):
        assert encode(ev, CHUNK_COLUMNS, workers=workers).blobs == []
