"""Gap causes on hand-made programs, both formats, through the CLI. Every program: kernel A [0,100) µs
then kernel B [300,400) µs on stream 7 (one 200 µs gap) unless the test says otherwise; A is launched at
-20 µs, well before."""

from __future__ import annotations

from trace_builder import Program

US = 1000  # ns per µs


def ab(launch_b=(290, 4), tid_b=1, **kw) -> Program:
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.kernel(300, 100, launch=None if launch_b is None else (*launch_b, "cudaLaunchKernel", tid_b), **kw)
    return p


def only_gap(doc: dict) -> dict:
    (g,) = doc["gaps"]
    assert g["duration_ns"] == 200 * US  # [100,300)
    return g


def test_host_sync_wait_in_progress(run):
    """A wait in progress when the gap begins that covers only 2 of its 200 µs: the gap is not host_sync
    (issue 24 item 7); the time after the wait returned has its own cause (here: nothing recorded, busy)."""
    p = ab()
    p.api("cudaStreamSynchronize", 10, 92)  # the launching thread waits until 102: in progress at 100
    g = only_gap(run(p))
    assert g["cause"] == "launch_latency" and g["duration_ns"] == 200 * US
    assert g["evidence"].startswith("cudaStreamSynchronize")
    assert "returned at 2.0 µs into the gap, covering 1% of the gap; after it: kernel gemm_kernel" in g["evidence"]
    # a wait that covers most of the gap is host_sync: [10,220) covers 120 of 200 µs
    q = ab()
    q.api("cudaStreamSynchronize", 10, 210)
    g = only_gap(run(q))
    assert g["cause"] == "host_sync" and "covers 60% of the gap" in g["evidence"]


def test_item_pageable_dtoh_blocks(run):
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    # .item(): DtoH copy into pageable memory [100,102) whose cudaMemcpyAsync returns only at 104
    p.memcpy(100, 2, "DtoH", "Device", "Pageable", 4, launch=(20, 84))
    p.kernel(300, 100, launch=(290, 4))
    (g,) = run(p)["gaps"]
    # gap [102,300): the call returns at 104, 2 of 198 µs: the time after it is the cause (issue 24 item 7)
    assert (g["duration_ns"], g["cause"]) == (198 * US, "launch_latency")
    assert g["evidence"].startswith("cudaMemcpyAsync") and "returned at 2.0 µs into the gap, covering 1% of" in g["evidence"]


def test_launch_latency_between_calls_same_in_both_formats(run):
    """Nothing recorded between the launching thread's calls: busy on the host (launch_latency), not
    no_work, in both formats; the evidence names the host data the trace had."""
    p = ab()
    doc = run(p)
    g = only_gap(doc)
    assert g["cause"] == "launch_latency"
    assert g["host_data"] == "cuda_api"  # no CPU ops in either file
    # [100,290) up to the launch: no recorded call of thread 1 in it -> 0%
    assert "host busy 0% of the time up to the next launch" in g["evidence"]
    assert g["details"]["launch_start_ns"] - g["start_ns"] == 190 * US  # launch at 290, gap from 100


def test_launch_latency_with_cpu_ops_kineto(tmp_path, monkeypatch):
    from conftest import analyze_cli

    p = ab()
    p.cpu_op("aten::slow_python_op", 150, 45)  # covers [150,195) of [100,290): 45/190 = 23.7% -> 24%
    doc = analyze_cli(p.kineto(tmp_path / "t.json"))
    (g,) = doc["gaps"]
    assert g["cause"] == "launch_latency" and g["host_data"] == "cpu_ops"
    assert "host busy 24% of the time up to the next launch" in g["evidence"]
    assert round(g["details"]["host_active_fraction"], 3) == round(45 / 190, 3)


def test_no_work_when_the_launching_thread_was_absent(run):
    p = ab(launch_b=(292, 4), tid_b=3)  # thread 3 records nothing before this launch
    g = only_gap(run(p))
    assert g["cause"] == "no_work" and "has no recorded activity before its launch" in g["evidence"]


