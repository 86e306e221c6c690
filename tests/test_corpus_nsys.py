"""Every nsys SQLite export in the shared corpus (schemas 2.9.1 .. 3.25.0) against SQL on the file and
against pipit's golden CSVs for CloverLeaf."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracelab.io.nsys.load import load_nsys_sqlite
from tracelab.model import CopyKind, EventKind, Flag

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
EXPORTS = sorted(CORPUS.glob("**/*.sqlite")) if CORPUS.exists() else []
PIPIT = CORPUS / "pipit"
CLOVER = PIPIT / "perlmutter-cloverleaf-cuda.sqlite"

pytestmark = [pytest.mark.corpus, pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not present")]

SCHEMAS = {
    "nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite": "3.25.0",
    "nsys_ai/tests__fixtures__mfu_2gpu_after.sqlite": "3.25.0",
    "nsys_ai/tests__fixtures__mfu_2gpu_before.sqlite": "3.25.0",
    "nsys_ai/tests__fixtures__mock.sqlite": "3.24.14",
    "nvfuser/report1.sqlite": "3.17.1",
    "nvfuser/report2.sqlite": "3.16.1",
    "nvfuser/report3.sqlite": "3.16.1",
    "pipit/perlmutter-cloverleaf-cuda.sqlite": "3.13.2",
    "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite": "2.9.1",
}


def sql(path: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def count(path: Path, table: str, where: str = "") -> int:
    tables = {r[0] for r in sql(path, "SELECT name FROM sqlite_master WHERE type='table'")}
    if table.split()[0] not in tables:
        return 0
    return int(sql(path, f"SELECT count(*) FROM {table} {where}")[0][0])


def n_kind(tl, kind: EventKind) -> int:
    return int((tl.events["kind"] == int(kind)).sum())


@pytest.fixture(scope="module")
def loaded() -> dict[str, object]:
    return {str(p.relative_to(CORPUS)): load_nsys_sqlite(p) for p in EXPORTS}


def test_corpus_lists_every_schema() -> None:
    assert {str(p.relative_to(CORPUS)) for p in EXPORTS} >= set(SCHEMAS)


@pytest.mark.parametrize("rel", sorted(SCHEMAS))
def test_counts_match_sql(rel: str, loaded) -> None:
    path = CORPUS / rel
    tl = loaded[rel]
    tl.validate()
    assert tl.meta.format == "nsys" and tl.meta.schema_version == SCHEMAS[rel]
    assert n_kind(tl, EventKind.KERNEL) == count(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    assert n_kind(tl, EventKind.MEMCPY) == count(path, "CUPTI_ACTIVITY_KIND_MEMCPY")
    assert n_kind(tl, EventKind.MEMSET) == count(path, "CUPTI_ACTIVITY_KIND_MEMSET")
    api = n_kind(tl, EventKind.RUNTIME) + n_kind(tl, EventKind.DRIVER)
    assert api == count(path, "CUPTI_ACTIVITY_KIND_RUNTIME") + count(path, "CUPTI_ACTIVITY_KIND_DRIVER")
    nvtx = n_kind(tl, EventKind.NVTX_RANGE) + n_kind(tl, EventKind.NVTX_MARK)
    assert nvtx == count(path, "NVTX_EVENTS", "WHERE eventType IN (34, 59, 60, 65, 70, 71)")
    # one device per deviceId the GPU tables use
    devs = {r[0] for r in sql(path, "SELECT DISTINCT deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL")}
    assert devs <= {d.device for d in tl.devices}
    # busy kernel time on the GPU equals the SQL sum of kernel durations
    k = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
    assert int((k["end"] - k["start"]).sum()) == int(
        sql(path, "SELECT coalesce(sum(end - start), 0) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    )


@pytest.mark.parametrize("rel", sorted(SCHEMAS))
def test_input_bytes_unchanged(rel: str) -> None:
    path = CORPUS / rel
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    load_nsys_sqlite(path)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_time_sliced_exports_degrade_with_notes(loaded) -> None:
    for rel in (
        "nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite",
        "nsys_ai/tests__fixtures__mfu_2gpu_before.sqlite",
    ):
        tl = loaded[rel]
        assert any(n.startswith("time-sliced export") for n in tl.meta.notes)
        assert any(n.startswith("no TARGET_INFO_GPU table") for n in tl.meta.notes)
        assert [d.device for d in tl.devices] == [0, 1]
        # each device's kernels come from one process; GPU lanes stay per device
        lanes = tl.lanes[tl.lanes["lane_kind"] == 0]
        assert set(lanes["device"]) == {0, 1}


def test_nccl_kernels_flagged(loaded) -> None:
    for rel, expected in (
        ("nsys_ai/tests__fixtures__mfu_2gpu_after.sqlite", 62),
        ("nsys_ai/tests__fixtures__mfu_2gpu_before.sqlite", 66),
    ):
        tl = loaded[rel]
        k = tl.events[tl.events["kind"] == int(EventKind.KERNEL)]
        comm = (k["flags"] & Flag.COMM) != 0
        assert int(comm.sum()) == expected
        assert all("nccl" in n.lower() for n in tl.names(k["name"][comm]))


def test_orphans_match_sql(loaded) -> None:
    """Orphans = GPU work whose (process, correlationId) has no runtime/driver row."""
    rel = "nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite"
    path = CORPUS / rel
    expected = 0
    for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
        expected += count(
            path,
            f"{table} AS g",
            "WHERE NOT EXISTS (SELECT 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
            "WHERE r.correlationId = g.correlationId "
            "AND (r.globalTid >> 24) = (g.globalPid >> 24))",
        )
    assert loaded[rel].meta.stats["orphan_gpu_events"] == expected > 0


def test_devices_described(loaded) -> None:
    assert [(d.name, d.sm_count) for d in loaded["nvfuser/report1.sqlite"].devices] == [("NVIDIA H200", 132)]
    assert loaded["pipit/perlmutter-cloverleaf-cuda.sqlite"].meta.gpu == "NVIDIA A100-SXM4-80GB"
    mock = loaded["nsys_ai/tests__fixtures__mock.sqlite"]
    assert mock.devices[0].name == "NVIDIA GeForce RTX 3080" and mock.devices[0].sm_count == 68
    assert mock.devices[0].max_threads_per_sm == 48 * 32


# ---- pipit golden CSVs (CloverLeaf on A100) ----------------------------------------------------


def golden_pairs(csv_path: Path) -> pd.DataFrame:
    """Enter/Leave rows -> one row per event with start/end, in file order."""
    df = pd.read_csv(csv_path, keep_default_na=False)
    enter = df[df["Event Type"] == "Enter"].copy()
    enter["end"] = enter["_matching_timestamp"].astype(np.int64)
    enter["start"] = enter["Timestamp (ns)"].astype(np.int64)
    return enter.reset_index(drop=True)


@pytest.mark.skipif(not CLOVER.exists(), reason="pipit CloverLeaf export not present")
def test_cloverleaf_gpu_trace_golden() -> None:
    tl = load_nsys_sqlite(CLOVER, kernel_names="short")
    gold = golden_pairs(PIPIT / "cloverleaf_gpu_trace.csv")
    gk = gold[gold["type"] == "kernel"].sort_values(["start", "end"]).reset_index(drop=True)
    ev = tl.events
    k = ev[ev["kind"] == int(EventKind.KERNEL)].sort_values(["start", "end"]).reset_index(drop=True)
    assert len(k) == len(gk) == 1312
    assert k["start"].tolist() == gk["start"].tolist()
    assert k["end"].tolist() == gk["end"].tolist()
    assert list(tl.names(k["name"])) == gk["Name"].tolist()
    assert k["stream"].tolist() == gk["streamId"].astype(int).tolist()

    m = ev[ev["kind"] == int(EventKind.MEMCPY)].sort_values(["start", "end"]).reset_index(drop=True)
    gm = gold[gold["type"] != "kernel"].sort_values(["start", "end"]).reset_index(drop=True)
    assert (gm["type"] == "CUDA_MEMCPY_KIND_HTOD").sum() == 254 and (
        gm["type"] == "CUDA_MEMCPY_KIND_DTOH"
    ).sum() == 25
    kinds = {"CUDA_MEMCPY_KIND_HTOD": CopyKind.HTOD, "CUDA_MEMCPY_KIND_DTOH": CopyKind.DTOH}
    assert m["copy_kind"].tolist() == [int(kinds[t]) for t in gm["type"]]
    assert m["start"].tolist() == gm["start"].tolist() and m["end"].tolist() == gm["end"].tolist()
    assert m["bytes"].tolist() == gm["bytes"].astype(int).tolist()
    assert m["stream"].tolist() == gm["streamId"].astype(int).tolist()


@pytest.mark.skipif(not CLOVER.exists(), reason="pipit CloverLeaf export not present")
def test_cloverleaf_api_trace_golden() -> None:
    tl = load_nsys_sqlite(CLOVER)
    gold = golden_pairs(PIPIT / "cloverleaf-cuda_api_trace.csv").sort_values(["start", "end", "Name"])
    ev = tl.events
    api = ev[ev["kind"].isin([int(EventKind.RUNTIME), int(EventKind.DRIVER)])].copy()
    api["nm"] = tl.names(api["name"])
    api = api.sort_values(["start", "end", "nm"])
    assert len(api) == len(gold) == 3048
    assert api["start"].tolist() == gold["start"].tolist()
    assert api["end"].tolist() == gold["end"].tolist()
    assert api["nm"].tolist() == gold["Name"].tolist()
    assert api["pid"].tolist() == gold["Process"].astype(int).tolist()
    assert api["tid"].tolist() == gold["Thread"].astype(int).tolist()
    # every kernel was launched by a cudaLaunchKernel in this trace and followed by a device sync
    k = ev[ev["kind"] == int(EventKind.KERNEL)]
    assert not (k["flags"] & Flag.ORPHAN).any()
    syncs = api[api["nm"] == "cudaDeviceSynchronize_v3020"]
    assert len(syncs) == 1312 and (syncs["flags"] & Flag.BLOCKING).all()


def test_saxpy_2_9_nvtx_domains_and_threads(loaded) -> None:
    """Schema 2.9.1: registered NVTX strings (textId), an 'MPI' domain, a named thread, and extra
    non-standard 'name' columns in RUNTIME/MEMCPY that are ignored."""
    rel = "pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite"
    path = CORPUS / rel
    tl = loaded[rel]
    ev = tl.events[tl.events["kind"] == int(EventKind.NVTX_RANGE)]
    pairs = pd.Series(list(zip(tl.names(ev["name"]), tl.names(ev["category"])))).value_counts().to_dict()
    expected = sql(
        path,
        "SELECT coalesce(n.text, s.value), coalesce(d.text, ''), count(*) FROM NVTX_EVENTS n "
        "LEFT JOIN StringIds s ON s.id = n.textId "
        "LEFT JOIN NVTX_EVENTS d ON d.eventType = 75 AND d.domainId = n.domainId AND n.domainId != 0 "
        "WHERE n.eventType = 59 GROUP BY 1, 2",
    )
    assert pairs == {(name, dom): n for name, dom, n in expected}
    assert pairs[("MPI_Send", "MPI")] == 10
    assert "MPI Rank 0" in tl.meta.extra["thread_names"].values()
    m = tl.events[tl.events["kind"] == int(EventKind.MEMCPY)]
    assert sorted(pd.Series(m["copy_kind"]).value_counts().to_dict().items()) == [
        (int(CopyKind.HTOD), 10),
        (int(CopyKind.DTOH), 5),
    ]


def test_step_table_of_a_two_gpu_rank_says_how_idle_and_causes_differ(loaded) -> None:
    """This export holds two processes, each on its own GPU (SQL: every kernel of a globalPid on one deviceId):
    since issue 24 each is a rank of one GPU, so its step table keeps the plain headers (a rank's idle is its
    GPU's idle); a one-GPU run keeps them too."""
    import sqlite3

    from tracelab.analyses import analyze
    from tracelab.render.text.analysis import format_analysis

    con = sqlite3.connect(f"file:{CORPUS / 'nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite'}?mode=ro", uri=True)
    per_process = con.execute(
        "SELECT globalPid, COUNT(DISTINCT deviceId) FROM CUPTI_ACTIVITY_KIND_KERNEL GROUP BY globalPid"
    ).fetchall()
    con.close()
    assert len(per_process) == 2 and all(n == 1 for _, n in per_process)
    two = analyze(loaded["nsys_ai/tests__fixtures__h100_2gpu_1s.sqlite"])
    assert sorted((d.rank, d.device) for d in two.devices) == [(0, 0), (1, 1)]
    text = format_analysis(two, width=200)
    assert "ranks with 2 GPUs" not in text
    one = analyze(loaded["pipit/perlmutter-cloverleaf-cuda.sqlite"])
    plain = format_analysis(one, width=200)
    assert one.step_rows and "idle by cause" in plain  # a step table, with the plain headers
    assert "no GPU busy" not in plain and "each GPU's gaps" not in plain
