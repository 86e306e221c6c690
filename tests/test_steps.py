"""Steps: marked ones from markers, inferred ones from the period of the launch sequence.

Every trace here is built by hand (tests/test_analyses_builder.TB) with the step boundaries known
by construction; the expected boundaries are computed in the test from the same loop that builds
the trace, never taken from the code under test."""

from __future__ import annotations

import numpy as np
import pytest
from test_analyses_builder import TB, us

from tracelab.analyses.steps.infer import Steps, find_period, find_steps
from tracelab.model import EventKind

BODY = [f"k{j}" for j in range(12)]  # the kernels of one training step


def training_loop(
    steps: int = 10,
    warmup_extra: int = 4,
    setup: int = 6,
    setup_syncs: int = 3,
    sync: bool = True,
    pause_us: float = 80.0,
    jitter: np.random.Generator | None = None,
    extra_kernel_at: tuple[int, ...] = (),
    backward_tid: int | None = None,
    tb: TB | None = None,
) -> tuple[TB, list[tuple[int, int]]]:
    """A host thread launching BODY every step, then (sync) `.item()`'s cudaStreamSynchronize.
    Step 0 launches `warmup_extra` more kernels (optimizer state init); `setup` kernels and
    `setup_syncs` syncs come before the loop (model set-up). `backward_tid`: the second half of
    BODY is launched from another thread (PyTorch's autograd thread). `extra_kernel_at`: steps
    that launch one extra kernel (jitter in the sequence). Returns the builder and the true
    (start, end) ns of each step: from the first launch of the step to the end of its sync."""
    tb = tb or TB()
    h = 0.0
    last_end = 0.0

    def launch(name: str, tid: int | None = None) -> None:
        nonlocal h, last_end
        dur = 3.0 + (jitter.uniform(0, 4) if jitter is not None else 0.0)
        tb.kernel(h + 5, 2.0, name=name, launch_at=h, launch_dur=dur, tid=tid)
        last_end = h + dur
        h += dur + 2.0 + (jitter.uniform(0, 6) if jitter is not None else 0.0)

    for j in range(setup):
        launch(f"init{j % 2}")
    for _ in range(setup_syncs):
        tb.api("cudaStreamSynchronize", h, 4.0)
        h += 6.0
        launch("init_copy")
    h += 500.0
    truth = []
    for i in range(steps):
        first = h
        for j, name in enumerate(BODY):
            tid = backward_tid if (backward_tid is not None and j >= len(BODY) // 2) else None
            launch(name, tid)
            if i == 0 and j == 5:
                for _ in range(warmup_extra):
                    launch("zeros_like")
            if i in extra_kernel_at and j == 8:
                launch("allocator_fill")
        if sync:
            tb.api("cudaStreamSynchronize", h, 30.0)
            h += 30.0
            end = h
        else:
            end = last_end
        truth.append((us(first), us(end)))
        h += pause_us + (jitter.uniform(0, 40) if jitter is not None else 0.0)
    return tb, truth


def bounds(steps: Steps, rank: int = 0) -> list[tuple[int, int]]:
    s, e = steps.of_rank(rank)
    return list(zip(s.tolist(), e.tolist(), strict=True))


def test_periodic_loop_with_a_different_warmup_step_and_setup() -> None:
    tb, truth = training_loop()
    st = find_steps(tb.build())
    assert len(st) == 10 and {s.source for s in st.steps} == {"inferred"}
    got = bounds(st)
    # every step ends when its sync returns; later steps start where the previous one ended
    assert [e for _, e in got] == [e for _, e in truth]
    assert got[0][0] == truth[0][0]  # the warm-up step starts at its first launch (set-up left out)
    assert [s for s, _ in got[1:]] == [e for _, e in truth[:-1]]
    assert [s.index for s in st.steps] == list(range(10))
    assert "10 steps inferred" in st.notes[0] and "cudaStreamSynchronize" in st.notes[0]
    assert "period 13 launches" in st.notes[0]  # 12 kernels + the sync


def test_jitter_in_time_and_an_occasional_extra_kernel() -> None:
    rng = np.random.default_rng(7)
    tb, truth = training_loop(steps=14, jitter=rng, extra_kernel_at=(4, 9))
    st = find_steps(tb.build())
    assert len(st) == 14
    assert [e for _, e in bounds(st)] == [e for _, e in truth]
    assert bounds(st)[0][0] == truth[0][0]


def test_two_threads_forward_and_backward() -> None:
    tb, truth = training_loop(backward_tid=2)
    st = find_steps(tb.build())
    assert len(st) == 10
    assert [e for _, e in bounds(st)] == [e for _, e in truth]
    assert "threads 1, 2" in st.notes[0] or "threads 2, 1" in st.notes[0]


def test_a_noisy_second_thread_falls_back_to_the_training_thread() -> None:
    tb, truth = training_loop(steps=8)
    rng = np.random.default_rng(3)
    span = truth[-1][1] / 1000
    # a "data loader" thread launching 400 copies of random names at random times
    for t in np.sort(rng.uniform(0, span, 400)).tolist():
        tb.kernel(
            t + 1, 0.5, stream=9, name=f"loader{rng.integers(0, 40)}", launch_at=t, launch_dur=0.5, tid=5
        )
    st = find_steps(tb.build())
    assert len(st) == 8
    assert [e for _, e in bounds(st)] == [e for _, e in truth]
    assert "thread 1 " in st.notes[0] + " "


def test_without_syncs_steps_start_after_the_recurring_host_pause() -> None:
    tb, truth = training_loop(sync=False, pause_us=400.0, setup_syncs=0)
    st = find_steps(tb.build())
    assert len(st) == 10
    got = bounds(st)
    # each step starts at the launch of its first kernel (k0 follows the 400 µs pause)
    assert [s for s, _ in got] == [s for s, _ in truth]
    # ... and runs to the next step's start; the last one to the end of its last launch
    assert [e for _, e in got[:-1]] == [s for s, _ in truth[1:]]
    assert got[-1][1] == truth[-1][1]
    assert "starts at its launch: k0" in st.notes[0]


def test_no_period_gives_no_steps_and_a_note() -> None:
    tb = TB()
    rng = np.random.default_rng(1)
    h = 0.0
    for _ in range(600):
        tb.kernel(h + 5, 2.0, name=f"op{rng.integers(0, 30)}", launch_at=h, launch_dur=3.0)
        h += 6.0
    st = find_steps(tb.build())
    assert len(st) == 0
    assert st.notes[0].startswith("rank 0: no training steps found: no step markers, and none inferred")
    assert "no repeating launch sequence" in st.notes[0]


def test_one_operation_repeated_is_not_a_step_structure() -> None:
    tb = TB()
    for i in range(200):
        tb.kernel(i * 10.0 + 5, 2.0, name="same", launch_at=i * 10.0, launch_dur=3.0)
    st = find_steps(tb.build())
    assert len(st) == 0 and "one operation repeated" in st.notes[0]


def test_too_few_launches() -> None:
    tb = TB()
    tb.kernel(5, 2, launch_at=0)
    st = find_steps(tb.build())
    assert len(st) == 0 and "too few" in st.notes[0]


def test_markers_win_over_inference() -> None:
    tb, truth = training_loop(steps=5)
    for i, (s, e) in enumerate(truth):
        tb.range(f"ProfilerStep#{i}", s / 1000, e / 1000)
    st = find_steps(tb.build())
    assert bounds(st) == truth and {s.source for s in st.steps} == {"marked"} and st.notes == ()


def test_nested_step_ranges_count_once() -> None:
    tb = TB()
    tb.range("train_step", 0, 100)
    tb.range("step 1", 10, 20)  # inside the first: not a step of its own
    tb.range("train_step", 100, 200)
    tb.kernel(5, 2, launch_at=0)
    st = find_steps(tb.build())
    assert bounds(st) == [(0, us(100)), (us(100), us(200))]


def test_each_rank_gets_its_own_steps() -> None:
    tb, truth0 = training_loop(steps=6)
    n0 = len(tb.rows)
    tb1, truth1 = training_loop(steps=9, warmup_extra=0)
    for row in tb1.rows:  # same shape on rank 1, 9 steps
        row = dict(row)
        row["rank"] = 1
        row["name"] = tb.s.intern(tb1.s.strings[row["name"]])
        tb.rows.append(row)
    assert len(tb.rows) > n0
    st = find_steps(tb.build())
    assert bounds(st, 0)[-1][1] == truth0[-1][1] and len(st.of_rank(0)[0]) == 6
    assert [e for _, e in bounds(st, 1)] == [e for _, e in truth1]
    assert st.ranks() == (0, 1)


def test_find_period_on_token_arrays() -> None:
    rng = np.random.default_rng(0)
    body = rng.integers(0, 50, 37)
    seq = np.concatenate([rng.integers(100, 120, 60), *[body] * 20])  # set-up, then period 37
    assert find_period(seq).lag == 37
    # a divisor-like inner repetition (two identical halves with a different tail) is not the period
    half = rng.integers(0, 50, 20)
    step = np.concatenate([half, half, [999]])
    assert find_period(np.tile(step, 10)).lag == 41
    # large: 200 000 tokens, period 150, found vectorized
    big = np.tile(rng.integers(0, 300, 150), 1400)[:200_000]
    assert find_period(big).lag == 150


def test_of_rank_is_sorted_int64() -> None:
    tb, _ = training_loop(steps=4)
    s, e = find_steps(tb.build()).of_rank(0)
    assert s.dtype == np.int64 and e.dtype == np.int64 and np.all(np.diff(s) > 0) and np.all(e > s)
    empty = find_steps(tb.build()).of_rank(7)
    assert empty[0].size == 0 and empty[0].dtype == np.int64


@pytest.mark.parametrize("kind", [EventKind.NVTX_RANGE, EventKind.CPU_OP])
def test_marked_steps_from_both_range_kinds(kind: EventKind) -> None:
    tb = TB()
    for i in range(3):
        tb.range(f"ProfilerStep#{i}", i * 100, i * 100 + 90, kind=kind)
    tb.kernel(5, 2, launch_at=0)
    st = find_steps(tb.build())
    assert bounds(st) == [(us(i * 100), us(i * 100 + 90)) for i in range(3)]


def test_graph_replay_and_sync_per_step() -> None:
    """A CUDA graph replays the whole step with one launch: the sequence is (graph, sync) repeated."""
    tb = TB()
    truth = []
    for i in range(8):
        t = i * 1000.0
        tb.kernel(t + 10, 300, name="graph_kernel", launch_at=t, launch_name="cudaGraphLaunch")
        tb.api("cudaStreamSynchronize", t + 20, 300)
        truth.append(us(t + 320))
    st = find_steps(tb.build())
    assert [e for _, e in bounds(st)] == truth
    assert "period 2 launches" in st.notes[0]


def test_gpu_ops_alone_when_the_trace_has_no_host_calls() -> None:
    tb = TB()
    truth = []
    for i in range(6):
        t = i * 1000.0
        for j, name in enumerate(BODY):
            tb.kernel(t + j * 20, 10, name=name)  # no launch calls in the trace
        truth.append(us(t))
    st = find_steps(tb.build())
    assert [s for s, _ in bounds(st)] == truth
    assert "GPU ops" in st.notes[0]


def test_a_step_that_repeats_one_block_is_cut_at_the_recurring_host_pause() -> None:
    """Each step runs the same 4-kernel block 5 times (a loop inside the step); the tokens repeat
    every 4 launches, the host pauses 300 µs (data loading) only before each step."""
    tb = TB()
    rng = np.random.default_rng(5)
    h = 0.0
    truth = []
    for _ in range(9):
        h += 300.0
        first = h
        for _ in range(5):
            for name in ("a", "b", "c", "d"):
                tb.kernel(h + 5, 2.0, name=name, launch_at=h, launch_dur=3.0)
                h += 3.0 + rng.uniform(1, 8)
        truth.append(us(first))
    st = find_steps(tb.build())
    assert [s for s, _ in bounds(st)] == truth
    assert "a block of 4 launches repeats, and every 20 launches the host pauses" in st.notes[0]
