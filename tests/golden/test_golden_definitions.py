"""Issue 24 item 7, definitions, on hand-made programs in both formats through the CLI (the gap causes'
parts are in test_golden_causes.py, test_golden_os_calls.py and test_golden_input_wait.py)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import analyze_cli
from trace_builder import Program

from tracelab.model.api_names import classify_api_name
from tracelab.model.kinds import SyncKind


@pytest.mark.parametrize(("name", "kind"), [
    ("cuMemSetAccess", SyncKind.NONE), ("cuMemSetAccess_v10020", SyncKind.NONE), ("cuMemsetD32_v2", SyncKind.MEMCPY),
    ("cudaMemset", SyncKind.MEMCPY), ("cudaMemcpy", SyncKind.MEMCPY), ("cuMemcpyDtoH_v2", SyncKind.MEMCPY),
    ("cudaMemcpyAsync", SyncKind.NONE),
])
def test_what_is_a_synchronous_copy_or_set(name, kind):
    assert classify_api_name(name)[0] == kind


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_sync_memcpy_counts_memcpy_calls_only(fmt, tmp_path, monkeypatch):
    """3 synchronous DtoH cudaMemcpy calls into pageable memory (they block), 5 cuMemSetAccess calls (NCCL's
    virtual-memory calls, no copy) and a synchronous cudaMemset into pinned memory (blocks, but is no copy):
    sync_memcpy counts the memcpy calls, read from the raw file."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))
    p = Program()
    for i in range(3):
        t = i * 1000.0
        p.kernel(t, 100, launch=(t - 20, 4))
        p.memcpy(t + 100, 10, "DtoH", "Device", "Pageable", 4096, launch=(t + 50, 70, "cudaMemcpy"))
    for i in range(5):
        p.api("cuMemSetAccess", 3000 + 10 * i, 5)
    p.memset(3200, 5, "Pinned", 64, launch=(3150, 60, "cudaMemset"))
    path = p.kineto(tmp_path / "t.json") if fmt == "kineto" else p.nsys(tmp_path / "t.sqlite")
    if fmt == "kineto":
        names = [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["cat"] == "cuda_runtime"]
    else:
        con = sqlite3.connect(path)
        names = [n for (n,) in con.execute("SELECT s.value FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
                                           "ON s.id = r.nameId")]
        con.close()
    memcpys = [n for n in names if n.startswith("cudaMemcpy") and "Async" not in n]
    assert len(memcpys) == 3 and sum("cuMemSetAccess" in n for n in names) == 5
    doc = analyze_cli(path)
    f = {x["rule"]: x for x in doc["findings"]}["sync_memcpy"]
    assert f["count"] == len(memcpys)
    assert sum(f["data"]["calls"].values()) == len(memcpys) and all("Memcpy" in k for k in f["data"]["calls"])
