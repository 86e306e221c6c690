"""The `[memory]` instants (torch.profiler with profile_memory=True), read in the Kineto parser's one pass:
the C scanner (or its msgspec twin for a declined piece) keeps the args of every instant that has args, the
parser keeps those named `[memory]`. Expected values are computed here from the JSON read with `json`, by
the rule tracelab/io/kineto/memory.py states (integers or numeric strings, else -1; absent args take the
profiler's defaults; an instant without a time is dropped; sorted by time, file order among equals)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracelab.io.kineto import memory
from tracelab.io.kineto.load import load_kineto
from tracelab.io.kineto.stream import BLOCK_SIZE

CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "corpus" / "hta" / "df_index_resolver__df_index_resolver.json.gz"
BUNDLED = Path(__file__).resolve().parent / "data" / "multigpu" / "memory_torch" / "trace.json.gz"

_MEM = ('{"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": TID, "ts": TS,'
        ' "args": {"Device Type": DTYPE, "Device Id": DEV, "Addr": ADDR, "Bytes": NBYTES, "Total Allocated": ALLOC,'
        ' "Total Reserved": RES' + 'EXTRA}}')
_KERNEL = ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": TS, "dur": 1,'
           ' "args": {"device": 0, "stream": 7, "correlation": CORR}}')
_DEFAULTS = {"Device Type": 1, "Device Id": -1, "Bytes": 0, "Total Allocated": -1, "Total Reserved": -1, "Addr": 0}


def _mem(ts, dev=0, dtype=1, nbytes=512, alloc=1024, res=2048, addr=99, tid=7, extra=""):
    out = _MEM
    for key, val in (("TID", tid), ("TS", ts), ("DTYPE", dtype), ("DEV", dev), ("ADDR", addr),
                     ("NBYTES", nbytes), ("ALLOC", alloc), ("RES", res), ("EXTRA", extra)):
        out = out.replace(key, str(val), 1)
    return out


def _trace(tmp_path: Path, events: list[str], name="t.json") -> Path:
    p = tmp_path / name
    p.write_text('{"traceEvents": [' + ",\n".join([_KERNEL.replace("TS", "1").replace("CORR", "1")] + events) + "]}")
    return p


def _int(v) -> int:
    """The parser's integer rule, written out here: an int, an integral float or a base-10 numeric string."""
    if v is None or isinstance(v, bool):
        return -1
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return int(v) if v.is_integer() else -1
    if isinstance(v, str):
        try:
            return int(v, 10)
        except ValueError:
            return -1
    return -1


def _expected(events: list[dict]) -> dict | None:
    rows = []
    for i, e in enumerate(events):
        if e.get("ph") not in ("i", "I") or e.get("name") != "[memory]" or not isinstance(e.get("args"), dict):
            continue
        if not isinstance(e.get("ts"), (int, float)):
            continue
        a = {k: _int(e["args"][k]) if k in e["args"] else d for k, d in _DEFAULTS.items()}
        rows.append((round(e["ts"] * 1000), i, a, _int(e.get("tid"))))
    if not rows:
        return None
    rows.sort(key=lambda r: (r[0], r[1]))
    return {"t": [r[0] for r in rows],
            "device": [r[2]["Device Id"] if r[2]["Device Type"] == 1 else -1 for r in rows],
            "bytes": [r[2]["Bytes"] for r in rows], "allocated": [r[2]["Total Allocated"] for r in rows],
            "reserved": [r[2]["Total Reserved"] for r in rows], "addr": [r[2]["Addr"] for r in rows],
            "tid": [r[3] for r in rows]}


def _events(p: Path) -> list[dict]:
    import gzip

    if p.suffix == ".gz":
        with gzip.open(p, "rb") as f:
            return json.loads(f.read())["traceEvents"]
    raw = p.read_bytes()
    return json.loads(raw)["traceEvents"]


def _parsed(p: Path) -> dict | None:
    """extra["memory"] with its columns as lists (the parser keeps int64 arrays)."""
    got = load_kineto(p).meta.extra.get("memory")
    if got is not None:
        assert all(got[k].dtype == "int64" for k in ("t", "device", "bytes", "allocated", "reserved", "addr", "tid"))
        got = {k: v.tolist() if hasattr(v, "tolist") else v for k, v in got.items()}
    return got


