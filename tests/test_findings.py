"""Each finding fires with the right count on a positive case and stays silent on its clean twin."""

import pytest
from test_analyses_builder import TB, Sim, us

from tracelab.analyses.steps.infer import marked_steps
from tracelab.api import analyze
from tracelab.model import CopyKind, DeviceInfo, EventKind, Flag, MemKind

STEPS = 20
BATCH = 4 << 20  # 4 MiB input batch per step


def training(
    item_every: int | None = 1,
    pageable: bool = True,
    side_stream: bool = False,
    step_kind: EventKind = EventKind.NVTX_RANGE,
    step_name: str = "ProfilerStep#{i}",
):
    """A training loop: per step copy a batch in, run 4 kernels of 200 µs, maybe `.item()` the loss.
    side_stream: the batch for step i+1 is prefetched on stream 8 (pinned) while step i computes."""
    sim = Sim()
    ready = {}
    if side_stream:
        ready[0] = sim.copy(400, CopyKind.HTOD, BATCH, stream=8, pageable=pageable)
    for i in range(STEPS):
        s0 = sim.h
        if side_stream:
            if i + 1 < STEPS:
                ready[i + 1] = sim.copy(400, CopyKind.HTOD, BATCH, stream=8, pageable=pageable)
            after = ready[i]
        else:
            after = sim.copy(800, CopyKind.HTOD, BATCH, stream=7, pageable=pageable)
        for _ in range(4):
            sim.kernel(200, after=after)
        if item_every and i % item_every == 0:
            sim.item()
        sim.tb.range(step_name.format(i=i), s0, sim.h + 1, kind=step_kind)
        sim.h += 2
    return sim.build(devices=[DeviceInfo(rank=0, device=0, name="NVIDIA H100", sm_count=132, cc_major=9)])


def by_rule(analysis):
    return {f.rule: f for f in analysis.findings}


def began_in_wait(tl, gaps) -> list:
    """The gaps that began while a blocking host call (read from the raw API events: a synchronize, or
    the .item() copy's cudaMemcpyAsync from its copy's start to its return) was in progress (issue 24
    item 7: such a gap is host_sync only when the wait covers most of it; the idle still follows the sync)."""
    ev = tl.events
    api = ev[ev["kind"] == int(EventKind.RUNTIME)]
    names = [tl.strings[i] for i in api["name"].tolist()]
    waits = [(int(s), int(e)) for n, s, e in zip(names, api["start"].tolist(), api["end"].tolist())
             if "Synchronize" in n or n == "cudaMemcpyAsync" and e - s > us(5)]
    return [g for g in gaps if any(s <= g.start_ns <= e + 2_000 for s, e in waits)]


def test_print_loss_every_step_fires_sync_pageable_serialized():
    tl = training()
    a = analyze(tl)
    f = by_rule(a)
    assert set(f) == {"sync_per_iteration", "pageable_memcpy", "serialized_copy_compute"}
    sync = f["sync_per_iteration"]
    assert sync.count == STEPS
    assert sync.data["steps"] == STEPS
    host_sync_idle = sum(g.duration_ns for g in began_in_wait(tl, a.gaps))
    assert host_sync_idle > 0 and sync.wasted_ns == host_sync_idle
    assert "20 of 20 steps" in sync.message and "cudaMemcpyAsync" in sync.message
    assert "step 0 … step 19" in sync.where
    pg = f["pageable_memcpy"]
    assert pg.count == STEPS  # the 4-byte .item() copies are below the 64 KiB floor
    assert pg.wasted_ns == STEPS * us(800)
    assert pg.data["by_kind"] == {"HTOD": STEPS}
    ser = f["serialized_copy_compute"]
    assert ser.count == STEPS and ser.wasted_ns == STEPS * us(800)
    assert "stream 7" in ser.where


def test_clean_twin_fires_nothing():
    tl = training(item_every=10, pageable=False, side_stream=True)
    a = analyze(tl)
    assert a.findings == ()
    # it still syncs twice (steps 0 and 10): those gaps begin in the wait, but no rule fires
    assert len(began_in_wait(tl, a.gaps)) == 2
    (d,) = a.devices
    assert d.overlap.compute_copy_ns > 0


