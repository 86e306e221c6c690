"""The Kineto parser's pipeline, each part against what it replaced:
- `ColumnAssembler` (pieces copied into growing columns as they are parsed) against the former assembly,
  kept here as the reference: concatenate every part, sort by start (stable), scatter the sparse and
  kernel columns through the parts' row indices. Real traces cut into many small pieces (so the columns
  grow many times, with and without a first size estimate) give the same arrays, dtypes and order.
- big pieces scanned in two halves on two threads against each piece scanned whole."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
from tl_hygiene import CORPUS

from tracelab.io.kineto import load as kineto
from tracelab.io.kineto import pieces
from tracelab.io.kineto.columns import _KERNEL, _MAIN, _SPARSE, ColumnAssembler
from tracelab.io.kineto.stream import EventChunks

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


@pytest.mark.corpus
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


@pytest.mark.corpus
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


def _names_with_cuts(n: int, every: int) -> dict:
    """Launches and kernels; every `every`-th kernel name holds `},{` text (a false boundary)."""
    ev = []
    for i in range(n):
        t = 1000.0 + 10 * i
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": f"cudaLaunchKernel{i % 3}", "pid": 1, "tid": 2,
                   "ts": t, "dur": 2.0, "args": {"correlation": i}})
        name = f'k{i % 11}<"}},{{"ph":"X"}}, {{ {i}>' if i % every == 0 else f"kernel_{i % 13}"
        ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 3, "dur": 4.0,
                   "args": {"device": 0, "stream": 7, "correlation": i, "grid": [i % 5, 1, 1]}})
    return {"schemaVersion": 1, "traceEvents": ev, "deviceProperties": [{"id": 0, "name": "GPU"}]}


@pytest.mark.parametrize("parts", [2, 3, 4])
@pytest.mark.parametrize("every", [1, 3, 10_000])
def test_pieces_scanned_in_halves_give_the_whole_pieces_timeline(tmp_path, monkeypatch, every, parts):
    """Pieces cut in `parts` near 1/parts, 2/parts, ... and scanned on as many threads (merged back as the
    whole piece by `_Parsed._merge`), against each piece scanned whole; names full of `},{` make the cuts land inside
    strings, where the parts are refused and the whole piece decides."""
    import json

    from timeline_compare import assert_same_timeline

    if not pieces.scanner_available():
        pytest.skip("the C scanner is not built")
    p = tmp_path / "t.json"
    p.write_text(json.dumps(_names_with_cuts(6000, every)))
    monkeypatch.setattr(kineto, "BLOCK_SIZE", 1 << 15)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 40)
    whole = kineto.load_kineto(p)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 12)
    monkeypatch.setattr(pieces, "usable_cores", lambda: parts)
    seen = []
    scan_halves = kineto._Parsed._scan_halves

    def counted(self, piece):
        got = scan_halves(self, piece)
        seen.append(got is not None)
        return got

    monkeypatch.setattr(kineto._Parsed, "_scan_halves", counted)
    halves = kineto.load_kineto(p)
    assert_same_timeline(halves, whole)
    assert halves.meta == whole.meta
    assert seen  # the halving was tried ...
    if every == 10_000:
        assert all(seen)  # ... and every piece was scanned in halves


@pytest.mark.corpus
@pytest.mark.parametrize("path", TRACES[:1] + [TRACES[2]], ids=lambda p: p.name[:40])
def test_real_traces_scanned_in_halves_give_the_whole_pieces_timeline(monkeypatch, path):
    from timeline_compare import assert_same_timeline

    if not pieces.scanner_available():
        pytest.skip("the C scanner is not built")
    monkeypatch.setattr(kineto, "BLOCK_SIZE", 1 << 15)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 12)
    a = kineto.load_kineto(path)
    monkeypatch.setattr(pieces, "SPLIT_MIN", 1 << 40)
    b = kineto.load_kineto(path)
    assert_same_timeline(a, b)
