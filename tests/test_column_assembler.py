"""`ColumnAssembler` (pieces copied into growing columns as they are parsed) against the assembly it
replaced, kept here as the reference: concatenate every part, sort by start (stable), scatter the sparse
and kernel columns through the parts' row indices. Real traces, cut into many small pieces so the
columns grow many times (with and without a first size estimate), give the same arrays, dtypes and
column order."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from tracelab.parsers import kineto
from tracelab.parsers.kineto_columns import _KERNEL, _MAIN, _SPARSE, ColumnAssembler
from tracelab.parsers.kineto_stream import EventChunks

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
TRACES = [
    CORPUS / "hta" / "critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz",
    CORPUS / "hta" / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    CORPUS / "param" / "et_replay__tests__inputs__resnet_kineto.json.gz",
]


def _reference(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    sizes = [len(p["kind"]) for p in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    n = int(offsets[-1])
    out = {c: np.concatenate([p[c] for p in parts]).astype(t) for c, t in _MAIN.items()}
    order = np.argsort(out["start"], kind="stable")
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    out = {c: v[order] for c, v in out.items()}
    rows = np.concatenate([p["rows"].astype(np.int64) + o for p, o in zip(parts, offsets) if "rows" in p])
    krows = np.concatenate([p["k_rows"].astype(np.int64) + o for p, o in zip(parts, offsets) if "k_rows" in p])
    for c, (key, t) in _SPARSE.items():
        col = np.full(n, 0 if c == "sync_kind" else -1, dtype=t)
        fill = [p[key] if key in p else np.full(len(p["rows"]), col[0] if n else -1, t) for p in parts if "rows" in p]
        col[inverse[rows]] = np.concatenate(fill) if fill else []
        out[c] = col
    for c, (key, t) in _KERNEL.items():
        col = np.full(n, -1, dtype=t)
        col[inverse[krows]] = np.concatenate([p[key] for p in parts if key in p])
        out[c] = col
    for g in ("grid", "block"):
        tri = np.concatenate([p["k_" + g] for p in parts if "k_" + g in p])
        for j, axis in enumerate("xyz"):
            col = np.full(n, -1, dtype=np.int32)
            col[inverse[krows]] = tri[:, j]
            out[f"{g}_{axis}"] = col
    return out


def _parts(path: Path, block: int) -> list[dict[str, np.ndarray]]:
    parsed = kineto._Parsed()  # no pipeline: the pieces' columns are kept as parts
    for _ in EventChunks(path, parsed.add_chunk, block_size=block):
        pass
    parsed.close()
    return parsed.parts


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name[:40])
@pytest.mark.parametrize("expected", [0, 10, 10**6])
def test_assembled_columns_equal_the_reference(path, expected):
    parts = _parts(path, block=1 << 12)
    assert len(parts) >= 2
    want = _reference(copy.deepcopy(parts))
    columns = ColumnAssembler(expected)
    for p in parts:
        columns.add(p)
    got = columns.result()
    assert list(got) == list(want)
    for c in want:
        assert got[c].dtype == want[c].dtype, c
        assert np.array_equal(got[c], want[c]), c


def test_the_parser_gives_the_same_timeline_with_and_without_the_estimate(monkeypatch):
    """load_kineto's assembler (sized from the file) against the parts path (kineto_parallel's)."""
    path = TRACES[2]
    a = kineto.load_kineto(path)
    init = kineto._Parsed.__init__

    def without_assembler(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.columns = None

    monkeypatch.setattr(kineto._Parsed, "__init__", without_assembler)
    b = kineto.load_kineto(path)
    assert a.strings == b.strings and a.meta == b.meta
    for c in a.cols:
        assert a.cols[c].dtype == b.cols[c].dtype and np.array_equal(a.cols[c], b.cols[c]), c