def test_sync_every_step_without_pageable_copies():
    a = analyze(training(pageable=False, side_stream=True))
    f = by_rule(a)
    assert set(f) == {"sync_per_iteration"}
    assert f["sync_per_iteration"].count == STEPS


@pytest.mark.parametrize(
    "kind,name",
    [
        (EventKind.CPU_OP, "ProfilerStep#{i}"),
        (EventKind.NVTX_RANGE, "train_step {i}"),
        (EventKind.NVTX_RANGE, "iteration_{i}"),
    ],
)
def test_step_markers(kind, name):
    tl = training(step_kind=kind, step_name=name)
    s, e = marked_steps(tl, 0)
    assert s.size == STEPS and (e > s).all()
    assert by_rule(analyze(tl))["sync_per_iteration"].count == STEPS


def test_nested_step_like_ranges_count_once_and_optimizer_step_is_not_a_step():
    tb = TB()
    for i in range(5):
        tb.range(f"step {i}", i * 100, i * 100 + 90)
        tb.range("step", i * 100 + 10, i * 100 + 20)  # nested: dropped
        tb.range("Optimizer.step#SGD.step", i * 100 + 30, i * 100 + 40)
    tb.kernel(0, 10, launch_at=-5)
    s, _ = marked_steps(tb.build(), 0)
    assert s.tolist() == [us(i * 100) for i in range(5)]


def test_sync_in_most_but_not_enough_steps():
    # 15 of 20 steps sync (75% < 80%): no finding
    sim = Sim()
    for i in range(STEPS):
        s0 = sim.h
        sim.kernel(200)
        if i % 4 != 0:
            sim.item()
        sim.tb.range(f"ProfilerStep#{i}", s0, sim.h + 1)
        sim.h += 2
    assert "sync_per_iteration" not in by_rule(analyze(sim.build()))


def test_blocking_dtoh_via_cudamemcpy_and_pinned_then_sync():
    tb = TB()
    for i in range(4):
        t = i * 1000
        tb.range(f"ProfilerStep#{i}", t, t + 900)
        tb.kernel(t + 10, 300, launch_at=t)
        if i % 2:
            tb.memcpy(
                t + 310,
                2,
                CopyKind.DTOH,
                4,
                dst=MemKind.PINNED,
                launch_at=t + 20,
                launch_name="cudaMemcpy",
                launch_dur=295,
            )
        else:
            tb.memcpy(t + 310, 2, CopyKind.DTOH, 4, dst=MemKind.PINNED, launch_at=t + 20, launch_dur=3)
            tb.api("cudaStreamSynchronize", t + 30, 285)
    f = by_rule(analyze(tb.build()))
    assert f["sync_per_iteration"].count == 4
    assert f["sync_memcpy"].count == 2


def test_sync_memcpy_counts_calls():
    tb = TB()
    for i in range(3):
        tb.memcpy(
            i * 100 + 5,
            40,
            CopyKind.HTOD,
            1 << 20,
            src=MemKind.PINNED,
            launch_at=i * 100,
            launch_name="cudaMemcpy",
            launch_dur=50,
        )
        tb.kernel(i * 100 + 50, 40, launch_at=i * 100 + 51)
    f = by_rule(analyze(tb.build()))
    assert f["sync_memcpy"].count == 3
    assert f["sync_memcpy"].data["host_blocked_ns"] == 3 * us(50)
    # GPU idle while the host sat in a call, every idle interval whatever the display threshold: device busy
    # [5,45) [50,90) [105,145) [150,190) [205,245) [250,290); calls [0,50) [100,150) [200,250); idle inside the
    # calls: [45,50) [100,105) [145,150) [200,205) [245,250) = 5 x 5 µs
    assert f["sync_memcpy"].wasted_ns == 5 * us(5)
    assert "3× cudaMemcpy" in f["sync_memcpy"].message
    clean = TB()
    for i in range(3):
        clean.memcpy(i * 100 + 5, 40, CopyKind.HTOD, 1 << 20, src=MemKind.PINNED, launch_at=i * 100)
        clean.kernel(i * 100 + 50, 40, launch_at=i * 100 + 5)
    assert "sync_memcpy" not in by_rule(analyze(clean.build()))


