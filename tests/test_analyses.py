"""Device summaries, overlap and gap causes on small synthetic timelines (times in µs)."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_analyses_builder import TB, Sim, us

from tracelab.analyses import AnalysisOptions, analyze
from tracelab.model import ContextInfo, CopyKind, DeviceInfo, Flag, MemKind, SyncKind
from tracelab.render.export.document import to_document
from tracelab.render.text.gap_evidence import gap_evidence


def ev(analysis, gap) -> str:
    """The evidence text of one gap (tracelab.render.text.gap_evidence)."""
    return gap_evidence(analysis, [gap])[0]


def _two_stream_device():
    tb = TB()
    # stream 7: kernels [0,100) and [150,250); stream 8: kernel [50,120), memcpy [200,300)
    tb.kernel(0, 100, stream=7, launch_at=-10)
    tb.kernel(150, 100, stream=7, launch_at=-5)
    tb.kernel(50, 70, stream=8, launch_at=-8, context=2, green_context=5)
    tb.memcpy(200, 100, CopyKind.HTOD, 1 << 20, stream=8, src=MemKind.PINNED, context=2, green_context=5)
    tb.memset(400, 10, stream=9)
    # NCCL kernel on stream 20 overlapping compute [0,100) for 30 µs
    tb.kernel(70, 40, stream=20, name="ncclKernel_AllReduce_RING_LL_Sum_float")
    # copies on two streams at once: DtoH on stream 21 [250,320) overlaps the HtoD [200,300)
    tb.memcpy(250, 70, CopyKind.DTOH, 1 << 20, stream=21, dst=MemKind.PINNED)
    return tb.build(
        devices=[DeviceInfo(rank=0, device=0, name="NVIDIA H100", sm_count=132)],
        contexts=[ContextInfo(0, 0, 2, is_green=True, green_context=5, sm_count=16)],
    )


def test_device_summary_busy_idle_kinds_and_streams():
    a = analyze(_two_stream_device())
    (d,) = a.devices
    assert (d.name, d.sm_count) == ("NVIDIA H100", 132)
    assert d.span_ns == us(410)
    # union: [0,120) ∪ [150,320) ∪ [400,410)
    assert d.busy_ns == us(120 + 170 + 10)
    assert d.idle_ns == d.span_ns - d.busy_ns
    assert d.kernel_ns == us(120 + 100)  # [0,120) ∪ [150,250)
    assert d.memcpy_ns == us(120)  # [200,320)
    assert d.memset_ns == us(10)
    assert d.comm_ns == us(40)
    assert (d.kernels, d.memcpys, d.memsets) == (4, 2, 1)
    by_stream = {s.stream: s for s in d.streams}
    assert sorted(by_stream) == [7, 8, 9, 20, 21]
    assert by_stream[7].busy_ns == us(200) and by_stream[7].kernels == 2
    assert by_stream[8].busy_ns == us(170) and (by_stream[8].kernels, by_stream[8].memcpys) == (1, 1)
    assert (by_stream[8].context, by_stream[8].green_context) == (2, 5)
    assert by_stream[7].green_context is None
    assert by_stream[9].memsets == 1


def test_overlap_definitions():
    (d,) = analyze(_two_stream_device()).devices
    o = d.overlap
    # compute (non-comm) kernels: s7 [0,100) [150,250), s8 [50,120): two streams at once [50,100)
    assert o.compute_compute_ns == us(50)
    # compute ∪ = [0,120) ∪ [150,250); copies ∪ = [200,320) ∪ [400,410) -> [200,250)
    assert o.compute_copy_ns == us(50)
    # comm [70,110) within compute
    assert o.compute_comm_ns == us(40)
    # copies on two streams at once: [250,300)
    assert o.copy_copy_ns == us(50)
    for v in (o.compute_compute_ns, o.compute_copy_ns, o.compute_comm_ns):
        assert v <= d.kernel_ns


def test_same_stream_overlap_is_not_compute_compute():
    tb = TB()
    tb.kernel(0, 100, stream=7)
    tb.kernel(90, 100, stream=7)  # PDL-style overlap on one stream
    (d,) = analyze(tb.build()).devices
    assert d.overlap.compute_compute_ns == 0
    assert d.busy_ns == us(190) and d.streams[0].busy_ns == us(190)


def _gap_case(cause: str):
    """Kernel A [0,100) then kernel B [300,400): one 200 µs gap, with host activity arranged so that
    exactly one cause applies."""
    tb = TB()
    tb.kernel(0, 100, stream=7, name="kernel_A", launch_at=-20)
    if cause == "host_sync_inprogress":
        tb.api("cudaStreamSynchronize", 10, 92)  # waiting when the GPU went idle at 100
        tb.cpu_op("aten::python_work", 102, 188)
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=290)
    elif cause == "host_sync_cover":
        tb.api("cudaDeviceSynchronize", 110, 185, tid=2)
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=296)
    elif cause == "item":
        # .item(): DtoH copy into pageable memory [100,102) whose cudaMemcpyAsync blocks until 104
        tb.memcpy(100, 2, CopyKind.DTOH, 4, dst=MemKind.PAGEABLE, launch_at=20, launch_dur=84)
        tb.api("cudaStreamSynchronize", 105, 1)
        tb.cpu_op("print", 106, 180)
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=290)
    elif cause == "launch_latency":
        tb.cpu_op("aten::slow_python_op", 95, 195)
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=291)
    elif cause == "no_work":
        # launched by a thread with no recorded activity before its launch: the host was absent
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=292, tid=3)
    elif cause == "between_calls":
        # nothing recorded between the calls of the launching thread: busy on the host, not "no work"
        tb.api("cudaLaunchKernel", 50, 5)
        tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=292)
    elif cause == "dependency_wait":
        tb.api("cudaStreamWaitEvent", 40, 3)
        tb.sync_event(SyncKind.STREAM_WAIT_EVENT, 40, 3, stream=8)
        tb.api("cudaDeviceSynchronize", 50, 360)  # also blocked, but the work was already queued
        tb.kernel(300, 100, stream=8, name="kernel_B", launch_at=45)
    elif cause == "unknown":
        tb.cpu_op("aten::busy", 90, 220)
        tb.kernel(300, 100, stream=7, name="kernel_B")  # no launch recorded
    return tb.build()


@pytest.mark.parametrize(
    "case,cause,evidence",
    [
        (
            # a wait in progress at the gap start that covers 2 of 200 µs: the time after it is the cause
            # (issue 24 item 7; it used to make the gap host_sync)
            "host_sync_inprogress",
            "launch_latency",
            (
                "cudaStreamSynchronize on thread 1 returned at 2.0 µs into the gap, covering 1% of the gap; after it: kernel "
                "kernel_B on stream 7 launched only 190.0 µs into the gap by cudaLaunchKernel on thread 1, which was not "
                "waiting for the GPU; host busy 100% of the time up to the next launch (host data: CPU ops / NVTX "
                "ranges + CUDA API) (in aten::python_work)"
            ),
        ),
        (
            "host_sync_cover",
            "host_sync",
            "cudaDeviceSynchronize on thread 2 from 10.0 µs into the gap covers 92% of the gap",
        ),
        (
            "item",
            "launch_latency",
            (
                "cudaMemcpyAsync on thread 1 returned at 2.0 µs into the gap, covering 1% of the gap; after it: kernel kernel_B "
                "on stream 7 launched only 188.0 µs into the gap by cudaLaunchKernel on thread 1, which was not waiting for "
                "the GPU; host busy 97% of the time up to the next launch"
            ),
        ),
        (
            "launch_latency",
            "launch_latency",
            (
                "kernel kernel_B on stream 7 launched only 191.0 µs into the gap by cudaLaunchKernel on thread 1, which was not "
                "waiting for the GPU; host busy 99% of the time up to the next launch (host data: CPU ops / NVTX "
                "ranges + CUDA API) (in aten::slow_python_op)"
            ),
        ),
        (
            "between_calls",
            "launch_latency",
            # launch at 292: [100, 292) has no recorded activity of thread 1 -> 0% (CUDA API calls only)
            "host busy 0% of the time up to the next launch (host data: CUDA API calls only",
        ),
        (
            "no_work",
            "no_work",
            "cudaLaunchKernel on thread 3 has no recorded activity before its launch 192.0 µs into the gap",
        ),
        ("dependency_wait", "dependency_wait", "last cudaStreamWaitEvent 60.0 µs before the gap"),
        ("unknown", "unknown", "its launch is not in the trace"),
    ],
)
def test_gap_causes(case, cause, evidence):
    a = analyze(_gap_case(case))
    (g,) = a.gaps
    assert (g.start_ns, g.end_ns, g.duration_ns) == (
        us(100 if case != "item" else 102),
        us(300),
        us(200 if case != "item" else 198),
    )
    assert g.cause == cause, ev(a, g)
    assert evidence in ev(a, g), ev(a, g)


def test_dependency_wait_evidence_names_the_launch():
    a = analyze(_gap_case("dependency_wait"))
    (g,) = a.gaps
    assert (
        "was already launched (cudaLaunchKernel on thread 1, 55.0 µs before the gap) but started only 200.0 µs into "
        "the gap"
        in ev(a, g)
    )


def test_a_launch_call_in_flight_when_the_gap_began_is_said_so():
    """green_ctx: the next kernel's launch call began 41 ns before the GPU went idle and returned inside the
    gap. It is launch_latency (the thread was in the launch call, not waiting for the GPU), and the evidence
    says the call was in flight rather than "launched only at -41 ns"; every time in it is said from the
    gap's start."""
    tb = TB()
    tb.kernel(0, 100, stream=7, name="kernel_A", launch_at=-20)
    tb.cpu_op("aten::matmul", 50, 390)
    tb.kernel(300, 100, stream=7, name="kernel_B", launch_at=99.959, launch_dur=150)
    a = analyze(tb.build())
    (g,) = a.gaps
    assert (g.start_ns, g.end_ns, g.cause) == (us(100), us(300), "launch_latency")
    text = ev(a, g)
    assert text.startswith(
        "kernel kernel_B on stream 7 was still being launched when the GPU went idle (cudaLaunchKernel on "
        "thread 1 began 41 ns before the gap), which was not waiting for the GPU"
    ), text
    assert "launched only" not in text and " at -" not in text and " at +" not in text


