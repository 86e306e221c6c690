"""A tiny trace builder for the analysis tests: explicit events (`TB`) and a host/GPU queue simulator
(`Sim`) that produces the launch -> queue -> run timing a real CUDA program shows. Times in µs."""

from __future__ import annotations

import numpy as np

from tracelab.model import (
    ContextInfo,
    CopyKind,
    DeviceInfo,
    EventKind,
    Flag,
    MemKind,
    RunMeta,
    StringInterner,
    SyncKind,
    build_timeline,
)
from tracelab.model.api_names import classify_api_name


def us(x: float) -> int:
    return round(x * 1000)


class TB:
    """Append events one by one (µs), then `build()` a Timeline through the real build_timeline."""

    def __init__(self, pid: int = 100, tid: int = 1):
        self.rows: list[dict] = []
        self.s = StringInterner()
        self.next_corr = 1
        self.pid, self.tid = pid, tid

    def _add(self, **kw) -> dict:
        row = dict(kw)
        row["name"] = self.s.intern(row["name"]) if isinstance(row.get("name"), str) else row.get("name", -1)
        self.rows.append(row)
        return row

    def api(
        self, name: str, start: float, dur: float, tid: int | None = None, corr: int = -1, rank: int = 0
    ) -> dict:
        sync, flags = classify_api_name(name)
        return self._add(
            kind=EventKind.RUNTIME,
            start=us(start),
            end=us(start + dur),
            pid=self.pid,
            tid=self.tid if tid is None else tid,
            name=name,
            correlation=corr,
            sync_kind=int(sync),
            flags=flags,
            rank=rank,
        )

    def _launch(self, launch_at, launch_name, launch_dur, tid, rank):
        if launch_at is None:
            return -1
        corr = self.next_corr
        self.next_corr += 1
        self.api(launch_name, launch_at, launch_dur, tid=tid, corr=corr, rank=rank)
        return corr

    def kernel(
        self,
        start: float,
        dur: float,
        stream: int = 7,
        name: str = "gemm_kernel",
        device: int = 0,
        launch_at: float | None = None,
        launch_name: str = "cudaLaunchKernel",
        launch_dur: float = 4.0,
        tid: int | None = None,
        flags: int = 0,
        rank: int = 0,
        context: int = 1,
        green_context: int = -1,
    ) -> dict:
        corr = self._launch(launch_at, launch_name, launch_dur, tid, rank)
        return self._add(
            kind=EventKind.KERNEL,
            start=us(start),
            end=us(start + dur),
            device=device,
            stream=stream,
            name=name,
            correlation=corr,
            flags=flags,
            rank=rank,
            context=context,
            green_context=green_context,
        )

    def memcpy(
        self,
        start: float,
        dur: float,
        copy_kind: CopyKind,
        nbytes: int,
        stream: int = 7,
        src: MemKind = MemKind.DEVICE,
        dst: MemKind = MemKind.DEVICE,
        device: int = 0,
        launch_at: float | None = None,
        launch_name: str = "cudaMemcpyAsync",
        launch_dur: float = 4.0,
        tid: int | None = None,
        rank: int = 0,
        kind: EventKind = EventKind.MEMCPY,
        context: int = 1,
        green_context: int = -1,
    ) -> dict:
        corr = self._launch(launch_at, launch_name, launch_dur, tid, rank)
        return self._add(
            kind=kind,
            start=us(start),
            end=us(start + dur),
            device=device,
            stream=stream,
            name=f"Memcpy {copy_kind.name}",
            correlation=corr,
            bytes=nbytes,
            copy_kind=int(copy_kind),
            src_mem=int(src),
            dst_mem=int(dst),
            rank=rank,
            context=context,
            green_context=green_context,
        )

    def memset(self, start: float, dur: float, stream: int = 7, device: int = 0, rank: int = 0) -> dict:
        return self._add(
            kind=EventKind.MEMSET,
            start=us(start),
            end=us(start + dur),
            device=device,
            stream=stream,
            name="Memset (Device)",
            bytes=1024,
            rank=rank,
            context=1,
        )

    def cpu_op(self, name: str, start: float, dur: float, tid: int | None = None, rank: int = 0) -> dict:
        return self._add(
            kind=EventKind.CPU_OP,
            start=us(start),
            end=us(start + dur),
            pid=self.pid,
            tid=self.tid if tid is None else tid,
            name=name,
            rank=rank,
        )

    def range(
        self, name: str, start: float, end: float, kind: EventKind = EventKind.NVTX_RANGE, rank: int = 0
    ) -> dict:
        return self._add(
            kind=kind, start=us(start), end=us(end), pid=self.pid, tid=self.tid, name=name, rank=rank
        )

    def sync_event(
        self,
        kind: SyncKind,
        start: float,
        dur: float,
        stream: int = -1,
        device: int = 0,
        rank: int = 0,
        corr: int = -1,
    ):
        return self._add(
            kind=EventKind.SYNC,
            start=us(start),
            end=us(start + dur),
            device=device,
            stream=stream,
            name=kind.name,
            sync_kind=int(kind),
            rank=rank,
            correlation=corr,
        )

    def build(self, devices=(), contexts=(), notes=(), source="synthetic"):
        cols: dict[str, list] = {}
        keys = sorted({k for r in self.rows for k in r})
        from tracelab.model.timeline import DEFAULTS

        for k in keys:
            cols[k] = np.array([int(r.get(k, DEFAULTS[k])) for r in self.rows])
        return build_timeline(
            cols,
            self.s.strings,
            RunMeta(source=source, format="kineto", notes=tuple(notes)),
            devices=devices,
            contexts=contexts,
        )


