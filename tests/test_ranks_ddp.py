"""A real 2-rank DDP run recorded on an H100 (tests/data/ddp, made by tests/data/ddp/record_ddp.py): gloo
all-reduces, both ranks on one GPU, rank 1 made late by a 3 ms host sleep before each forward pass.
The cross-rank analysis must match the collectives from the raw JSON (plain Python) and find rank 1."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tracelab.analyses import analyze
from tracelab.analyses.ranks.heatmap import rank_heatmap
from tracelab.analyses.ranks.rank_document import rank_document_of
from tracelab.analyses.ranks.view import rank_analysis
from tracelab.io import load_trace

DDP = Path(__file__).resolve().parent / "data" / "ddp"
SLEEP_NS = 3_000_000


def raw_calls() -> dict[int, list[int]]:
    """Per rank, the start (ns) of each `gloo:all_reduce` host range, in time order."""
    out = {}
    for f in sorted(DDP.glob("rank*.json.gz")):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        starts = sorted(
            round(e["ts"] * 1000)
            for e in doc["traceEvents"]
            if e.get("cat") == "user_annotation" and e.get("name") == "gloo:all_reduce"
        )
        out[doc["distributedInfo"]["rank"]] = starts
    return out


def test_ddp_collectives_match_raw_json_and_find_the_straggler():
    tl = load_trace(DDP)
    assert tl.meta.ranks == (0, 1)
    ra = rank_analysis(tl, analyze(tl))
    assert ra.collectives.source == "host ranges"  # gloo: no communication kernels on the GPU
    doc = rank_document_of(ra)
    calls = raw_calls()
    assert len(calls[0]) == len(calls[1]) == 24  # 6 profiled steps x 4 gradient buckets
    expected = []
    for k, (a, b) in enumerate(zip(calls[0], calls[1])):
        last = max(a, b)
        expected.append(
            {
                "name": "all_reduce",
                "seq": k,
                "count": 2,
                "start_ns": min(a, b),
                "skew_ns": abs(a - b),
                "last_rank": 1 if b >= a else 0,
                "wait_ns": abs(a - b),
            }
        )
        assert last - min(a, b) == abs(a - b)
    # issue 24 added fields (bytes, per_rank, ...): the ones computed above, then per rank start and wait
    assert [{k: c[k] for k in expected[0]} for c in doc["collectives"]] == expected
    for c, a, b in zip(doc["collectives"], calls[0], calls[1]):
        last = max(a, b)
        assert [(p["rank"], p["start_ns"], p["wait_ns"]) for p in c["per_rank"]] == sorted(
            [(0, a, last - a), (1, b, last - b)], key=lambda x: (x[1], x[0])
        )
        assert c["bytes"] is None and c["busbw_gbps"] is None  # gloo's host ranges carry no message sizes
    # by construction: each step's first two buckets find rank 1 about 3 ms behind (the sleep)
    for step in range(6):
        for c in doc["collectives"][4 * step : 4 * step + 2]:
            assert c["last_rank"] == 1 and 0.8 * SLEEP_NS <= c["skew_ns"] <= 1.3 * SLEEP_NS, c
    assert doc["stragglers"][0]["rank"] == 1
    assert doc["stragglers"][0]["times_last"] >= 12
    r0, r1 = doc["ranks"]
    assert r0["collective_wait_ns"] > 6 * 2 * 0.8 * SLEEP_NS > r1["collective_wait_ns"]


def test_ddp_heatmap_has_the_profiled_steps():
    tl = load_trace(DDP)
    ra = rank_analysis(tl, analyze(tl))
    h = rank_heatmap(tl, ra.collectives)
    assert h.column_kind == "step" and h.labels == tuple(f"step {k}" for k in range(2, 8))
    # rank 0 waits in every step: its first two buckets' waits overlap in time, so the wall time is
    # about one sleep (the heatmap counts wall time; the rank table sums over collectives)
    assert (h.wait_ns[0] >= 0.8 * SLEEP_NS).all()
    assert h.wait_ns[0].sum() <= ra.ranks[0].collective_wait_ns
    assert h.wait_ns[1].sum() < h.wait_ns[0].sum() / 10