def test_gap_threshold_and_order():
    tb = TB()
    tb.kernel(0, 10, launch_at=-5)
    tb.kernel(15, 10, launch_at=-4)  # 5 µs gap: below the default 10 µs threshold
    tb.kernel(100, 10, launch_at=-3)  # 75 µs gap
    tb.kernel(130, 10, launch_at=-2)  # 20 µs gap
    tl = tb.build()
    gaps = analyze(tl).gaps
    assert [(g.start_ns, g.duration_ns) for g in gaps] == [(us(25), us(75)), (us(110), us(20))]  # time order
    a = analyze(tl, AnalysisOptions(gap_threshold_ns=1_000))
    gaps = a.gaps
    assert [g.duration_ns for g in gaps] == [us(5), us(75), us(20)]
    # all launched up front, but nothing shows a queued dependency: unknown, and the evidence says so
    assert all(g.cause == "unknown" and "no stream-wait or event record" in e for g, e in zip(gaps, gap_evidence(a)))


def test_gaps_are_per_device_and_within_span():
    tb = TB()
    tb.kernel(0, 10, device=0, launch_at=-5)
    tb.kernel(50, 10, device=0, launch_at=-4)
    tb.kernel(20, 10, device=1, launch_at=-3)
    tb.kernel(200, 10, device=1, launch_at=-2)
    a = analyze(tb.build())
    assert [(g.device, g.start_ns, g.end_ns) for g in a.gaps] == [(0, us(10), us(50)), (1, us(30), us(200))]
    # device 0 is idle from 60 on, but that is outside its span: no gap
    assert [d.span_ns for d in a.devices] == [us(60), us(190)]