class Sim:
    """A host thread launching onto GPU streams: each launch costs `launch_cost` µs of host time and
    the op starts `latency` µs after its launch call began, once its stream (and any dependency) is
    free. `item()` models `.item()`: a DtoH copy into pageable memory that blocks the host until it
    is done, then cudaStreamSynchronize."""

    def __init__(self, launch_cost: float = 8.0, latency: float = 5.0):
        self.tb = TB()
        self.h = 0.0
        self.ready: dict[int, float] = {}
        self.launch_cost = launch_cost
        self.latency = latency

    def _start(self, stream: int, after: float = 0.0) -> float:
        return max(self.h + self.latency, self.ready.get(stream, 0.0), after)

    def kernel(
        self,
        dur: float,
        stream: int = 7,
        name: str = "gemm_kernel",
        after: float = 0.0,
        launch_name: str = "cudaLaunchKernel",
        flags: int = 0,
    ) -> float:
        t = self._start(stream, after)
        self.tb.kernel(
            t,
            dur,
            stream=stream,
            name=name,
            launch_at=self.h,
            launch_name=launch_name,
            launch_dur=self.launch_cost * 0.6,
            flags=flags,
        )
        self.ready[stream] = t + dur
        self.h += self.launch_cost
        return t + dur

    def copy(
        self,
        dur: float,
        copy_kind: CopyKind,
        nbytes: int,
        stream: int = 7,
        pageable: bool = False,
        after: float = 0.0,
    ) -> float:
        t = self._start(stream, after)
        host_mem = MemKind.PAGEABLE if pageable else MemKind.PINNED
        src, dst = (host_mem, MemKind.DEVICE) if copy_kind == CopyKind.HTOD else (MemKind.DEVICE, host_mem)
        blocking = pageable  # pageable copies block the host until the copy is done
        launch_dur = (t + dur + 2 - self.h) if blocking else self.launch_cost * 0.6
        self.tb.memcpy(
            t,
            dur,
            copy_kind,
            nbytes,
            stream=stream,
            src=src,
            dst=dst,
            launch_at=self.h,
            launch_dur=launch_dur,
        )
        self.ready[stream] = t + dur
        self.h = max(self.h + self.launch_cost, self.h + launch_dur)
        return t + dur

    def item(self, stream: int = 7, print_us: float = 300.0) -> None:
        self.copy(2.0, CopyKind.DTOH, 4, stream=stream, pageable=True)
        self.tb.api("cudaStreamSynchronize", self.h, 2.0)
        self.tb.sync_event(SyncKind.STREAM, self.h, 2.0, stream=stream)
        self.h += 2.0
        self.tb.cpu_op("aten::_local_scalar_dense", self.h - 2.5, 3.0)
        self.tb.cpu_op("print", self.h, print_us)
        self.h += print_us

    def host_work(self, dur: float, name: str = "aten::python_work") -> None:
        self.tb.cpu_op(name, self.h, dur)
        self.h += dur

    def build(self, **kw):
        return self.tb.build(**kw)


def test_sim_orders_launches_before_work():
    sim = Sim()
    end = sim.kernel(100.0)
    sim.item()
    tl = sim.build()
    ev = tl.events
    k = ev[ev["kind"] == EventKind.KERNEL].iloc[0]
    launch = ev[(ev["kind"] == EventKind.RUNTIME) & (ev["correlation"] == k["correlation"])].iloc[0]
    assert launch["start"] < k["start"] and k["end"] == us(end)
    memcpy = ev[ev["kind"] == EventKind.MEMCPY].iloc[0]
    assert memcpy["start"] >= k["end"]  # queued behind the kernel on the same stream
    copy_call = ev[(ev["kind"] == EventKind.RUNTIME) & (ev["correlation"] == memcpy["correlation"])].iloc[0]
    assert copy_call["end"] > memcpy["end"]  # the host blocked until the pageable copy finished
    assert ((ev["flags"].to_numpy() & Flag.BLOCKING) != 0).sum() == 1  # cudaStreamSynchronize


__all__ = ["TB", "ContextInfo", "DeviceInfo", "Sim", "us"]
