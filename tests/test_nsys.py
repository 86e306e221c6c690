"""nsys SQLite parser on small exports built here with the real nsys table and column names."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
from pathlib import Path

import numpy as np
import pytest

from tracelab.errors import MissingDependency, TraceFormatError
from tracelab.io.nsys.load import export_nsys_rep, find_nsys, load_nsys_sqlite
from tracelab.model import CopyKind, EventKind, Flag, MemKind, SyncKind

PID, TID, TID2 = 4242, 4243, 4250
HW_VM = 1 << 48  # vm id 1, as real exports carry


def gtid(pid: int, tid: int, hw: int = 0) -> int:
    return (hw << 56) | HW_VM | (pid << 24) | tid


def gpid(pid: int, hw: int = 0) -> int:
    return gtid(pid, 0, hw)


KERNEL_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
    "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
    "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
    "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
    "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
    "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER, "
    "localMemoryTotal INTEGER, gridId INTEGER, sharedMemoryExecuted INTEGER, graphNodeId INTEGER, "
    "sharedMemoryLimitConfig INTEGER, graphId INTEGER"
)
MEMCPY_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
    "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
    "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, "
    "srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER, "
    "graphNodeId INTEGER, virtualAddress INTEGER"
)
MEMSET_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
    "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
    "value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"
)
SYNC_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
    "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
    "syncType INTEGER NOT NULL, eventId INTEGER NOT NULL"
)
API_COLS = (
    "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
    "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"
)
NVTX_COLS = (
    "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
    "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
    "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
    "floatValue REAL, jsonTextId INTEGER, jsonText TEXT"
)
GPU_COLS = (
    "vmId INTEGER, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, l2CacheSize INTEGER, "
    "totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, threadsPerWarp INTEGER, "
    "maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxRegistersPerSm INTEGER, maxRegistersPerBlock INTEGER, "
    "maxShmemPerSm INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, computeMajor INTEGER, "
    "computeMinor INTEGER, cuDevice INTEGER"
)
CTX_COLS = (
    "nullStreamId INTEGER, hwId INTEGER, vmId INTEGER, processId INTEGER, deviceId INTEGER, contextId INTEGER, "
    "parentContextId INTEGER, isGreenContext INTEGER, numMultiprocessors INTEGER"
)

STRINGS = {
    1: "void gemm_kernel<float>(float*, int)",
    2: "gemm_kernel",
    3: "cudaLaunchKernel_v7000",
    4: "cudaMemcpyAsync_v3020",
    5: "cudaStreamSynchronize_v3020",
    6: "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
    7: "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
    8: "cudaGraphLaunch_v10000",
    9: "registered step",
    10: "python3",
    11: "cudaLaunchKernelExC_v11060",
    12: "cuLaunchKernel",
    13: "cudaMemsetAsync_v3020",
    14: "pt_main_thread",
}
ENUM_MEMCPY = [
    (0, "CUDA_MEMCPY_KIND_UNKNOWN"),
    (1, "CUDA_MEMCPY_KIND_HTOD"),
    (2, "CUDA_MEMCPY_KIND_DTOH"),
    (8, "CUDA_MEMCPY_KIND_DTOD"),
    (10, "CUDA_MEMCPY_KIND_PTOP"),
]
ENUM_MEM = [
    (0, "CUDA_MEMOPR_MEMORY_KIND_PAGEABLE"),
    (1, "CUDA_MEMOPR_MEMORY_KIND_PINNED"),
    (2, "CUDA_MEMOPR_MEMORY_KIND_DEVICE"),
    (4, "CUDA_MEMOPR_MEMORY_KIND_MANAGED"),
    (7, "CUDA_MEMOPR_MEMORY_KIND_UNKNOWN"),
]
ENUM_SYNC = [
    (0, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_UNKNOWN"),
    (1, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE"),
    (2, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT"),
    (3, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE"),
    (4, "CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE"),
]


def make_export(
    path: Path,
    *,
    version: str = "3.17.1",
    enums: bool = True,
    skip: tuple[str, ...] = (),
    meta_table: str = "META_DATA_EXPORT",
) -> Path:
    """A small but complete export: 4 kernels (one NCCL, one graph node, one graph-launched, one PDL),
    3 copies, 1 memset, 2 syncs, API calls, NVTX; one green context."""
    con = sqlite3.connect(path)
    ex = con.execute
    ex("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", STRINGS.items())
    ex(f"CREATE TABLE {meta_table} (name TEXT, value TEXT)")
    major, minor, _micro = version.split(".")
    con.executemany(
        f"INSERT INTO {meta_table} VALUES (?, ?)",
        [
            ("EXPORT_PRODUCT_VERSION", "2025.1.1.110"),
            ("EXPORT_SCHEMA_VERSION", version),
            ("EXPORT_SCHEMA_VERSION_MAJOR", major),
            ("EXPORT_SCHEMA_VERSION_MINOR", minor),
        ],
    )
    if enums:
        for table, rows in (
            ("ENUM_CUDA_MEMCPY_OPER", ENUM_MEMCPY),
            ("ENUM_CUDA_MEM_KIND", ENUM_MEM),
            ("ENUM_CUPTI_SYNC_TYPE", ENUM_SYNC),
        ):
            ex(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, name TEXT, label TEXT)")
            con.executemany(f"INSERT INTO {table} VALUES (?, ?, '')", rows)
    g = gpid(PID)
    if "CUPTI_ACTIVITY_KIND_KERNEL" not in skip:
        ex(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({KERNEL_COLS})")
        k = (
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
            "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, graphNodeId, graphId, launchType) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,1)"
        )
        con.executemany(
            k,
            [
                # plain kernel, stream 7, launched by cudaLaunchKernel (corr 10)
                (1000, 2000, 0, 1, 0, 7, 10, g, 1, 2, 32, 120, 2, 1, 256, 1, 1, 1024, 2048, None, None),
                # NCCL kernel on stream 13, in green context 5
                (1500, 4000, 0, 1, 5, 13, 11, g, 6, 7, 64, 8, 1, 1, 512, 1, 1, 0, 0, None, None),
                # graph kernel node (corr 12 = cudaGraphLaunch)
                (5000, 6000, 0, 1, 0, 7, 12, g, 1, 2, 32, 1, 1, 1, 32, 1, 1, 0, 0, 77, 3),
                # PDL: launched with cudaLaunchKernelExC, starts before the previous kernel on stream 7 ends
                (5800, 6500, 0, 1, 0, 7, 16, g, 1, 2, 32, 1, 1, 1, 32, 1, 1, 0, 0, None, None),
                # kernel whose launch is not in the trace (orphan), on device 1
                (7000, 7100, 1, 2, 0, 20, 999, g, 1, 2, 32, 1, 1, 1, 32, 1, 1, 0, 0, None, None),
            ],
        )
    ex(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY ({MEMCPY_COLS})")
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, greenContextId, streamId, "
        "correlationId, globalPid, bytes, copyKind, srcKind, dstKind, graphNodeId) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (2100, 2600, 0, 1, 0, 7, 13, g, 4096, 1, 0, 2, None),  # HtoD pageable -> device
            (2700, 2800, 0, 1, 0, 7, 14, g, 8, 2, 2, 1, None),  # DtoH device -> pinned
            (2900, 3000, 0, 1, 0, 7, 17, g, 64, 8, 2, 2, None),
        ],
    )  # DtoD
    ex(f"CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET ({MEMSET_COLS})")
    ex(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, greenContextId, streamId, "
        "correlationId, globalPid, value, bytes, memKind) VALUES (3100, 3200, 0, 1, 0, 7, 18, ?, 0, 512, 2)",
        (g,),
    )
    ex(f"CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION ({SYNC_COLS})")
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start, end, deviceId, contextId, greenContextId, streamId, "
        "correlationId, globalPid, syncType, eventId) VALUES (?,?,0,1,0,?,?,?,?,0)",
        [(2810, 2850, 7, 15, g, 3), (6600, 6700, 4294967295, 19, g, 4)],
    )
    if "CUPTI_ACTIVITY_KIND_RUNTIME" not in skip:
        ex(f"CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME ({API_COLS})")
        t1, t2 = gtid(PID, TID), gtid(PID, TID2)
        con.executemany(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
            "returnValue) VALUES (?,?,?,?,?,?,0)",
            [
                (900, 950, 0, t1, 10, 3),
                (960, 990, 0, t1, 11, 3),
                (4900, 4950, 0, t1, 12, 8),
                (2050, 2090, 0, t1, 13, 4),
                (2095, 2099, 0, t1, 14, 4),
                (2800, 2860, 0, t1, 15, 5),
                (5500, 5600, 0, t1, 16, 11),
                (2850, 2890, 0, t1, 17, 4),
                (3050, 3090, 0, t2, 18, 13),
                (6590, 6710, 1, t2, 19, 12),
            ],
        )
    ex(f"CREATE TABLE NVTX_EVENTS ({NVTX_COLS})")
    t1 = gtid(PID, TID)
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) VALUES (?,?,?,?,?,?,?)",
        [
            (800, 7000, 59, "step 0", t1, None, 0),  # push/pop range with inline text
            (850, 3000, 60, None, t1, 9, 0),  # start/end range with registered text
            (1200, None, 34, "mark!", t1, None, 0),  # mark
            (900, 1000, 59, "in my domain", t1, None, 3),  # range in a named domain
            (100, None, 75, "MyDomain", t1, None, 3),  # domain create (metadata, not an event)
            (1300, None, 59, "never ended", t1, None, 0),
        ],
    )  # unterminated range
    ex("CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER)")
    ex("INSERT INTO ThreadNames VALUES (14, 0, ?)", (gtid(PID, TID),))
    ex("CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT)")
    ex("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (g, PID))
    if "TARGET_INFO_GPU" not in skip:
        ex(f"CREATE TABLE TARGET_INFO_GPU ({GPU_COLS})")
        ex(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name, totalMemory, smCount, threadsPerWarp, maxWarpsPerSm, "
            "maxBlocksPerSm, maxRegistersPerSm, maxRegistersPerBlock, maxShmemPerSm, maxShmemPerBlock, "
            "maxShmemPerBlockOptin, computeMajor, computeMinor, cuDevice) VALUES "
            "(1, 0, 'NVIDIA H200', 150000000000, 132, 32, 64, 32, 65536, 65536, 233472, 49152, 232448, 9, 0, 0)"
        )
        ex(
            "CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT, "
            "numMultiprocessors INTEGER)"
        )
        ex("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (1, 1, ?, '', 114)", (PID,))
    ex(f"CREATE TABLE TARGET_INFO_CUDA_CONTEXT_INFO ({CTX_COLS})")
    con.executemany(
        "INSERT INTO TARGET_INFO_CUDA_CONTEXT_INFO VALUES (?,?,?,?,?,?,?,?,?)",
        [(7, 0, 1, PID, 0, 1, None, 0, 0), (7, 0, 1, PID, 0, 5, 1, 1, 16)],
    )
    con.commit()
    con.close()
    return path


@pytest.fixture()
def export(tmp_path: Path) -> Path:
    return make_export(tmp_path / "report.sqlite")


def rows_of(tl, kind: EventKind):
    ev = (
        tl.events[tl.events["kind"] == int(kind)].sort_values(["start", "correlation"]).reset_index(drop=True)
    )
    return ev, list(tl.names(ev["name"]))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- exact mapping -----------------------------------------------------------------------------


def test_kernels_map_exactly(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    k, names = rows_of(tl, EventKind.KERNEL)
    assert len(k) == 5
    assert names[0] == STRINGS[1]
    assert k.loc[0, ["start", "end", "device", "context", "stream", "correlation"]].tolist() == [
        1000,
        2000,
        0,
        1,
        7,
        10,
    ]
    assert k.loc[0, ["grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z"]].tolist() == [
        120,
        2,
        1,
        256,
        1,
        1,
    ]
    assert k.loc[0, "registers"] == 32 and k.loc[0, "shared_mem"] == 1024 + 2048
    assert k.loc[0, "green_context"] == -1 and k.loc[0, "pid"] == -1 and k.loc[0, "flags"] == 0
    # NCCL kernel in green context 5
    assert names[1] == STRINGS[6] and k.loc[1, "green_context"] == 5 and k.loc[1, "flags"] & Flag.COMM
    # graph node, launched by cudaGraphLaunch
    assert k.loc[2, "graph_node"] == 77 and k.loc[2, "graph_id"] == 3 and k.loc[2, "flags"] & Flag.GRAPH
    assert k.loc[0, "graph_node"] == -1 and k.loc[0, "graph_id"] == -1
    # PDL: Ex launch overlapping its predecessor on the same stream
    assert k.loc[3, "flags"] & Flag.PDL and not k.loc[2, "flags"] & Flag.PDL
    # orphan on device 1
    assert k.loc[4, "device"] == 1 and k.loc[4, "flags"] & Flag.ORPHAN
    assert tl.meta.stats["orphan_gpu_events"] == 1 and tl.meta.stats["pdl_kernels"] == 1


def test_short_kernel_names(export: Path) -> None:
    tl = load_nsys_sqlite(export, kernel_names="short")
    _, names = rows_of(tl, EventKind.KERNEL)
    assert names[:2] == [STRINGS[2], STRINGS[7]]


def test_copies_and_memsets_map_exactly(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    m, names = rows_of(tl, EventKind.MEMCPY)
    assert m["copy_kind"].tolist() == [CopyKind.HTOD, CopyKind.DTOH, CopyKind.DTOD]
    assert m["src_mem"].tolist() == [MemKind.PAGEABLE, MemKind.DEVICE, MemKind.DEVICE]
    assert m["dst_mem"].tolist() == [MemKind.DEVICE, MemKind.PINNED, MemKind.DEVICE]
    assert m["bytes"].tolist() == [4096, 8, 64]
    assert names == [
        "Memcpy HtoD (Pageable -> Device)",
        "Memcpy DtoH (Device -> Pinned)",
        "Memcpy DtoD (Device -> Device)",
    ]
    s, snames = rows_of(tl, EventKind.MEMSET)
    assert s["bytes"].tolist() == [512] and s["dst_mem"].tolist() == [MemKind.DEVICE]
    assert snames == ["Memset (Device)"]


def test_numeric_enum_defaults_without_enum_tables(tmp_path: Path) -> None:
    with_enums = load_nsys_sqlite(make_export(tmp_path / "a.sqlite"))
    without = load_nsys_sqlite(make_export(tmp_path / "b.sqlite", enums=False))
    for col in ("copy_kind", "src_mem", "dst_mem", "sync_kind"):
        assert with_enums.events[col].tolist() == without.events[col].tolist()


def test_enum_tables_are_read_by_name(tmp_path: Path) -> None:
    path = make_export(tmp_path / "r.sqlite")
    con = sqlite3.connect(path)  # a future export that renumbers the enum: mapping must follow names
    con.execute("UPDATE ENUM_CUDA_MEM_KIND SET name = 'CUDA_MEMOPR_MEMORY_KIND_PINNED' WHERE id = 0")
    con.commit()
    con.close()
    m, _ = rows_of(load_nsys_sqlite(path), EventKind.MEMCPY)
    assert m["src_mem"].tolist()[0] == MemKind.PINNED


def test_syncs_and_api_calls(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    s, names = rows_of(tl, EventKind.SYNC)
    assert s["sync_kind"].tolist() == [SyncKind.STREAM, SyncKind.DEVICE]
    assert names == ["Stream Sync", "Context Sync"]
    assert s["stream"].tolist() == [7, -1]  # 0xFFFFFFFF = not on a stream
    assert (s["flags"] & Flag.BLOCKING).all()
    api = tl.events[tl.events["kind"].isin([int(EventKind.RUNTIME), int(EventKind.DRIVER)])].sort_values(
        "start"
    )
    assert len(api) == 10
    assert set(api["pid"]) == {PID} and set(api["tid"]) == {TID, TID2}
    by_name = dict(zip(tl.names(api["name"]), zip(api["sync_kind"], api["flags"], api["kind"])))
    assert by_name["cudaStreamSynchronize_v3020"][0] == SyncKind.STREAM
    assert by_name["cudaStreamSynchronize_v3020"][1] & Flag.BLOCKING
    assert by_name["cudaLaunchKernel_v7000"][1] & Flag.LAUNCH
    assert by_name["cuLaunchKernel"][2] == EventKind.DRIVER  # eventClass 1 in the RUNTIME table
    assert (api["device"] == -1).all()


def test_nvtx_ranges_marks_domains(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    ev = tl.events[tl.events["kind"].isin([int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)])]
    got = {
        n: (int(k), int(s), int(e), tl.name(int(c)))
        for n, k, s, e, c in zip(tl.names(ev["name"]), ev["kind"], ev["start"], ev["end"], ev["category"])
    }
    assert got["step 0"] == (EventKind.NVTX_RANGE, 800, 7000, "")
    assert got["registered step"] == (EventKind.NVTX_RANGE, 850, 3000, "")
    assert got["mark!"] == (EventKind.NVTX_MARK, 1200, 1200, "")
    assert got["in my domain"] == (EventKind.NVTX_RANGE, 900, 1000, "MyDomain")
    assert got["never ended"] == (EventKind.NVTX_RANGE, 1300, 1300, "")
    assert "MyDomain" not in got  # domain creation is metadata
    assert set(ev["pid"]) == {PID} and set(ev["tid"]) == {TID}
    assert tl.meta.stats["unterminated_nvtx_ranges"] == 1


def test_devices_contexts_meta(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    d0, d1 = tl.devices
    assert (d0.device, d0.name, d0.sm_count, d0.cc_major, d0.max_threads_per_sm) == (
        0,
        "NVIDIA H200",
        132,
        9,
        2048,
    )
    assert d0.max_shared_mem_per_block == 232448 and d0.registers_per_sm == 65536
    assert (d1.device, d1.name, d1.sm_count) == (1, "", 114)  # SM count from TARGET_INFO_CUDA_DEVICE
    green = [c for c in tl.contexts if c.is_green]
    assert len(green) == 1
    assert (green[0].context, green[0].parent_context, green[0].green_context, green[0].sm_count) == (
        5,
        1,
        5,
        16,
    )
    assert tl.meta.format == "nsys" and tl.meta.schema_version == "3.17.1" and tl.meta.gpu == "NVIDIA H200"
    assert tl.meta.extra["thread_names"] == {f"{PID}:{TID}": "pt_main_thread"}
    assert tl.meta.extra["process_names"] == {str(PID): "python3"}
    assert tl.meta.notes == (  # the orphan and the open range are in the fixture on purpose
        "1 GPU operations have no matching CUDA API launch (correlationId)",
        "1 NVTX ranges never ended; shown with zero length",
    )
    lanes = tl.lanes[tl.lanes["lane_kind"] == 0]
    assert {(int(r.device), int(r.stream), int(r.green_context)) for r in lanes.itertuples()} >= {
        (0, 7, -1),
        (0, 13, 5),
        (1, 20, -1),
    }


def test_old_schema_meta_table(tmp_path: Path) -> None:
    tl = load_nsys_sqlite(
        make_export(tmp_path / "old.sqlite", version="2.9.1", meta_table="EXPORT_META_DATA", enums=False)
    )
    assert tl.meta.schema_version == "2.9.1"
    assert tl.meta.stats["kernels"] == 5


def test_future_schema_still_parsed_with_note(tmp_path: Path) -> None:
    tl = load_nsys_sqlite(make_export(tmp_path / "new.sqlite", version="4.0.0"))
    assert tl.meta.stats["kernels"] == 5
    assert any("4.0.0" in n and "newer" in n for n in tl.meta.notes)


# ---- degraded and wrong inputs -----------------------------------------------------------------


def test_missing_kernel_table_is_a_note(tmp_path: Path) -> None:
    tl = load_nsys_sqlite(make_export(tmp_path / "nok.sqlite", skip=("CUPTI_ACTIVITY_KIND_KERNEL",)))
    assert (tl.events["kind"] == int(EventKind.KERNEL)).sum() == 0
    assert (tl.events["kind"] == int(EventKind.MEMCPY)).sum() == 3
    assert "no CUPTI_ACTIVITY_KIND_KERNEL table: kernel activity was not traced" in tl.meta.notes


def test_missing_runtime_and_gpu_info_are_notes(tmp_path: Path) -> None:
    tl = load_nsys_sqlite(
        make_export(tmp_path / "x.sqlite", skip=("CUPTI_ACTIVITY_KIND_RUNTIME", "TARGET_INFO_GPU"))
    )
    assert any(n.startswith("no CUPTI_ACTIVITY_KIND_RUNTIME table") for n in tl.meta.notes)
    assert any(n.startswith("no TARGET_INFO_GPU table") for n in tl.meta.notes)
    gpu = tl.gpu_events()
    assert (gpu["flags"] & Flag.ORPHAN).all()
    assert tl.devices[0].name == ""


def _one_line_error(path: Path, match: str) -> str:
    with pytest.raises(TraceFormatError, match=match) as info:
        load_nsys_sqlite(path)
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_wrong_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    _one_line_error(empty, "empty")
    text = tmp_path / "trace.sqlite"
    text.write_text('{"traceEvents": []}')
    _one_line_error(text, "not an SQLite")
    _one_line_error(tmp_path / "nope.sqlite", "no such file")
    _one_line_error(tmp_path, "directory")
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    _one_line_error(other, "not an Nsight Systems export")
    bare = tmp_path / "bare.sqlite"
    con = sqlite3.connect(bare)
    con.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    con.execute("CREATE TABLE OSRT_API (start INTEGER, end INTEGER)")
    con.commit()
    con.close()
    _one_line_error(bare, "without CUDA or NVTX tables")


def test_truncated_export(tmp_path: Path, export: Path) -> None:
    con = sqlite3.connect(export)  # make it big enough that truncation cuts table pages
    con.executemany("INSERT INTO StringIds (value) VALUES (?)", [(f"pad {i}" * 20,) for i in range(3000)])
    con.commit()
    con.close()
    data = export.read_bytes()
    for cut in (len(data) // 2, len(data) // 2 - (len(data) // 2) % 4096):
        bad = tmp_path / f"cut{cut}.sqlite"
        bad.write_bytes(data[:cut])
        _one_line_error(bad, "truncated|corrupt|malformed")


def test_non_integer_garbage_is_a_format_error(tmp_path: Path, export: Path) -> None:
    con = sqlite3.connect(export)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'lots' WHERE correlationId = 10")
    con.commit()
    con.close()
    _one_line_error(export, "non-integer values in table CUPTI_ACTIVITY_KIND_KERNEL")


def test_input_untouched(tmp_path: Path, export: Path) -> None:
    before = sha(export)
    mode = export.stat().st_mode
    export.chmod(stat.S_IRUSR)  # read-only file: opening must not need write access
    listing = sorted(os.listdir(tmp_path))
    load_nsys_sqlite(export)
    assert sha(export) == before
    assert sorted(os.listdir(tmp_path)) == listing  # no journal, no -wal, nothing created
    export.chmod(mode)


def test_odd_path_characters(tmp_path: Path, export: Path) -> None:
    odd = tmp_path / "my run #1 ?x=1 %20.sqlite"
    shutil.copy(export, odd)
    assert load_nsys_sqlite(odd).meta.stats["kernels"] == 5
    assert not (tmp_path / "my run ").exists()


# ---- several processes / GPUs ------------------------------------------------------------------


def test_processes_stay_apart(tmp_path: Path) -> None:
    """Two processes reuse correlation id 10 and context 1 on the same GPU: nothing is cross-linked."""
    path = make_export(tmp_path / "mp.sqlite")
    other = 5151
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId, "
        "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
        "blockY, blockZ, staticSharedMemory, dynamicSharedMemory) VALUES (8000, 9000, 0, 1, 0, 7, 10, ?, 1, 2, "
        "1, 1, 1, 1, 1, 1, 1, 0, 0)",
        (gpid(other),),
    )
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    k, _ = rows_of(tl, EventKind.KERNEL)
    last = k.iloc[-1]
    assert last["flags"] & Flag.ORPHAN  # its corr id 10 belongs to the other process's launch
    assert last["correlation"] != k.iloc[0]["correlation"]
    # two processes that used the GPU: one rank each (issue 24), so their context 1 are apart
    assert last["rank"] != k.iloc[0]["rank"] and tl.meta.ranks == (0, 1)
    first_launch = tl.events[(tl.events["kind"] == int(EventKind.RUNTIME)) & (tl.events["start"] == 900)]
    assert first_launch["correlation"].iloc[0] == k.iloc[0]["correlation"]
    assert any("2 processes used GPUs: one rank each" in n for n in tl.meta.notes)


def test_hosts_become_ranks(tmp_path: Path) -> None:
    path = make_export(tmp_path / "mh.sqlite")
    con = sqlite3.connect(path)
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId, "
        "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
        "blockY, blockZ, staticSharedMemory, dynamicSharedMemory) VALUES (8000, 9000, 0, 1, 0, 7, 10, ?, 1, 2, "
        "1, 1, 1, 1, 1, 1, 1, 0, 0)",
        (gpid(PID, hw=1),),
    )
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    assert tl.meta.ranks == (0, 1)
    assert {(d.rank, d.device) for d in tl.devices} == {(0, 0), (0, 1), (1, 0)}


# ---- nsys binary -------------------------------------------------------------------------------


def _fake_nsys(tmp_path: Path, body: str) -> Path:
    """A stand-in executable (nsys itself is not installed here) to exercise the subprocess plumbing."""
    exe = tmp_path / "bin" / "nsys"
    exe.parent.mkdir(exist_ok=True)
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return exe


def test_find_nsys_env_and_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_nsys(tmp_path, "exit 0\n")
    monkeypatch.setenv("TRACELAB_NSYS", str(exe))
    assert find_nsys() == exe
    monkeypatch.setenv("TRACELAB_NSYS", str(exe.parent))
    assert find_nsys() == exe


def test_export_without_nsys_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRACELAB_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("tracelab.io.nsys.export._SEARCH_GLOBS", ())
    rep = tmp_path / "report1.nsys-rep"
    rep.write_bytes(b"rep")
    assert find_nsys() is None
    with pytest.raises(MissingDependency) as info:
        export_nsys_rep(rep, tmp_path / "out")
    msg = str(info.value)
    assert "nsys export --type sqlite" in msg and str(rep.resolve()) in msg
    assert f"tracelab import {rep.resolve().with_suffix('.sqlite')}" in msg and "\n" not in msg
    assert not (tmp_path / "out").exists()


def test_export_runs_nsys(tmp_path: Path, export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the stand-in copies a real export to the --output path, as nsys export does
    exe = _fake_nsys(tmp_path, f'while [ "$1" != "--output" ]; do shift; done; cp "{export}" "$2"\n')
    monkeypatch.setenv("TRACELAB_NSYS", str(exe))
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"rep")
    out = export_nsys_rep(rep, tmp_path / "out")
    assert out == tmp_path / "out" / "run.sqlite"
    assert load_nsys_sqlite(out).meta.stats["kernels"] == 5
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.sqlite"]


def test_export_failure_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_nsys(tmp_path, 'echo "ERROR: not a valid report" >&2; exit 1\n')
    monkeypatch.setenv("TRACELAB_NSYS", str(exe))
    rep = tmp_path / "bad.nsys-rep"
    rep.write_bytes(b"garbage")
    with pytest.raises(TraceFormatError, match="nsys export failed: ERROR: not a valid report"):
        export_nsys_rep(rep, tmp_path / "out")
    assert not any((tmp_path / "out").iterdir())


def test_event_columns_have_model_dtypes(export: Path) -> None:
    tl = load_nsys_sqlite(export)
    tl.validate()
    assert np.all(np.diff(tl.events["start"].to_numpy()) >= 0)


def test_green_context_from_context_table(tmp_path: Path) -> None:
    """Without a greenContextId value, work in a context that TARGET_INFO_CUDA_CONTEXT_INFO marks green
    is placed in that green context."""
    path = make_export(tmp_path / "g.sqlite")
    con = sqlite3.connect(path)
    con.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET contextId = 5, greenContextId = NULL WHERE correlationId = 11"
    )
    con.commit()
    con.close()
    k, _ = rows_of(load_nsys_sqlite(path), EventKind.KERNEL)
    assert k.loc[1, ["context", "green_context"]].tolist() == [5, 5]
    assert (k.drop(index=1)["green_context"] == -1).all()


def test_chunked_reads_match_single_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_export(tmp_path / "c.sqlite")
    whole = load_nsys_sqlite(path)
    monkeypatch.setattr("tracelab.io.nsys.db.CHUNK_ROWS", 2)
    chunked = load_nsys_sqlite(path)
    assert whole.events.equals(chunked.events)
    assert whole.strings == chunked.strings


def test_nvtx_text_with_separator_characters(tmp_path: Path) -> None:
    path = make_export(tmp_path / "s.sqlite")
    hostile = "a\x1eb,c\n<script>"
    con = sqlite3.connect(path)
    con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text = 'mark!'", (hostile,))
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    ev = tl.events[tl.events["kind"].isin([int(EventKind.NVTX_RANGE), int(EventKind.NVTX_MARK)])]
    assert set(tl.names(ev["name"])) == {"step 0", "registered step", hostile, "in my domain", "never ended"}


def test_graph_ids_from_graph_node_table(tmp_path: Path) -> None:
    """Older exports: no graphId column in the kernel table; CUDA_GRAPH_NODE_EVENTS maps nodes to graphs."""
    path = make_export(tmp_path / "gr.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphId = NULL")
    con.execute(
        "CREATE TABLE CUDA_GRAPH_NODE_EVENTS (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER, graphNodeId INTEGER, originalGraphNodeId INTEGER, graphId INTEGER)"
    )
    con.execute("INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (10, 20, 0, 0, 1, 3, 76, 77, 9)")
    con.commit()
    con.close()
    k, _ = rows_of(load_nsys_sqlite(path), EventKind.KERNEL)
    assert k.loc[2, ["graph_node", "graph_id"]].tolist() == [77, 9]  # found through originalGraphNodeId
    assert (k.drop(index=2)["graph_id"] == -1).all()


def test_parallel_reads_match_serial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = make_export(tmp_path / "p.sqlite")
    monkeypatch.setattr("tracelab.io.nsys.read.PARALLEL_MIN_ROWS", 10**12)
    serial = load_nsys_sqlite(path)
    monkeypatch.setattr("tracelab.io.nsys.read.PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr("tracelab.io.nsys.read.os.cpu_count", lambda: 4)
    parallel = load_nsys_sqlite(path)
    assert serial.events.equals(parallel.events)
    assert serial.strings == parallel.strings
    assert list(serial.strings) == sorted(serial.strings)


def test_green_context_from_stream_table(tmp_path: Path) -> None:
    """Kernels that carry only the parent context, on a stream TARGET_INFO_CUDA_STREAM puts in a green
    context, are placed in that green context."""
    path = make_export(tmp_path / "gs.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET greenContextId = NULL")
    con.execute(
        "CREATE TABLE TARGET_INFO_CUDA_STREAM (streamId INTEGER, hwId INTEGER, vmId INTEGER, processId INTEGER, "
        "contextId INTEGER, priority INTEGER, flag INTEGER)"
    )
    con.executemany(
        "INSERT INTO TARGET_INFO_CUDA_STREAM VALUES (?, 0, 1, ?, ?, 0, 2)",
        [(7, PID, 1), (13, PID, 5), (13, 999, 5)],
    )
    con.commit()
    con.close()
    k, _ = rows_of(load_nsys_sqlite(path), EventKind.KERNEL)
    assert k["green_context"].tolist() == [-1, 5, -1, -1, -1]


def test_indexes_in_post_processed_files_do_not_reorder(tmp_path: Path) -> None:
    """A post-processed export with an index on NVTX eventType: names still pair with their rows."""
    path = make_export(tmp_path / "ix.sqlite")
    plain = load_nsys_sqlite(path)
    con = sqlite3.connect(path)
    con.execute("CREATE INDEX nvtx_type ON NVTX_EVENTS (eventType, text)")
    con.execute("CREATE INDEX kernel_name ON CUPTI_ACTIVITY_KIND_KERNEL (demangledName, streamId)")
    con.commit()
    con.close()
    indexed = load_nsys_sqlite(path)
    assert plain.events.equals(indexed.events) and plain.strings == indexed.strings


def test_export_with_empty_tables(tmp_path: Path) -> None:
    path = make_export(tmp_path / "e.sqlite")
    con = sqlite3.connect(path)
    for table in (
        "CUPTI_ACTIVITY_KIND_KERNEL",
        "CUPTI_ACTIVITY_KIND_MEMCPY",
        "CUPTI_ACTIVITY_KIND_MEMSET",
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        "CUPTI_ACTIVITY_KIND_RUNTIME",
        "NVTX_EVENTS",
    ):
        con.execute(f"DELETE FROM {table}")
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    assert len(tl.events) == 0 and len(tl.lanes) == 0 and tl.devices == ()
    assert tl.meta.stats["kernels"] == 0 and tl.meta.ranks == (0,)


def test_driver_table(tmp_path: Path) -> None:
    path = make_export(tmp_path / "d.sqlite")
    con = sqlite3.connect(path)
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_DRIVER ({API_COLS})")
    con.execute(
        "INSERT INTO CUPTI_ACTIVITY_KIND_DRIVER (start, end, eventClass, globalTid, correlationId, nameId, returnValue) "
        "VALUES (6900, 6950, 1, ?, 999, 12, 0)",
        (gtid(PID, TID2),),
    )
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    drv = tl.events[tl.events["kind"] == int(EventKind.DRIVER)]
    assert sorted(tl.names(drv["name"])) == ["cuLaunchKernel", "cuLaunchKernel"]
    assert (drv["flags"] & Flag.LAUNCH).all()
    k, _ = rows_of(tl, EventKind.KERNEL)
    assert not k.loc[4, "flags"] & Flag.ORPHAN  # its launch is the driver call
    assert tl.meta.stats["orphan_gpu_events"] == 0


def test_unknown_end_times(tmp_path: Path) -> None:
    path = make_export(tmp_path / "z.sqlite")
    con = sqlite3.connect(path)
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 0 WHERE correlationId = 10")
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    k, _ = rows_of(tl, EventKind.KERNEL)
    assert k.loc[0, ["start", "end"]].tolist() == [1000, 1000]
    assert "1 events end before they start (unknown end time): shown with zero length" in tl.meta.notes


def test_missing_device_ids(tmp_path: Path) -> None:
    path = make_export(tmp_path / "nodev.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL")  # drop the NOT NULL constraint
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL")
    con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = NULL WHERE correlationId = 999")
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    k, _ = rows_of(tl, EventKind.KERNEL)
    assert k.loc[4, "device"] == 0
    assert "1 GPU operations have no deviceId: placed on device 0" in tl.meta.notes


def test_green_context_without_context_table(tmp_path: Path) -> None:
    path = make_export(tmp_path / "nc.sqlite")
    con = sqlite3.connect(path)
    con.execute("DROP TABLE TARGET_INFO_CUDA_CONTEXT_INFO")
    con.commit()
    con.close()
    tl = load_nsys_sqlite(path)
    assert [
        (c.device, c.context, c.is_green, c.parent_context, c.green_context, c.sm_count) for c in tl.contexts
    ] == [(0, 5, True, 1, 5, 0)]