def _check(p: Path) -> dict:
    got = _parsed(p)
    exp = _expected(_events(p))
    assert exp is not None and got is not None
    assert {k: got[k] for k in exp} == exp
    return got


def test_usual_instants(tmp_path):
    evs = [_mem(1000.5 + (i * 7) % 13, dev=i % 3, dtype=i % 2, nbytes=(-1) ** i * 512 * i, alloc=10 * i, tid=i)
           for i in range(200)]
    got = _check(_trace(tmp_path, evs))
    assert got["truncated"] is False and got["source"] == "kineto [memory] instants"
    assert len(got["t"]) == 200


@pytest.mark.parametrize("odd", [
    _mem(5, tid='"main"'),                       # tid not a number: -1
    _mem(5, nbytes='"512"'),                     # a numeric string: its number
    _mem(5, nbytes='"512.0"'),                   # not an integer string: -1 (the piece goes to msgspec)
    _mem(5, nbytes="512.0"),                     # an integral float: 512 (msgspec's loose path)
    _mem(5, nbytes="0.5"),                       # a fraction: -1
    _mem(5, alloc="null"),                       # null: -1
    _mem(5, extra=', "Nested": {"a": [1, {"b": 2}]}'),  # other args: skipped
    '{"ph": "i", "cat": "[memory]", "name": "other", "ts": 5, "args": {"Bytes": 1}}',  # the mark, not the name
    '{"ph": "i", "name": "[memory]", "ts": 6, "args": {}}',  # every arg absent: the defaults
    '{"ph": "i", "name": "[memory]", "ts": 6}',  # no args: not an allocator record
    '{"ph": "X", "name": "[memory]", "ts": 6, "dur": 1, "args": {"Bytes": 1}}',  # not an instant
    _mem(5).replace('"ts": 5,', ''),             # no ts: dropped
])
def test_odd_shapes(tmp_path, odd):
    _check(_trace(tmp_path, [_mem(3), odd, _mem(4)]))


def test_none_without_memory_instants(tmp_path):
    p = _trace(tmp_path, ['{"ph": "i", "name": "mark", "ts": 5, "args": {"Bytes": 3}}'])
    assert _parsed(p) is None and _expected(_events(p)) is None


def _big(tmp_path: Path, declined_piece: bool) -> tuple[Path, int]:
    """~24 MB of JSON (several pieces, scanned in halves), [memory] instants in every part of the file, out
    of time order, with equal times; `declined_piece`: one kernel in the middle has a fractional
    correlation, so the scanner declines its piece and msgspec reads it."""
    evs, n_mem = [], 0
    n = 6 * BLOCK_SIZE // 120
    for i in range(n):
        corr = "1.5" if declined_piece and i == n // 2 else str(i)
        evs.append(_KERNEL.replace("TS", str(10 + i)).replace("CORR", corr))
        if i % 997 == 0:
            evs.append(_mem(5000 - (n_mem % 41), dev=n_mem % 2, nbytes=n_mem, alloc=n_mem * 3, addr=n_mem, tid=n_mem))
            n_mem += 1
    p = _trace(tmp_path, evs)
    assert p.stat().st_size > 3 * BLOCK_SIZE
    return p, n_mem


@pytest.mark.parametrize("declined_piece", [False, True])
def test_many_pieces_in_file_order(tmp_path, declined_piece):
    p, n_mem = _big(tmp_path, declined_piece)
    assert len(_check(p)["t"]) == n_mem


def test_truncated_at_the_limit_keeps_the_first_in_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "MAX_EVENTS", 50)
    p, n_mem = _big(tmp_path, False)
    got = _parsed(p)
    first = [e for e in _events(p) if e.get("name") == "[memory]"][:50]
    exp = _expected(first)
    assert n_mem > 50 and got["truncated"] is True
    assert {k: got[k] for k in exp} == exp


def test_bundled_memory_recording():
    got = _check(BUNDLED)
    assert len(got["t"]) == sum(1 for e in _events(BUNDLED) if e.get("name") == "[memory]") > 100


@pytest.mark.corpus
def test_corpus_trace():
    if not CORPUS.exists():
        pytest.skip(f"corpus trace absent: {CORPUS}")
    got = _check(CORPUS)
    assert len(got["t"]) == 28010