def test_launch_bound_tiny_kernels_and_graph_twin():
    sim = Sim(launch_cost=12.0, latency=5.0)
    for _ in range(200):
        sim.kernel(3.0, name="tiny_elementwise")
    sim.kernel(2000)  # a big kernel after: not part of the stretch
    a = analyze(sim.build())
    f = by_rule(a)
    assert set(f) == {"launch_bound"}
    lb = f["launch_bound"]
    assert lb.data["n_stretches"] == 1
    st = lb.data["stretches"][0]
    assert lb.count == st["kernels"] == 200  # every tiny kernel waited for its launch
    assert lb.wasted_ns == st["idle_ns"] > 0
    assert st["idle_ns"] >= (st["end_ns"] - st["start_ns"]) // 2

    # the same kernels launched as one CUDA graph: not a launch-bound candidate
    tb = TB()
    tb.api("cudaGraphLaunch", 0, 10, corr=1)
    t = 5.0
    for _ in range(200):
        tb.kernel(t, 3.0, name="tiny_elementwise")
        tb.rows[-1]["correlation"] = 1
        t += 12.0
    assert "launch_bound" not in by_rule(analyze(tb.build()))

    # big kernels at the same launch rate: GPU-bound, no finding
    sim = Sim(launch_cost=12.0)
    for _ in range(200):
        sim.kernel(30.0)
    assert analyze(sim.build()).findings == ()


def _pdl_trace(cc_major=9, flagged=False, overlap=1.0):
    tb = TB()
    for i in range(10):
        tb.kernel(
            i * 10.0,
            10.0 + overlap,
            name="dependent_gemm",
            launch_at=i * 10.0 - 8,
            flags=Flag.PDL if flagged else 0,
        )
    return tb.build(devices=[DeviceInfo(rank=0, device=0, cc_major=cc_major)])


def test_pdl_overlap_measured():
    f = by_rule(analyze(_pdl_trace()))
    p = f["pdl"]
    assert p.count == 9 and p.severity == "info" and p.wasted_ns == 0
    assert p.data["overlap_ns"] == 9 * us(1) and p.data["overlapping_pairs"] == 9
    assert p.data["mean_overlap_ns"] == us(1)
    flagged = by_rule(analyze(_pdl_trace(flagged=True)))["pdl"]
    assert flagged.count == 10 and flagged.data["flagged"] == 10
    assert "pdl" not in by_rule(analyze(_pdl_trace(cc_major=7)))  # Volta cannot: clock artefact
    assert analyze(_pdl_trace(overlap=0.0)).findings == ()


def test_findings_sorted_by_severity_then_waste():
    a = analyze(training())
    order = {"critical": 0, "warning": 1, "info": 2}
    keys = [(order[f.severity], -f.wasted_ns) for f in a.findings]
    assert keys == sorted(keys)


def test_pageable_cost_uses_measured_pinned_bandwidth():
    tb = TB()
    # 4 pageable HtoD copies of 8 MiB at 800 µs each, 4 pinned ones of 8 MiB at 400 µs each
    for i in range(4):
        tb.memcpy(i * 2000, 800, CopyKind.HTOD, 8 << 20, src=MemKind.PAGEABLE, launch_at=i * 2000 - 10)
        tb.memcpy(
            i * 2000 + 1000,
            400,
            CopyKind.HTOD,
            8 << 20,
            src=MemKind.PINNED,
            stream=8,
            launch_at=i * 2000 + 990,
        )
    pg = by_rule(analyze(tb.build()))["pageable_memcpy"]
    assert pg.count == 4
    assert pg.data["copy_ns"] == 4 * us(800)
    assert pg.wasted_ns == 4 * us(400)


def test_synchronize_every_step_counts_as_sync_per_iteration():
    # torch.cuda.synchronize() each step: no copy, same stall
    sim = Sim()
    for i in range(STEPS):
        s0 = sim.h
        for _ in range(3):
            sim.kernel(200)
        end = max(sim.ready.values())
        sim.tb.api("cudaDeviceSynchronize", sim.h, end - sim.h + 2)
        sim.h = end + 2
        sim.host_work(100)
        sim.tb.range(f"step {i}", s0, sim.h + 1)
        sim.h += 2
    tl = sim.build()
    a = analyze(tl)
    f = by_rule(a)["sync_per_iteration"]
    assert f.count == STEPS
    assert (
        f.data["ranks"][0]["steps_with_sync_call"] == STEPS
        and f.data["ranks"][0]["steps_with_dtoh_copy"] == 0
    )
    assert "cudaDeviceSynchronize on thread 1 in step 0" in f.message
    assert f.wasted_ns == sum(g.duration_ns for g in a.gaps) > 0
    # each wait returned 2 µs into its gap, then the host worked 100 µs: the time after the wait is the
    # gap's cause (issue 24 item 7), and the rule still counts the idle the sync left
    assert len(began_in_wait(tl, a.gaps)) == len(a.gaps)
    assert {g.cause for g in a.gaps} == {"launch_latency"}