def test_zero_length_kernel_splits_gap():
    tb = TB()
    tb.kernel(0, 10, launch_at=-5)
    tb.kernel(50, 0, launch_at=-4)
    tb.kernel(100, 10, launch_at=-3)
    a = analyze(tb.build())
    assert [(g.start_ns, g.end_ns) for g in a.gaps] == [(us(10), us(50)), (us(50), us(100))]
    assert a.devices[0].busy_ns == us(20)


def test_item_per_step_produces_host_sync_gaps_from_the_simulator():
    sim = Sim()
    for i in range(5):
        sim.tb.range(f"ProfilerStep#{i}", sim.h, sim.h + 1)  # placeholder step marker (start)
        for _ in range(4):
            sim.kernel(200)
        sim.item()
    a = analyze(sim.build())
    causes = [g.cause for g in a.gaps]
    # each gap begins while .item()'s copy call blocks, which returns right after: the time after it (the
    # host printing and launching) is the cause (issue 24 item 7)
    assert len(causes) == 4 and set(causes) == {"launch_latency"}
    assert all(e.startswith("cudaMemcpyAsync on thread 1 returned at") for e in gap_evidence(a))


def test_exclude_orphans_and_notes():
    tb = TB()
    tb.kernel(0, 100, launch_at=-10)
    tb.kernel(500, 100, flags=Flag.ORPHAN)  # captured before the profiling window: no launch
    tl = tb.build(notes=("parser: 1 GPU event without a matching launch",))
    full = analyze(tl)
    assert full.devices[0].busy_ns == us(200) and full.devices[0].span_ns == us(600)
    assert full.notes[0] == "parser: 1 GPU event without a matching launch"
    assert len(full.notes) == 2 and "no training steps" in full.notes[1]  # steps: tracelab.analyses.steps.infer
    lens = analyze(tl, AnalysisOptions(exclude_orphans=True))
    assert lens.devices[0].busy_ns == us(100) and lens.devices[0].span_ns == us(100)
    assert lens.notes[0].startswith("parser:") and "excluded 1 GPU events" in lens.notes[1]
    assert lens.options.exclude_orphans