def test_unknown_when_next_op_has_no_launch(run):
    p = ab(launch_b=None)
    g = only_gap(run(p))
    assert g["cause"] == "unknown" and "its launch is not in the trace" in g["evidence"]


def test_dependency_wait_needs_a_stream_wait_record(run):
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.api("cudaStreamWaitEvent", 40, 3)
    p.kernel(300, 100, launch=(45, 4), stream=8)  # queued at 49, before the gap
    g = only_gap(run(p))
    assert g["cause"] == "dependency_wait" and "cudaStreamWaitEvent" in g["evidence"]


def test_queued_without_evidence_is_unknown(run):
    p = Program()
    p.kernel(0, 100, launch=(-20, 4))
    p.kernel(300, 100, launch=(45, 4), stream=8)  # queued, but nothing shows what it waited for
    g = only_gap(run(p))
    assert g["cause"] == "unknown" and "no stream-wait or event record" in g["evidence"]


def test_wait_on_another_thread_for_another_gpu_does_not_explain_the_gap(run):
    p = ab()
    # thread 2 waits for device 1 (a copy it launched there) over the whole gap; thread 1 launches B late
    p.memcpy(95, 200, "DtoH", "Device", "Pinned", 1 << 20, launch=(90, 210, "cudaMemcpy", 2), device=1, stream=9)
    doc = run(p)
    (g,) = [g for g in doc["gaps"] if g["device"] == 0]
    assert g["cause"] == "launch_latency", g["evidence"]


def test_wait_by_the_launching_thread_explains_the_gap(run):
    p = ab()
    p.memcpy(95, 200, "DtoH", "Device", "Pinned", 1 << 20, launch=(90, 199, "cudaMemcpy", 1), device=1, stream=9)
    doc = run(p)
    (g,) = [g for g in doc["gaps"] if g["device"] == 0]
    assert g["cause"] == "host_sync", g["evidence"]  # [100,289) of the gap covered by thread 1's wait


def test_synchronous_memset_to_device_memory_does_not_block(run):
    """CUDA runtime docs, "API synchronization behavior": cudaMemset to device memory is asynchronous
    with respect to the host. Its long call does not make the gap host_sync, nor fire sync_memcpy."""
    p = Program()
    p.kernel(0, 95, launch=(-20, 4))
    p.memset(95, 5, "Device", 512, launch=(90, 195, "cudaMemset"))  # call [90,285)
    p.kernel(300, 100, launch=(290, 4))
    doc = run(p)
    (g,) = doc["gaps"]
    assert g["cause"] == "launch_latency", g["evidence"]
    assert "sync_memcpy" not in {f["rule"] for f in doc["findings"]}


def test_device_to_device_cudamemcpy_does_not_block(run):
    p = Program()
    p.kernel(0, 95, launch=(-20, 4))
    p.memcpy(95, 5, "DtoD", "Device", "Device", 1 << 20, launch=(90, 195, "cudaMemcpy"))
    p.kernel(300, 100, launch=(290, 4))
    doc = run(p)
    (g,) = doc["gaps"]
    assert g["cause"] == "launch_latency", g["evidence"]
    assert "sync_memcpy" not in {f["rule"] for f in doc["findings"]}


def test_pinned_htod_cudamemcpy_blocks(run):
    p = Program()
    p.kernel(0, 95, launch=(-20, 4))
    p.memcpy(95, 5, "HtoD", "Pinned", "Device", 1 << 20, launch=(90, 195, "cudaMemcpy"))  # call [90,285)
    p.kernel(300, 100, launch=(290, 4))
    doc = run(p)
    (g,) = doc["gaps"]
    assert g["cause"] == "host_sync"  # the call covers [100,285) = 92.5% of the gap
    (f,) = [f for f in doc["findings"] if f["rule"] == "sync_memcpy"]
    # one call of 195 µs; GPU idle during it: [100,285) = 185 µs
    assert (f["count"], f["data"]["host_blocked_ns"], f["wasted_ns"]) == (1, 195 * US, 185 * US)
