"""Kineto JSON parser: exact field mapping on small synthetic traces (both schemas), streaming
boundaries, and bad input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from tracelab.errors import TraceFormatError
from tracelab.io.kineto import stream as kineto_stream
from tracelab.io.kineto.load import load_kineto, relabel_rank
from tracelab.model import CopyKind, EventKind, Flag, MemKind, SyncKind

DEVICE_PROPS = [
    {
        "id": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "totalGlobalMem": 85018279936,
        "computeMajor": 9,
        "computeMinor": 0,
        "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048,
        "regsPerBlock": 65536,
        "warpSize": 32,
        "sharedMemPerBlock": 49152,
        "numSms": 132,
        "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448,
        "sharedMemPerMultiprocessor": 233472,
    },
    {"id": 1, "name": "NVIDIA H100 80GB HBM3", "numSms": 132},
]


def current_trace() -> dict:
    host = {"pid": 100, "tid": 101}
    ev = [
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "ProfilerStep#3",
            **host,
            "ts": 1000.0,
            "dur": 100.0,
            "args": {"External id": 1},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            **host,
            "ts": 1001.5,
            "dur": 20.25,
            "args": {"External id": 2, "Input Dims": [[2, 3], [3, 4]]},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            **host,
            "ts": 1002.0,
            "dur": 5.0,
            "args": {"External id": 2, "cbid": 211, "correlation": 11},
        },
        {"ph": "s", "id": 11, **host, "ts": 1002.0, "cat": "ac2g", "name": "ac2g"},
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sm90_gemm_kernel",
            "pid": 0,
            "tid": 7,
            "ts": 1010.123,
            "dur": 30.5,
            "args": {
                "External id": 2,
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": 7,
                "correlation": 11,
                "registers per thread": 168,
                "shared memory": 213000,
                "blocks per SM": 1.0,
                "grid": [132, 2, 1],
                "block": [384, 1, 1],
                "est. achieved occupancy %": 0,
            },
        },
        {"ph": "f", "id": 11, "pid": 0, "tid": 7, "ts": 1010.123, "cat": "ac2g", "name": "ac2g", "bp": "e"},
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaMemcpyAsync",
            **host,
            "ts": 1008.0,
            "dur": 3.0,
            "args": {"cbid": 41, "correlation": 12},
        },
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy HtoD (Pageable -> Device)",
            "pid": 0,
            "tid": 20,
            "ts": 1012.0,
            "dur": 8.0,
            "args": {
                "device": 0,
                "context": 1,
                "stream": 20,
                "correlation": 12,
                "bytes": 4096,
                "memory bandwidth (GB/s)": 0.5,
            },
        },
        {
            "ph": "X",
            "cat": "gpu_memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": 7,
            "ts": 1050.0,
            "dur": 1.0,
            "args": {"device": 0, "context": 1, "stream": 7, "correlation": 99, "bytes": 128},
        },  # no launch: orphan
        {
            "ph": "X",
            "cat": "cuda_driver",
            "name": "cuLaunchKernel",
            **host,
            "ts": 1060.0,
            "dur": 2.0,
            "args": {"cbid": 307, "correlation": 13},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)",
            "pid": 1,
            "tid": 9,
            "ts": 1070.0,
            "dur": 10.0,
            "args": {
                "device": 1,
                "context": 1,
                "stream": 9,
                "correlation": 13,
                "grid": [4, 1, 1],
                "block": [512, 1, 1],
                "registers per thread": 96,
                "shared memory": 0,
            },
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaStreamSynchronize",
            **host,
            "ts": 1080.0,
            "dur": 15.0,
            "args": {"cbid": 131, "correlation": 14},
        },
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Stream Sync",
            "pid": 0,
            "tid": 7,
            "ts": 1081.0,
            "dur": 13.0,
            "args": {
                "cuda_sync_kind": "Stream Sync",
                "stream": 7,
                "correlation": 14,
                "device": 0,
                "context": 1,
            },
        },
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "ProfilerStep#3",
            "pid": 0,
            "tid": 7,
            "ts": 1010.123,
            "dur": 41.0,
            "args": {"External id": 1},
        },
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "s": "t",
            "name": "[memory]",
            **host,
            "ts": 1003.0,
            "args": {"Bytes": 4},
        },
        {"name": "process_name", "ph": "M", "ts": 999.0, "pid": 100, "tid": 0, "args": {"name": "python"}},
        {
            "ph": "X",
            "cat": "Trace",
            "ts": 990.0,
            "dur": 200.0,
            "pid": "Spans",
            "tid": "PyTorch Profiler",
            "name": "PyTorch Profiler (0)",
            "args": {"Op count": 0},
        },
        {
            "ph": "X",
            "cat": "python_function",
            "name": "model.py(10): forward",
            **host,
            "ts": 1000.5,
            "dur": 50.0,
            "args": {"Python id": 3},
        },
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": DEVICE_PROPS,
        "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
        "traceEvents": ev,
        "traceName": "x.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1700000000000000000,
    }


def legacy_trace() -> dict:
    """The 2021 (PyTorch 1.8/1.9) layout: capitalised cats, tid 'stream 7', 'external id', computeProperties."""
    ev = [
        {
            "ph": "X",
            "cat": "Operator",
            "name": "aten::conv2d",
            "pid": 25738,
            "tid": "25738",
            "ts": 1623142623460111,
            "dur": 25,
            "args": {"Device": 25738, "External id": 2},
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaMemcpyAsync",
            "pid": 25738,
            "tid": "25738",
            "ts": 1623142623529088,
            "dur": 2022,
            "args": {"cbid": 41, "correlation": 34417, "external id": 537},
        },
        {
            "ph": "X",
            "cat": "Memcpy",
            "name": "Memcpy DtoH (Device -> Pinned)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1623142623529248,
            "dur": 1940,
            "args": {
                "device": 0,
                "context": 1,
                "stream": 7,
                "correlation": 34417,
                "external id": 537,
                "bytes": 19267584,
            },
        },
        {
            "ph": "X",
            "cat": "Runtime",
            "name": "cudaLaunchKernel",
            "pid": 25738,
            "tid": "25738",
            "ts": 1623142623531600,
            "dur": 10,
            "args": {"cbid": 211, "correlation": 34441, "external id": 544},
        },
        {
            "ph": "X",
            "cat": "Kernel",
            "name": "cask_cudnn::computeOffsetsKernel",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1623142623531625,
            "dur": 2,
            "args": {
                "queued": 0,
                "device": 0,
                "context": 1,
                "stream": 7,
                "correlation": 34441,
                "external id": 544,
                "registers per thread": 38,
                "shared memory": 0,
                "grid": [50, 1, 1],
                "block": [256, 1, 1],
            },
        },
        {
            "ph": "X",
            "cat": "Memset",
            "name": "Memset (Device)",
            "pid": 0,
            "tid": "stream 7",
            "ts": 1623142623579729,
            "dur": 1,
            "args": {"device": 0, "context": 1, "stream": 7, "correlation": 38304, "bytes": 128000},
        },
        {
            "ph": "f",
            "id": 34417,
            "pid": 0,
            "tid": "stream 7",
            "ts": 1623142623529248,
            "cat": "async",
            "name": "launch",
            "bp": "e",
        },
    ]
    props = [
        {
            "id": 0,
            "name": "Tesla V100-DGXS-32GB",
            "totalGlobalMem": 34084028416,
            "major": 7,
            "minor": 0,
            "maxThreadsPerBlock": 1024,
            "maxThreadsPerMultiProcessor": 2048,
            "regsPerBlock": 65536,
            "regsPerMultiprocessor": 65536,
            "warpSize": 32,
            "sharedMemPerBlock": 49152,
            "sharedMemPerMultiprocessor": 98304,
            "multiProcessorCount": 80,
            "sharedMemPerBlockOptin": 98304,
        }
    ]
    return {"schemaVersion": 1, "computeProperties": props, "traceEvents": ev}


def write(tmp_path: Path, name: str, doc, gz: bool = False, indent=None) -> Path:
    raw = json.dumps(doc, indent=indent).encode()
    p = tmp_path / name
    p.write_bytes(gzip.compress(raw) if gz else raw)
    return p


def row(tl, name: str):
    ids = [i for i, s in enumerate(tl.strings) if s == name]
    assert len(ids) == 1, name
    rows = tl.events[tl.events["name"] == ids[0]]
    assert len(rows) == 1, name
    return rows.iloc[0]


@pytest.mark.parametrize("gz", [False, True])
def test_current_schema_field_mapping(tmp_path, gz):
    tl = load_kineto(write(tmp_path, "t.json.gz" if gz else "t.json", current_trace(), gz=gz))
    tl.validate()
    ev = tl.events
    # flows, instants, metadata and the profiler's own span are not events
    assert len(ev) == 13
    assert tl.meta.format == "kineto" and tl.meta.ranks == (3,)
    assert tl.meta.extra["rank_source"] == "distributedInfo"
    assert tl.meta.extra["baseTimeNanoseconds"] == 1700000000000000000
    assert set(ev["rank"]) == {3}

    k = row(tl, "sm90_gemm_kernel")
    assert k["kind"] == EventKind.KERNEL
    assert k["start"] == 1010123 and k["end"] == 1010123 + 30500  # fractional µs -> exact ns
    assert (k["device"], k["stream"], k["context"], k["correlation"]) == (0, 7, 1, 11)
    assert (k["grid_x"], k["grid_y"], k["grid_z"], k["block_x"], k["block_y"], k["block_z"]) == (
        132,
        2,
        1,
        384,
        1,
        1,
    )
    assert (k["registers"], k["shared_mem"]) == (168, 213000)
    assert k["pid"] == -1 and k["tid"] == -1
    assert k["flags"] == 0
    assert tl.strings[k["category"]] == "kernel"

    m = row(tl, "Memcpy HtoD (Pageable -> Device)")
    assert m["kind"] == EventKind.MEMCPY and m["bytes"] == 4096 and m["stream"] == 20
    assert (m["copy_kind"], m["src_mem"], m["dst_mem"]) == (CopyKind.HTOD, MemKind.PAGEABLE, MemKind.DEVICE)

    s = row(tl, "Memset (Device)")
    assert s["kind"] == EventKind.MEMSET and s["bytes"] == 128 and s["dst_mem"] == MemKind.DEVICE
    assert s["flags"] & Flag.ORPHAN  # correlation 99 has no launch
    assert tl.meta.stats["orphan_gpu_events"] == 1

    nccl = row(tl, "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)")
    assert nccl["flags"] & Flag.COMM and not nccl["flags"] & Flag.ORPHAN  # launched by cuLaunchKernel
    assert nccl["device"] == 1

    launch = row(tl, "cudaLaunchKernel")
    assert launch["kind"] == EventKind.RUNTIME and launch["flags"] & Flag.LAUNCH
    assert (launch["pid"], launch["tid"], launch["device"], launch["stream"]) == (100, 101, -1, -1)
    assert launch["start"] == 1002000 and launch["end"] == 1007000
    assert row(tl, "cuLaunchKernel")["kind"] == EventKind.DRIVER

    sync = row(tl, "cudaStreamSynchronize")
    assert sync["sync_kind"] == SyncKind.STREAM and sync["flags"] & Flag.BLOCKING
    ss = row(tl, "Stream Sync")
    assert ss["kind"] == EventKind.SYNC and ss["sync_kind"] == SyncKind.STREAM and ss["device"] == 0

    assert row(tl, "aten::mm")["kind"] == EventKind.CPU_OP
    assert row(tl, "aten::mm")["end"] - row(tl, "aten::mm")["start"] == 20250
    assert row(tl, "model.py(10): forward")["kind"] == EventKind.OTHER
    ann = ev[ev["kind"] == EventKind.GPU_ANNOTATION].iloc[0]
    assert (ann["device"], ann["stream"]) == (0, 7)
    nvtx = ev[ev["kind"] == EventKind.NVTX_RANGE]
    assert len(nvtx) == 1 and tl.strings[nvtx.iloc[0]["category"]] == "user_annotation"

    d0 = tl.device_info(3, 0)
    assert d0.name == "NVIDIA H100 80GB HBM3" and d0.sm_count == 132 and (d0.cc_major, d0.cc_minor) == (9, 0)
    assert d0.registers_per_sm == 65536 and d0.shared_mem_per_sm == 233472 and d0.max_threads_per_sm == 2048
    assert d0.max_shared_mem_per_block == 232448 and d0.total_memory == 85018279936
    assert [(d.rank, d.device) for d in tl.devices] == [(3, 0), (3, 1)]
    assert tl.meta.gpu == "NVIDIA H100 80GB HBM3"
    assert np.all(np.diff(ev["start"].to_numpy()) >= 0)


def test_legacy_2021_schema(tmp_path):
    tl = load_kineto(write(tmp_path, "old.pt.trace.json", legacy_trace(), indent=1))
    tl.validate()
    assert tl.meta.extra["kineto_schema"] == "2021"
    assert tl.meta.ranks == (0,) and tl.meta.extra["rank_source"] == "default"
    m = row(tl, "Memcpy DtoH (Device -> Pinned)")
    assert m["kind"] == EventKind.MEMCPY and m["stream"] == 7 and m["device"] == 0
    assert (m["copy_kind"], m["src_mem"], m["dst_mem"]) == (CopyKind.DTOH, MemKind.DEVICE, MemKind.PINNED)
    assert m["start"] == 1623142623529248000 and m["end"] - m["start"] == 1940000
    k = row(tl, "cask_cudnn::computeOffsetsKernel")
    assert k["kind"] == EventKind.KERNEL and (k["grid_x"], k["block_x"], k["registers"]) == (50, 256, 38)
    assert not k["flags"] & Flag.ORPHAN
    assert row(tl, "Memset (Device)")["flags"] & Flag.ORPHAN
    op = row(tl, "aten::conv2d")
    assert op["kind"] == EventKind.CPU_OP and op["tid"] == 25738 and op["pid"] == 25738  # tid was a string
    assert row(tl, "cudaMemcpyAsync")["kind"] == EventKind.RUNTIME
    d = tl.device_info(0, 0)
    assert (d.sm_count, d.cc_major, d.max_threads_per_sm, d.name) == (80, 7, 2048, "Tesla V100-DGXS-32GB")


def test_legacy_stream_from_tid_when_args_lack_it(tmp_path):
    doc = legacy_trace()
    for e in doc["traceEvents"]:
        if e["cat"] == "Kernel":
            del e["args"]["stream"]
    tl = load_kineto(write(tmp_path, "t.json", doc))
    assert row(tl, "cask_cudnn::computeOffsetsKernel")["stream"] == 7


def test_context_sync_on_no_stream_is_device_wide(tmp_path):
    """Kineto writes CUPTI's "no stream" as uint32 4294967295 on context syncs (HTA's AlexNet trace):
    it is stream -1 (the whole device), never a stream lane of its own or a stream in summaries."""
    from tracelab.analyses import analyze

    doc = current_trace()
    doc["traceEvents"].append(
        {
            "ph": "X",
            "cat": "cuda_sync",
            "name": "Context Sync",
            "pid": 0,
            "tid": -1,
            "ts": 1096.0,
            "dur": 9.0,
            "args": {"cuda_sync_kind": "Context Sync", "stream": 4294967295, "correlation": 15, "device": 0,
                     "context": 1},
        }
    )
    tl = load_kineto(write(tmp_path, "t.json", doc))
    sync = row(tl, "Context Sync")
    assert sync["kind"] == EventKind.SYNC and sync["sync_kind"] == SyncKind.DEVICE
    assert (sync["device"], sync["stream"]) == (0, -1)
    assert int(tl.events["stream"].max()) < 1 << 31 and 4294967295 not in set(tl.lanes["stream"])
    lane = tl.lanes.iloc[int(sync["lane"])]
    assert (lane["device"], lane["stream"]) == (0, -1)
    streams = {s.stream for d in analyze(tl).devices for s in d.streams}
    assert -1 not in streams and 4294967295 not in streams

    from tracelab.render.timeline.data import timeline_rows

    labels = timeline_rows(tl.lanes, tl.strings)["label"].tolist()
    assert "device-wide syncs (no stream)" in labels and not any("4294967295" in x for x in labels)


def test_rank_argument_and_relabel(tmp_path):
    p = write(tmp_path, "t.json", current_trace())
    tl = load_kineto(p, rank=5)
    assert tl.meta.ranks == (5,) and set(tl.events["rank"]) == {5}
    moved = relabel_rank(tl, 2)
    moved.validate()
    assert set(moved.events["rank"]) == {2} and set(moved.lanes["rank"]) == {2}
    assert {d.rank for d in moved.devices} == {2}


def test_hip_names_and_amd_device_numbering(tmp_path):
    props = [
        {
            "id": 0,
            "name": "AMD Instinct MI300X",
            "numSms": 304,
            "computeMajor": 9,
            "computeMinor": 4,
            "warpSize": 64,
        }
    ]
    ev = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipLaunchKernel",
            "pid": 9,
            "tid": 9,
            "ts": 1.0,
            "dur": 2.0,
            "args": {"correlation": 5, "stream": "0x0"},
        },
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "hipDeviceSynchronize",
            "pid": 9,
            "tid": 9,
            "ts": 4.0,
            "dur": 20.0,
            "args": {"correlation": 6},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "Cijk_Alik_Bljk",
            "pid": 2,
            "tid": 0,
            "ts": 3.0,
            "dur": 10.0,
            "args": {"device": 2, "stream": 0, "correlation": 5, "grid": [1024, 1, 1], "block": [256, 1, 1]},
        },
    ]
    tl = load_kineto(write(tmp_path, "amd.json", {"deviceProperties": props, "traceEvents": ev}))
    k = row(tl, "Cijk_Alik_Bljk")
    assert (k["device"], k["stream"]) == (2, 0) and not k["flags"] & Flag.ORPHAN
    assert row(tl, "hipDeviceSynchronize")["sync_kind"] == SyncKind.DEVICE
    assert row(tl, "hipLaunchKernel")["flags"] & Flag.LAUNCH
    # ROCm numbers the GPU 2 while deviceProperties says id 0: same model, so its limits apply
    d = tl.device_info(0, 2)
    assert d.name == "AMD Instinct MI300X" and d.sm_count == 304 and d.warp_size == 64


def test_graph_launch_flags_kernels(tmp_path):
    ev = [
        {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaGraphLaunch",
            "pid": 1,
            "tid": 1,
            "ts": 1.0,
            "dur": 2.0,
            "args": {"correlation": 8},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k1",
            "pid": 0,
            "tid": 7,
            "ts": 3.0,
            "dur": 1.0,
            "args": {"device": 0, "stream": 7, "correlation": 8},
        },
        {
            "ph": "X",
            "cat": "kernel",
            "name": "k2",
            "pid": 0,
            "tid": 7,
            "ts": 4.0,
            "dur": 1.0,
            "args": {"device": 0, "stream": 7, "correlation": 8},
        },
    ]
    tl = load_kineto(write(tmp_path, "g.json", {"traceEvents": ev}))
    assert all(row(tl, n)["flags"] & Flag.GRAPH for n in ("k1", "k2"))


def test_device_launched_kernels_in_a_graph_run_are_graph_kernels(tmp_path):
    """Conditional-node bodies are launched on the device: CUPTI gives them correlation 0."""
    ev = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "pid": 1, "tid": 1, "ts": 1.0,
         "dur": 2.0, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "cond", "pid": 0, "tid": 7, "ts": 3.0, "dur": 1.0,
         "args": {"device": 0, "stream": 7, "correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "body", "pid": 0, "tid": 7, "ts": 4.0, "dur": 1.0,
         "args": {"device": 0, "stream": 7, "correlation": 0}},
    ]
    tl = load_kineto(write(tmp_path, "c.json", {"traceEvents": ev}))
    body = row(tl, "body")
    assert body["flags"] & Flag.GRAPH and body["flags"] & Flag.ORPHAN
    # without any graph launch in the trace, correlation 0 is just an orphan
    tl = load_kineto(write(tmp_path, "d.json", {"traceEvents": ev[1:]}))
    assert not row(tl, "body")["flags"] & Flag.GRAPH


def test_large_epoch_microseconds_keep_ns_digits(tmp_path):
    ev = [
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1751410836123.457, "dur": 0.001}
    ]
    tl = load_kineto(write(tmp_path, "t.json", {"traceEvents": ev}))
    r = row(tl, "op")
    assert r["start"] == 1751410836123457 and r["end"] == 1751410836123458


def test_cpu_only_trace_has_host_events_and_a_note(tmp_path):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 2, "ts": 10, "dur": 5}]
    tl = load_kineto(
        write(tmp_path, "cpu.json", {"traceEvents": ev, "distributedInfo": {"backend": "gloo", "rank": 34}})
    )
    assert len(tl.events) == 1 and tl.devices == () and tl.meta.ranks == (34,)
    assert any("no GPU activity" in n for n in tl.meta.notes)


def test_bare_array_chrome_trace(tmp_path):
    ev = current_trace()["traceEvents"]
    tl = load_kineto(write(tmp_path, "bare.json", ev))
    assert len(tl.events) == 13 and tl.meta.ranks == (0,)


def test_streaming_chunks_match_whole_file(tmp_path, monkeypatch):
    """Many small blocks force every cutting path (fast candidate, exact scan, array end, strings that
    contain '},{' and escaped quotes) and must give the same timeline as one block."""
    doc = current_trace()
    base = doc["traceEvents"]
    tricky = {
        "ph": "X",
        "cat": "cpu_op",
        "name": 'weird "}, {" name \\\\',
        "pid": 100,
        "tid": 101,
        "ts": 1001.0,
        "dur": 1.0,
        "args": {"list": [{"a": 1}, {"b": "}, {"}]},
    }
    events = []
    for i in range(40):
        for e in base + [tricky]:
            e = json.loads(json.dumps(e))
            e["ts"] = e["ts"] + i * 1000
            if "args" in e and "correlation" in e["args"]:
                e["args"]["correlation"] += i * 100
            events.append(e)
    doc["traceEvents"] = events
    # metadata after the array, with '},' patterns of its own
    raw = json.dumps(
        {"traceEvents": events, **{k: v for k, v in doc.items() if k != "traceEvents"}}, indent=1
    )
    p = tmp_path / "big.json"
    p.write_text(raw)
    whole = load_kineto(p)
    for block in (97, 1000, 4096):
        monkeypatch.setattr("tracelab.io.kineto.load.BLOCK_SIZE", block)
        small = load_kineto(p)
        assert small.strings == whole.strings or set(small.strings) == set(whole.strings)
        a = whole.events.drop(columns=["name", "category", "lane"]).reset_index(drop=True)
        b = small.events.drop(columns=["name", "category", "lane"]).reset_index(drop=True)
        assert a.equals(b)
        assert list(whole.names(whole.events["name"])) == list(small.names(small.events["name"]))
        assert small.meta.ranks == (3,) and small.devices == whole.devices
    assert len(whole.events) == 40 * 14
    assert whole.meta.stats["orphan_gpu_events"] == 40


def test_structure_scan_ignores_brackets_in_strings():
    buf = b'{"a": "x}{[\\"]", "b": [1, {"c": "\\\\"}]}'
    s, _c, depth = kineto_stream._structure(buf)
    assert [buf[i : i + 1] for i in s] == [b"{", b"[", b"{", b"}", b"]", b"}"]
    assert list(depth) == [1, 2, 3, 2, 1, 0]


def test_progress_reports_bytes(tmp_path):
    p = write(tmp_path, "t.json.gz", current_trace(), gz=True)
    seen = []
    load_kineto(p, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (p.stat().st_size, p.stat().st_size)


BAD = {
    "truncated.json": lambda: json.dumps(current_trace()).encode()[:-300],
    "empty.json": lambda: b"",
    "garbage.json.gz": lambda: b"\x1f\x8b\x08\x00" + bytes(range(256)) * 4,
    "truncated.json.gz": lambda: gzip.compress(json.dumps(current_trace()).encode())[:-40],
    "image.json": lambda: b"\x89PNG\r\n\x1a\n" + b"\x00" * 100,
    "no_events.json": lambda: json.dumps({"schemaVersion": 1, "deviceProperties": DEVICE_PROPS}).encode(),
    "not_object.json": lambda: b'"just a string"',
    "events_not_array.json": lambda: b'{"traceEvents": {"a": 1}}',
    "element_not_object.json": lambda: b'{"traceEvents": [1, 2, 3]}',
    "trailing_garbage.json": lambda: json.dumps(current_trace()).encode() + b"xx",
    "no_events_inside.json": lambda: b'{"schemaVersion": 1, "traceEvents": []}',
    "only_flows.json": lambda: json.dumps(
        {"traceEvents": [{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1, "cat": "ac2g", "name": "ac2g"}]}
    ).encode(),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_naming_the_file(tmp_path, name):
    p = tmp_path / name
    data = BAD[name]()
    p.write_bytes(data)
    with pytest.raises(TraceFormatError) as info:
        load_kineto(p)
    msg = str(info.value)
    assert "\n" not in msg and str(p) in msg and len(msg) < 400
    assert p.read_bytes() == data  # input untouched


def test_traceevents_after_large_metadata_and_header_cap(tmp_path, monkeypatch):
    doc = {"otherData": ["x" * 100] * 2000, **current_trace()}  # ~200 KB before the traceEvents key
    p = write(tmp_path, "late.json", doc)
    monkeypatch.setattr("tracelab.io.kineto.load.BLOCK_SIZE", 4096)
    assert len(load_kineto(p).events) == 13
    monkeypatch.setattr("tracelab.io.kineto.stream.MAX_HEADER", 64 * 1024)
    with pytest.raises(TraceFormatError, match="no traceEvents array in the first"):
        load_kineto(p)


# ---- the chunk splitter on its own: any JSON layout, any block size, same elements ------------------
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

_tricky_text = st.text(alphabet=st.sampled_from(list('ab{}[],:"\\ \n\té')), max_size=12)
_value = st.recursive(
    st.none() | st.integers(-5, 10**15) | st.floats(allow_nan=False, allow_infinity=False) | _tricky_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_tricky_text, inner, max_size=3),
    max_leaves=6,
)
_event = st.dictionaries(_tricky_text, _value, max_size=4)


def _orjson_pieces(mv: memoryview) -> list:
    import orjson

    try:
        return orjson.loads(bytes(mv))
    except orjson.JSONDecodeError as exc:
        raise kineto_stream.PieceRejected(str(exc)) from None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    events=st.lists(_event, max_size=25),
    meta=st.dictionaries(_tricky_text, _value, max_size=3),
    indent=st.sampled_from([None, 1, 2]),
    block=st.integers(8, 300),
    events_first=st.booleans(),
)
def test_event_chunks_split_any_layout(tmp_path, events, meta, indent, block, events_first):
    meta = {k: v for k, v in meta.items() if k != "traceEvents"}
    doc = {"traceEvents": events, **meta} if events_first else {**meta, "traceEvents": events}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc, indent=indent))
    chunks = kineto_stream.EventChunks(p, _orjson_pieces, block_size=block)
    got = [e for piece in chunks for e in piece]
    assert got == events
    assert json.loads(chunks.metadata_json) == {**meta, "traceEvents": []}


def test_every_truncation_is_a_one_line_error(tmp_path):
    """Cut a valid trace at many points: each cut is rejected with TraceFormatError, nothing else."""
    raw = json.dumps(current_trace(), indent=1).encode()
    end = raw.rstrip().rfind(b"}")
    p = tmp_path / "cut.json"
    for cut in range(0, end, 11):
        p.write_bytes(raw[:cut])
        with pytest.raises(TraceFormatError) as info:
            load_kineto(p)
        assert "\n" not in str(info.value)
