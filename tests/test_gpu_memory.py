"""The GPU memory timeline against the raw `[memory]` instants of corpus Kineto traces (read with json here):
peak allocated, when, the allocation that reached it, the innermost CPU op around it on the allocating thread,
the reserved peak, and each step's peak (the level carried into the step counts), through the real CLI."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
TRACES = ["switch_transformers/trace.json", "tracelens/h100__gaunernst_bert-small-uncased__1016001.json.gz"]

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not present")]


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _ns(ts: float) -> int:
    whole = int(ts // 1)
    return whole * 1000 + round((ts - whole) * 1000)


@pytest.mark.parametrize("rel", TRACES)
def test_memory_section_matches_the_raw_instants(rel):
    path = CORPUS / rel
    events = _events(path)
    mem = sorted(((_ns(e["ts"]), e) for e in events if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1),
                 key=lambda x: x[0])
    assert mem
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": "/nonexistent/t.db"}
    r = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(path), "--json"], capture_output=True,
                       text=True, env=env, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    peak = doc["memory"]["peaks"][0]
    top = max(e["args"]["Total Allocated"] for _, e in mem)
    t, first = next((t, e) for t, e in mem if e["args"]["Total Allocated"] == top)
    assert peak["peak_bytes"] == top and peak["at_ns"] == t and peak["allocation_bytes"] == first["args"]["Bytes"]
    assert peak["reserved_peak_bytes"] == max(e["args"]["Total Reserved"] for _, e in mem)
    assert peak["events"] == len(mem)
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
           and e.get("tid") == first["tid"] and _ns(e["ts"]) <= t <= _ns(e["ts"]) + _ns(e["dur"])]
    assert peak["op"] == (max(ops, key=lambda e: e["ts"])["name"] if ops else "")
    # per step: the highest level while the step runs, the level carried into it included
    steps = {(s["rank"], s["index"]): s for s in doc["steps"]}
    assert len(doc["memory"]["steps"]) == len(steps)
    for s in doc["memory"]["steps"]:
        st = steps[(s["rank"], s["index"])]
        before = [e["args"]["Total Allocated"] for tt, e in mem if tt < st["start_ns"]]
        inside = [e["args"]["Total Allocated"] for tt, e in mem if st["start_ns"] <= tt < st["end_ns"]]
        carried = before[-1] if before else 0
        assert s["start_bytes"] == carried and s["peak_bytes"] == max([carried, *inside])


def test_text_section():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": "/nonexistent/t.db", "COLUMNS": "120"}
    r = subprocess.run([sys.executable, "-m", "tracelab", "analyze", str(CORPUS / TRACES[1])], capture_output=True,
                       text=True, env=env, timeout=600, check=False)
    from tracelab.text_format import fmt_bytes

    top = max(e["args"]["Total Allocated"] for e in _events(CORPUS / TRACES[1])
               if e.get("name") == "[memory]" and e["args"].get("Device Type") == 1)
    assert r.returncode == 0 and "GPU memory (kineto [memory] instants" in r.stdout
    assert f"peak {fmt_bytes(top)} allocated" in r.stdout