def test_no_gpu_activity():
    tb = TB()
    tb.cpu_op("aten::add", 0, 10)
    a = analyze(tb.build())
    assert a.devices == () and a.gaps == () and a.findings == ()
    assert any("no GPU activity" in n for n in a.notes)


def test_document_is_schema_2_json():
    a = analyze(_gap_case("item"))
    doc = to_document(a)
    text = json.dumps(doc)
    back = json.loads(text)
    assert back["schema"] == 2
    assert back["gaps"][0]["host_data"] == "cpu_ops" and back["notes"] == list(a.notes)
    assert {"schema", "trace", "devices", "steps", "setup", "gaps", "findings", "notes"} <= set(back)
    assert back["devices"][0]["busy_ns"] == us(202)
    assert back["gaps"][0]["cause"] == "launch_latency"
    assert set(back["devices"][0]["overlap"]) == {
        "compute_compute_ns",
        "compute_copy_ns",
        "compute_comm_ns",
        "copy_copy_ns",
    }


def test_multi_rank_host_lookup_is_per_rank():
    tb = TB()
    # rank 1 launches its kernel late; rank 0 launched its own up front: causes differ per rank
    tb.kernel(0, 10, rank=0, launch_at=-5)
    tb.kernel(100, 10, rank=0, launch_at=-4)
    tb.kernel(0, 10, rank=1, launch_at=-5)
    tb.cpu_op("aten::busy", 5, 95, rank=1)
    tb.kernel(100, 10, rank=1, launch_at=95)
    a = analyze(tb.build())
    # rank 0's kernel was queued but nothing shows what it waited for: unknown
    assert [(g.rank, g.cause) for g in a.gaps] == [(0, "unknown"), (1, "launch_latency")]


def test_profiler_sync_record_defers_to_its_api_call():
    """Kineto writes an "Event Sync" cuda_sync record for cudaEventQuery too; the API call (a query,
    not blocking) decides. Without the API call in the trace, the record itself counts as a wait."""
    for with_api, cause in ((True, "launch_latency"), (False, "host_sync")):
        tb = TB()
        tb.kernel(0, 100, name="kernel_A", launch_at=-20)
        if with_api:
            tb.api("cudaEventQuery", 95, 110, corr=500)
        tb.sync_event(SyncKind.EVENT, 95, 110, corr=500)
        tb.kernel(300, 100, name="kernel_B", launch_at=295)
        a = analyze(tb.build())
        (g,) = a.gaps
        assert g.cause == cause, ev(a, g)