def test_note_when_syncs_but_no_steps():
    # no markers, and no repeating launch sequence to infer steps from (a periodic loop would get
    # inferred steps: tests/test_steps*.py)
    sim = Sim()
    for i in range(5):
        for j in range(i + 1):
            sim.kernel(200, name=f"k{i}_{j}")
        sim.item()
    a = analyze(sim.build())
    assert "sync_per_iteration" not in by_rule(a)
    assert any(
        n.startswith("sync_per_iteration not evaluated: rank 0: 5 blocking host syncs but no training steps") for n in a.notes
    )
    assert not any("no training steps" in n for n in analyze(training()).notes)


def test_sync_per_iteration_is_judged_per_rank():
    tb = TB()
    for rank in (0, 1):
        for i in range(5):
            t = i * 1000.0
            tb.range(f"ProfilerStep#{i}", t, t + 900, rank=rank)
            tb.kernel(t + 10, 300, launch_at=t, rank=rank, device=rank)
            if rank == 0:  # only rank 0 reads the loss back every step
                tb.memcpy(
                    t + 310,
                    2,
                    CopyKind.DTOH,
                    4,
                    dst=MemKind.PAGEABLE,
                    launch_at=t + 20,
                    launch_dur=295,
                    rank=0,
                )
    f = by_rule(analyze(tb.build()))["sync_per_iteration"]
    assert f.count == 5 and f.data["steps"] == 5
    assert [r["rank"] for r in f.data["ranks"]] == [0]
    assert f.where.startswith("rank 0: 5 of 5 steps")


def test_every_finding_points_at_a_window():
    """data carries start_ns/end_ns of the first or worst occurrence (the dashboard link opens it)."""
    tl = training()
    f = by_rule(analyze(tl))
    ev = tl.events
    step0 = ev[ev["name"] == tl.strings.index("ProfilerStep#0")].iloc[0]
    assert (f["sync_per_iteration"].data["start_ns"], f["sync_per_iteration"].data["end_ns"]) == (
        int(step0["start"]),
        int(step0["end"]),
    )
    first_copy = ev[(ev["kind"] == int(EventKind.MEMCPY)) & (ev["bytes"] == BATCH)].iloc[0]
    for rule in ("pageable_memcpy", "serialized_copy_compute"):  # all copies alike: the first one
        assert (f[rule].data["start_ns"], f[rule].data["end_ns"]) == (int(first_copy["start"]), int(first_copy["end"]))

    tb = TB()
    for i, dur in enumerate((50, 70, 50)):
        tb.memcpy(i * 100 + 5, 40, CopyKind.HTOD, 1 << 20, src=MemKind.PINNED, launch_at=i * 100,
                  launch_name="cudaMemcpy", launch_dur=dur)
        tb.kernel(i * 100 + 50, 40, launch_at=i * 100 + 81)
    sm = by_rule(analyze(tb.build()))["sync_memcpy"]
    assert (sm.data["start_ns"], sm.data["end_ns"]) == (us(100), us(170))  # the longest call

    sim = Sim(launch_cost=12.0, latency=5.0)
    for _ in range(200):
        sim.kernel(3.0, name="tiny_elementwise")
    lb = by_rule(analyze(sim.build()))["launch_bound"]
    worst = lb.data["stretches"][0]
    assert (lb.data["start_ns"], lb.data["end_ns"]) == (worst["start_ns"], worst["end_ns"])

    p = by_rule(analyze(_pdl_trace()))["pdl"]  # the first overlapping pair: kernels 0 and 1
    assert (p.data["start_ns"], p.data["end_ns"]) == (0, us(21))
