"""The bulk `[memory]` reader (tracelab.io.kineto.memory._columns_bulk) against the per-event reader
(`read_memory(bulk=False)`) and against the raw JSON read here with json: same columns, byte for byte, on the
usual trace and on traces of odd shapes (which must take the per-event path)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tracelab.io.kineto import memory

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus" / "hta" / "df_index_resolver__df_index_resolver.json.gz"


_MEM = ('{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": TID, "ts": TS,'
        ' "args": {"Device Type": DTYPE, "Device Id": DEV, "Addr": ADDR, "Bytes": NBYTES, "Total Allocated": ALLOC,'
        ' "Total Reserved": RES' + 'EXTRA}}')


def _mem(ts, dev=0, dtype=1, nbytes=512, alloc=1024, res=2048, addr=99, tid=7, extra=""):
    out = _MEM
    for key, val in (("TID", tid), ("TS", ts), ("DTYPE", dtype), ("DEV", dev), ("ADDR", addr),
                     ("NBYTES", nbytes), ("ALLOC", alloc), ("RES", res), ("EXTRA", extra)):
        out = out.replace(key, str(val), 1)
    return out


def _trace(tmp_path: Path, events: list[str], name="t.json") -> Path:
    pad = '{"ph": "X", "name": "k{lambda()#1}", "pid": 1, "tid": 7, "ts": 1.0, "dur": 2, "args": {"x": 1}}'
    p = tmp_path / name
    p.write_text('{"traceEvents": [' + ",\n".join([pad] + events + [pad]) + "]}")
    return p


def _expected(p: Path) -> dict:
    evs = [e for e in json.loads(p.read_text())["traceEvents"] if e.get("name") == "[memory]"]
    evs.sort(key=lambda e: round(e["ts"] * 1000))
    a = [e["args"] for e in evs]
    return {"t": [round(e["ts"] * 1000) for e in evs],
            "device": [x["Device Id"] if x["Device Type"] == 1 else -1 for x in a],
            "bytes": [x["Bytes"] for x in a], "allocated": [x["Total Allocated"] for x in a],
            "reserved": [x["Total Reserved"] for x in a], "addr": [x["Addr"] for x in a],
            "tid": [e["tid"] for e in evs]}


def test_usual_trace_takes_bulk_path_and_matches_raw(tmp_path):
    evs = [_mem(1000.5 + (i * 7) % 13, dev=i % 3, dtype=i % 2, nbytes=(-1) ** i * 512 * i, alloc=10 * i, tid=i)
           for i in range(200)]
    p = _trace(tmp_path, evs)
    assert memory._columns_bulk(p.read_bytes()) is not None
    got = memory.read_memory(p)
    assert orjson.dumps(got) == orjson.dumps(memory.read_memory(p, bulk=False))
    exp = _expected(p)
    assert {k: got[k] for k in exp} == exp
    assert got["truncated"] is False


@pytest.mark.parametrize("odd", [
    _mem(5, tid='"main"'),                       # tid not an int: -1 in the per-event reader
    _mem(5, nbytes="512.0"),                     # a float where an int is expected
    _mem(5, extra=', "Nested": {"a": 1}'),       # a second nested object
    '{"ph": "i", "cat": "[memory]", "name": "other", "ts": 5, "args": {"Bytes": 1}}',  # the mark, not the name
    _mem(5).replace('"ts": 5,', ''),             # no ts: dropped
])
def test_odd_shapes_fall_back_and_match(tmp_path, odd):
    p = _trace(tmp_path, [_mem(3), odd, _mem(4)])
    assert memory._columns_bulk(p.read_bytes()) is None
    assert orjson.dumps(memory.read_memory(p)) == orjson.dumps(memory.read_memory(p, bulk=False))


def test_none_without_memory_events(tmp_path):
    p = _trace(tmp_path, [])
    assert memory.read_memory(p) is None


@pytest.mark.corpus
def test_corpus_trace_bulk_equals_per_event():
    if not CORPUS.exists():
        pytest.skip(f"corpus trace absent: {CORPUS}")
    text = memory._raw(CORPUS)
    assert memory._columns_bulk(text) is not None
    got = memory.read_memory(CORPUS)
    assert orjson.dumps(got) == orjson.dumps(memory.read_memory(CORPUS, bulk=False))
    assert len(got["t"]) == text.count(b'"name": "[memory]"')


# ---- the parser reads the [memory] instants piece by piece, in its one pass over the file ----------------


_KERNEL = ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": TS, "dur": 1,'
           ' "args": {"device": 0, "stream": 7, "correlation": 1}}')


def _parsed_memory(p: Path) -> dict | None:
    from tracelab.io.kineto.load import load_kineto

    return load_kineto(p).meta.extra.get("memory")


@pytest.mark.parametrize("odd", [None, _mem(5, tid='"main"'), _mem(5, extra=', "Nested": {"a": 1}')])
def test_parser_reads_the_same_memory_as_the_whole_file_reader(tmp_path, odd):
    evs = [_mem(1000.5 + (i * 7) % 13, dev=i % 3, nbytes=(-1) ** i * 512 * i, alloc=10 * i, tid=i) for i in range(50)]
    p = _trace(tmp_path, [_KERNEL.replace("TS", "10")] + evs + ([odd] if odd else []))
    assert orjson.dumps(_parsed_memory(p)) == orjson.dumps(memory.read_memory(p, bulk=False))


def test_parser_joins_memory_instants_of_many_pieces_in_file_order(tmp_path):
    """~24 MB of JSON (several pieces of the stream, some pieces scanned in halves): [memory] instants in
    every part of the file, out of time order, with equal timestamps; the parser's columns equal the
    per-event reader's over the whole file and the JSON read here."""
    from tracelab.io.kineto.stream import BLOCK_SIZE

    evs, n_mem = [], 0
    for i in range(6 * BLOCK_SIZE // 120):
        evs.append(_KERNEL.replace("TS", str(10 + i)))
        if i % 997 == 0:
            evs.append(_mem(5000 - (n_mem % 41), dev=n_mem % 2, nbytes=n_mem, alloc=n_mem * 3, addr=n_mem, tid=n_mem))
            n_mem += 1
    p = _trace(tmp_path, evs)
    assert p.stat().st_size > 3 * BLOCK_SIZE
    got = _parsed_memory(p)
    assert orjson.dumps(got) == orjson.dumps(memory.read_memory(p, bulk=False))
    exp = _expected(p)
    assert {k: got[k] for k in exp} == exp and len(got["t"]) == n_mem


@pytest.mark.corpus
def test_corpus_trace_parser_memory_equals_the_whole_file_reader():
    if not CORPUS.exists():
        pytest.skip(f"corpus trace absent: {CORPUS}")
    assert orjson.dumps(_parsed_memory(CORPUS)) == orjson.dumps(memory.read_memory(CORPUS, bulk=False))