def test_host_view_finds_outermost_op_per_thread():
    from tracelab.analyses.core.host import HostView

    tb = TB()
    tb.cpu_op("outer", 0, 100, tid=1)
    tb.cpu_op("inner", 10, 20, tid=1)
    tb.cpu_op("later", 150, 10, tid=1)
    tb.cpu_op("other_thread", 0, 500, tid=2)
    tb.kernel(0, 1)
    tl = tb.build()
    hv = HostView(tl, 0)
    idx = hv.op_at(np.array([1, 1, 1, 1, 2, 3]), np.array([15, 50, 120, 155, 120, 5]) * 1000)
    got = [tl.name(int(hv.op_name[i])) if i >= 0 else None for i in idx.tolist()]
    assert got == ["outer", "outer", None, "later", "other_thread", None]


@st.composite
def _random_device_work(draw):
    n = draw(st.integers(1, 25))
    items = []
    for _ in range(n):
        start = draw(st.integers(0, 200))
        items.append(
            (
                draw(st.sampled_from(["k", "k", "c", "s", "n"])),  # kernel, copy, memset, nccl kernel
                start,
                start + draw(st.integers(0, 40)),
                draw(st.sampled_from([7, 8, 9])),
            )
        )
    return items


@settings(max_examples=150, deadline=None)
@given(_random_device_work())
def test_device_invariants_against_brute_force(items):
    tb = TB()
    for what, s, e, stream in items:
        if what == "c":
            tb.memcpy(s, e - s, CopyKind.HTOD, 1024, stream=stream)
        elif what == "s":
            tb.memset(s, e - s, stream=stream)
        else:
            tb.kernel(s, e - s, stream=stream, name="ncclKernel_AllReduce" if what == "n" else "gemm")
    a = analyze(tb.build(), AnalysisOptions(gap_threshold_ns=1))
    (d,) = a.devices

    def cells(kinds, stream=None):
        c = np.zeros(241, dtype=bool)
        for what, s, e, st_ in items:
            if what in kinds and (stream is None or st_ == stream):
                c[s:e] = True
        return c

    busy = cells("kcsn")
    lo, hi = min(s for _, s, _, _ in items), max(e for _, _, e, _ in items)
    assert d.span_ns == us(hi - lo) and d.busy_ns == us(busy.sum())
    assert d.kernel_ns == us(cells("kn").sum()) and d.comm_ns == us(cells("n").sum())
    compute, copy = cells("k"), cells("cs")
    assert d.overlap.compute_copy_ns == us((compute & copy).sum())
    assert d.overlap.compute_comm_ns == us((compute & cells("n")).sum())
    streams_k = sum(cells("k", s).astype(int) for s in (7, 8, 9))
    streams_c = sum(cells("cs", s).astype(int) for s in (7, 8, 9))
    assert d.overlap.compute_compute_ns == us((streams_k >= 2).sum())
    assert d.overlap.copy_copy_ns == us((streams_c >= 2).sum())
    # with a 1 ns threshold the gaps are exactly the idle time inside the span
    assert sum(g.duration_ns for g in a.gaps) == d.idle_ns
    assert {s.stream: s.busy_ns for s in d.streams} == {
        s: us(cells("kcsn", s).sum()) for s in {it[3] for it in items}
    }


def test_queued_graph_node_without_a_stream_wait_is_unknown():
    """A CUDA graph node that starts late inside its graph: already queued, but its dependencies are edges
    of the graph that no trace records -> unknown, and the evidence says so (not dependency_wait)."""
    tb = TB()
    tb.kernel(0, 100, launch_at=-30, launch_name="cudaGraphLaunch", flags=Flag.GRAPH)
    tb.kernel(300, 100, launch_at=-30, launch_name="cudaGraphLaunch", flags=Flag.GRAPH)
    a = analyze(tb.build())
    (g,) = a.gaps
    assert g.cause == "unknown" and g.duration_ns == us(200)
    assert "no stream-wait or event record" in ev(a, g) and "a CUDA graph node" in ev(a, g)
