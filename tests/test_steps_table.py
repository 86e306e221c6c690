"""The per-step table against hand computations."""

from __future__ import annotations

from test_analyses_builder import TB, us
from test_steps import training_loop

from tracelab.analyses.gaps.idle import Classification
from tracelab.analyses.results import Gap
from tracelab.analyses.steps.infer import find_steps
from tracelab.analyses.steps.table import step_rows
from tracelab.model import CopyKind


def gap(start: float, end: float, cause: str, device: int = 0, rank: int = 0) -> Gap:
    return Gap(rank, device, us(start), us(end), us(end - start), cause, "")  # type: ignore[arg-type]


def hand_trace():
    """Four marked steps (µs): [0,2000) [2000,2500) [2500,3000) [3000,3500)."""
    tb = TB()
    for i, (s, e) in enumerate(((0, 2000), (2000, 2500), (2500, 3000), (3000, 3500))):
        tb.range(f"step {i}", s, e)
    tb.kernel(100, 300)  # step 0
    tb.kernel(1900, 200)  # straddles steps 0 and 1: starts in 0
    tb.kernel(2200, 100)  # step 1
    tb.memcpy(2250, 100, CopyKind.HTOD, 1 << 20, stream=8)  # step 1, overlaps the kernel
    tb.kernel(2600, 100)  # step 2
    tb.kernel(2650, 150, device=1)  # step 2, another device of the rank
    tb.api("cudaStreamSynchronize", 1950, 10)  # step 0
    tb.api("cudaStreamSynchronize", 2400, 10)  # step 1
    tb.api("cudaEventSynchronize", 2450, 10)  # step 1
    tb.api("cudaLaunchKernel", 2900, 5)  # not blocking
    tb.api("cudaDeviceSynchronize", 3100, 10)  # step 3
    gaps = (
        gap(400, 1900, "host_sync"),
        gap(2350, 2600, "launch_latency"),
        gap(2700, 3200, "no_work"),
        gap(2800, 3400, "no_work", device=1),
        gap(0, 5000, "no_work", rank=1),  # another rank: not counted
    )
    return tb.build(), gaps


def test_rows_match_hand_sums() -> None:
    tl, gaps = hand_trace()
    rows = step_rows(tl, find_steps(tl), gaps)
    assert [r.index for r in rows] == [0, 1, 2, 3] and {r.source for r in rows} == {"marked"}
    assert [r.duration_ns for r in rows] == [us(2000), us(500), us(500), us(500)]
    # busy: [100,400)+[1900,2000) | [2000,2100)+[2200,2350) | [2600,2800) (two devices) | nothing
    assert [r.gpu_busy_ns for r in rows] == [us(400), us(250), us(200), 0]
    assert [r.gpu_idle_ns for r in rows] == [us(1600), us(250), us(300), us(500)]
    assert [r.kernels for r in rows] == [2, 1, 2, 0]
    assert [r.blocking_syncs for r in rows] == [1, 2, 0, 1]
    assert [r.idle_of("host_sync") for r in rows] == [us(1500), 0, 0, 0]
    assert [r.idle_of("launch_latency") for r in rows] == [0, us(150), us(100), 0]
    # no_work: device 0 [2700,3200) and device 1 [2800,3400), summed over devices
    assert [r.idle_of("no_work") for r in rows] == [0, 0, us(300 + 200), us(200 + 400)]
    assert rows[1].idle_by_cause == (("launch_latency", us(150)),)
    # warm-up: the first step; outlier: longer than 3 × the median (500 µs)
    assert [r.warmup for r in rows] == [True, False, False, False]
    assert [r.outlier for r in rows] == [True, False, False, False]


def test_rows_of_inferred_steps() -> None:
    tb, truth = training_loop(steps=6, warmup_extra=4)
    tl = tb.build()
    rows = step_rows(tl, find_steps(tl), Classification(tl).gaps()[0])
    assert len(rows) == 6 and {r.source for r in rows} == {"inferred"}
    # 12 kernels a step, 4 more in the warm-up step; one blocking sync each
    assert [r.kernels for r in rows] == [16, 12, 12, 12, 12, 12]
    assert [r.blocking_syncs for r in rows] == [1] * 6
    assert [r.duration_ns for r in rows[1:]] == [truth[i][1] - truth[i - 1][1] for i in range(1, 6)]


def test_no_steps_no_rows() -> None:
    tb = TB()
    tb.kernel(0, 10)
    tl = tb.build()
    assert step_rows(tl, find_steps(tl), ()) == ()
