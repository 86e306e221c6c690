"""One small hand-made program, written out as a Kineto JSON trace or as an nsys-schema SQLite export
(the real table and column names), so a golden test can run the same program through both parsers and
the CLI. Times are in µs from the trace start; every op is placed by hand in the test."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

KINDS = {"HtoD": 1, "DtoH": 2, "DtoD": 8}
MEMS = {"Pageable": 0, "Pinned": 1, "Device": 2}
BASE_US = 1_000_000.0  # Kineto timestamps start here (µs); nsys at BASE_US * 1000 ns


@dataclass
class _Op:
    kind: str  # kernel / memcpy / memset
    start: float
    dur: float
    stream: int
    device: int
    name: str
    corr: int
    copy: str = ""
    src: str = ""
    dst: str = ""
    nbytes: int = 0
    grid: tuple[int, int, int] = (1, 1, 1)
    green_context: int = 0


@dataclass
class _Api:
    name: str
    start: float
    dur: float
    tid: int
    corr: int


@dataclass
class Program:
    ops: list[_Op] = field(default_factory=list)
    apis: list[_Api] = field(default_factory=list)
    cpu_ops: list[tuple[str, float, float, int]] = field(default_factory=list)
    steps: list[tuple[float, float]] = field(default_factory=list)
    next_corr: int = 100
    # OS runtime calls (nsys --trace=osrt, table OSRT_API; Kineto has none). None: not traced at all (no
    # table); a list, even empty: traced
    os_calls: list[tuple[str, float, float, int]] | None = None
    # user ranges: torch record_function (Kineto user_annotation), NVTX push/pop ranges in nsys
    user_ranges: list[tuple[str, float, float, int]] = field(default_factory=list)

    def _corr(self) -> int:
        self.next_corr += 1
        return self.next_corr

    def api(self, name: str, start: float, dur: float, tid: int = 1, corr: int = -1) -> int:
        self.apis.append(_Api(name, start, dur, tid, corr))
        return corr

    def _launched(self, launch: tuple | None, default_name: str) -> int:
        """launch = (start, dur[, name[, tid]]) of the API call that launches the op, or None."""
        if launch is None:
            return 90_000 + len(self.ops)  # a correlation id no call has: launch not in the trace
        corr = self._corr()
        start, dur, *rest = launch
        name = rest[0] if rest else default_name
        tid = rest[1] if len(rest) > 1 else 1
        self.api(name, start, dur, tid, corr)
        return corr

    def kernel(self, start, dur, launch=None, stream=7, device=0, name="gemm_kernel", grid=(1, 1, 1), green_context=0):
        corr = self._launched(launch, "cudaLaunchKernel")
        self.ops.append(_Op("kernel", start, dur, stream, device, name, corr, grid=grid, green_context=green_context))

    def memcpy(self, start, dur, copy, src, dst, nbytes, launch=None, stream=7, device=0):
        corr = self._launched(launch, "cudaMemcpyAsync")
        self.ops.append(_Op("memcpy", start, dur, stream, device, "", corr, copy, src, dst, nbytes))

    def memset(self, start, dur, mem, nbytes, launch=None, stream=7, device=0):
        corr = self._launched(launch, "cudaMemsetAsync")
        self.ops.append(_Op("memset", start, dur, stream, device, "", corr, dst=mem, nbytes=nbytes))

    def cpu_op(self, name: str, start: float, dur: float, tid: int = 1) -> None:
        self.cpu_ops.append((name, start, dur, tid))

    def user_range(self, name: str, start: float, dur: float, tid: int = 1) -> None:
        """A user range (record_function / NVTX push-pop), e.g. PyTorch's DataLoader iterator op."""
        self.user_ranges.append((name, start, dur, tid))

    def step(self, start: float, end: float) -> None:
        self.steps.append((start, end))

    def os_call(self, name: str, start: float, dur: float, tid: int = 1) -> None:
        """An OS runtime call (read, clock_nanosleep, pthread_cond_wait, ...) on thread tid."""
        self.os_calls = (self.os_calls or []) + [(name, start, dur, tid)]

    def trace_os_calls(self) -> None:
        """OS runtime calls were traced (an OSRT_API table, maybe with no rows)."""
        self.os_calls = self.os_calls or []

    # ---- writers ------------------------------------------------------------------------------
    def kineto(self, path: Path, cpu_ops: bool = True) -> Path:
        host = {"pid": 100}
        ev: list[dict] = []
        for i, (s, e) in enumerate(self.steps):
            ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", **host, "tid": 1,
                       "ts": BASE_US + s, "dur": e - s, "args": {}})
        for name, s, d, tid in self.user_ranges:
            ev.append({"ph": "X", "cat": "user_annotation", "name": name, **host, "tid": tid, "ts": BASE_US + s,
                       "dur": d, "args": {}})
        if cpu_ops:
            for name, s, d, tid in self.cpu_ops:
                ev.append({"ph": "X", "cat": "cpu_op", "name": name, **host, "tid": tid, "ts": BASE_US + s, "dur": d,
                           "args": {}})
        for a in self.apis:
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": a.name, **host, "tid": a.tid, "ts": BASE_US + a.start,
                       "dur": a.dur, "args": {"correlation": a.corr} if a.corr >= 0 else {}})
        for o in self.ops:
            args = {"device": o.device, "context": 1, "stream": o.stream, "correlation": o.corr}
            if o.kind == "kernel":
                cat, name = "kernel", o.name
                args.update({"grid": list(o.grid), "block": [128, 1, 1]})
            elif o.kind == "memcpy":
                cat, name = "gpu_memcpy", f"Memcpy {o.copy} ({o.src} -> {o.dst})"
                args["bytes"] = o.nbytes
            else:
                cat, name = "gpu_memset", f"Memset ({o.dst})"
                args["bytes"] = o.nbytes
            ev.append({"ph": "X", "cat": cat, "name": name, "pid": o.device, "tid": o.stream, "ts": BASE_US + o.start,
                       "dur": o.dur, "args": args})
        doc = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0,
                                  "numSms": 132, "totalGlobalMem": 150_000_000_000}],
            "traceEvents": ev,
        }
        path.write_text(json.dumps(doc))
        return path

    def nsys(self, path: Path) -> Path:
        ns = lambda us: round((BASE_US + us) * 1000)
        strings: dict[str, int] = {}

        def sid(s: str) -> int:
            return strings.setdefault(s, len(strings) + 1)

        con = sqlite3.connect(path)
        ex = con.execute
        ex("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        ex("CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT)")
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
            ("EXPORT_PRODUCT_VERSION", "2025.3.1"), ("EXPORT_SCHEMA_VERSION", "3.17.1"),
            ("EXPORT_SCHEMA_VERSION_MAJOR", "3"), ("EXPORT_SCHEMA_VERSION_MINOR", "17")])
        pid = 4242
        gpid = (1 << 48) | (pid << 24)
        gtid = lambda t: gpid | (4242 + t)
        ex("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, "
           "greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER, "
           "shortName INTEGER, registersPerThread INTEGER, gridX INTEGER, gridY INTEGER, gridZ INTEGER, "
           "blockX INTEGER, blockY INTEGER, blockZ INTEGER, staticSharedMemory INTEGER, dynamicSharedMemory INTEGER, "
           "launchType INTEGER, graphNodeId INTEGER, graphId INTEGER)")
        ex("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, "
           "greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, bytes INTEGER, "
           "copyKind INTEGER, srcKind INTEGER, dstKind INTEGER, graphNodeId INTEGER)")
        ex("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER, contextId INTEGER, "
           "greenContextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, value INTEGER, "
           "bytes INTEGER, memKind INTEGER, graphNodeId INTEGER)")
        ex("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, globalTid INTEGER, "
           "correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER)")
        ex("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER, "
           "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER)")
        for o in self.ops:
            if o.kind == "kernel":
                n = sid(o.name)
                ex("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,1,?,?,?,?,?,?,32,?,?,?,128,1,1,0,0,1,NULL,NULL)",
                   (ns(o.start), ns(o.start + o.dur), o.device, o.green_context, o.stream, o.corr, gpid, n, n, *o.grid))
            elif o.kind == "memcpy":
                ex("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,1,0,?,?,?,?,?,?,?,NULL)",
                   (ns(o.start), ns(o.start + o.dur), o.device, o.stream, o.corr, gpid, o.nbytes, KINDS[o.copy],
                    MEMS[o.src], MEMS[o.dst]))
            else:
                ex("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (?,?,?,1,0,?,?,?,0,?,?,NULL)",
                   (ns(o.start), ns(o.start + o.dur), o.device, o.stream, o.corr, gpid, o.nbytes, MEMS[o.dst]))
        for a in self.apis:
            ex("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,0,?,?,?,0,NULL)",
               (ns(a.start), ns(a.start + a.dur), gtid(a.tid), a.corr if a.corr >= 0 else None, sid(a.name + "_v3020")))
        for i, (s, e) in enumerate(self.steps):
            ex("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?,?,59,?,?,0)",
               (ns(s), ns(e), f"step {i}", gtid(1)))
        for name, s, d, tid in self.user_ranges:
            ex("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) VALUES (?,?,59,?,?,0)",
               (ns(s), ns(s + d), name, gtid(tid)))
        if self.os_calls is not None:  # the columns of nsys 2025.3's OSRT_API (schema 3.20)
            ex("CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
               "globalTid INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, nestingLevel INTEGER, "
               "callchainId INTEGER NOT NULL)")
            ex("INSERT INTO OSRT_API VALUES (?,?,27,?,?,0,0,0)",
               (ns(0), ns(0), gtid(1), sid("OS runtime libraries profiling started")))  # a zero-length marker
            for name, s, d, tid in self.os_calls:
                ex("INSERT INTO OSRT_API VALUES (?,?,27,?,?,0,0,0)", (ns(s), ns(s + d), gtid(tid), sid(name)))
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(v, k) for k, v in strings.items()])
        ex("CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, smCount INTEGER, computeMajor INTEGER, "
           "computeMinor INTEGER, cuDevice INTEGER, totalMemory INTEGER)")
        devices = sorted({o.device for o in self.ops}) or [0]
        for d in devices:
            ex("INSERT INTO TARGET_INFO_GPU VALUES (1, ?, 'NVIDIA H200', 132, 9, 0, ?, 150000000000)", (d, d))
        con.commit()
        con.close()
        return path
