"""Step inference on hand-made traces for what the bundled demo runs showed (tests/test_steps_demo.py):
a step made of a repeated block whose end only non-launch calls show, one CUDA graph replay per step,
one host-paced kernel per step, polling calls, a blocking call in the middle of the step, and host
ranges before a step's first call. Each trace is built by a loop that also writes down where every
step starts and ends; the expected values come from that loop, never from the code under test."""

from __future__ import annotations

import numpy as np
from test_analyses_builder import TB, us

from tracelab.analyses.steps.infer import find_steps
from tracelab.model import Flag


def starts_ends(tb: TB) -> tuple[list[int], list[int], str]:
    st = find_steps(tb.build())
    s, e = st.of_rank(0)
    return s.tolist(), e.tolist(), st.notes[0]


def test_chunked_step_whose_end_only_stream_waits_show() -> None:
    """overlap-like: 4 chunks of (wait, copy in, record, kernel, record, copy out, record) per step,
    then 4 stream waits; the pause between steps is only 1.5x the usual one. The launches alone
    repeat every chunk; the calls around them repeat every step."""
    tb = TB()
    h = 0.0
    truth_s, truth_e = [], []
    for _step in range(6):
        truth_s.append(us(h))
        for _chunk in range(4):
            for name in ("wait", "in", "rec", "kern", "rec", "out", "rec"):
                if name == "wait":
                    tb.api("cudaStreamWaitEvent", h, 1.0)
                elif name == "rec":
                    tb.api("cudaEventRecord", h, 1.0)
                else:
                    tb.kernel(h + 2, 5.0, name=f"k_{name}", launch_at=h, launch_dur=4.0)
                h += 4.0 + 10.0
        for _ in range(4):
            tb.api("cudaStreamWaitEvent", h, 1.0)
            last_end = h + 1.0
            h += 1.0 + 10.0
        truth_e.append(us(last_end))
        h += 5.0  # the pause before the next step: 15 µs instead of 10
    tb.api("cudaDeviceSynchronize", h + 50, 500.0)  # after the loop: no step
    s, e, note = starts_ends(tb)
    assert s == truth_s
    assert e[:-1] == truth_s[1:] and e[-1] == truth_e[-1]
    assert "every API call" in note and "the trace starts with the repetition" in note


def test_one_cuda_graph_replay_per_step() -> None:
    """Capture (50 launches that run nothing), then 10 steps of (capture check, graph launch)."""
    tb = TB()
    h = 0.0
    for _ in range(50):
        tb.api("cudaLaunchKernel", h, 2.0)  # during capture: no GPU op
        h += 9.0
    tb.api("cudaDeviceSynchronize", h, 30.0)
    h += 200.0
    truth = []
    for _ in range(10):
        truth.append(us(h))
        tb.api("cudaStreamIsCapturing", h, 0.5)
        tb.kernel(
            h + 5,
            100.0,
            name="replayed_kernel",
            launch_at=h + 1.5,
            launch_name="cudaGraphLaunch",
            launch_dur=90.0,
            flags=Flag.GRAPH,
        )
        h += 170.0
    tb.api("cudaDeviceSynchronize", h + 30, 400.0)
    s, e, note = starts_ends(tb)
    assert s == truth
    assert e[:-1] == truth[1:]
    assert e[-1] == truth[-1] + us(170.0)  # a median interval (the next call comes later)
    assert "one CUDA graph replay each (10 replays" in note


def test_one_host_paced_kernel_per_step() -> None:
    """Each step launches one fused kernel after ~190 µs of Python: 10 launches, steadily paced."""
    tb = TB()
    rng = np.random.default_rng(4)
    h = 100.0
    truth = []
    for _ in range(10):
        truth.append(us(h))
        tb.kernel(h + 5, 20.0, name="fused", launch_at=h, launch_dur=12.0)
        h += 200.0 + rng.uniform(-10, 10)
    tb.api("cudaDeviceSynchronize", h, 30.0)
    s, _e, note = starts_ends(tb)
    assert s == truth
    assert "one launch each (10 launches in a row of fused" in note


def test_polling_calls_do_not_break_the_repetition() -> None:
    """item_every_step-like loop (12 kernels, then the sync) with 0 to 4 event queries per step, at
    random places: they are left out, the steps end when the sync returns."""
    tb = TB()
    rng = np.random.default_rng(11)
    h = 0.0
    ends = []
    for _ in range(12):
        for j in range(12):
            tb.kernel(h + 3, 2.0, name=f"k{j}", launch_at=h, launch_dur=3.0)
            h += 5.0
            if rng.random() < 0.2:
                tb.api("cudaEventQuery", h, 0.5)
                h += 1.0
        tb.api("cudaStreamSynchronize", h, 40.0)
        h += 40.0
        ends.append(us(h))
        h += 30.0
    s, e, _ = starts_ends(tb)
    assert e == ends
    assert len(s) == 12


def test_a_blocking_call_in_the_middle_of_the_step() -> None:
    """nonzero-like: (a, b, c, sync, d, e) per step, the trace starting at the first step: the
    steps start at a, not after the sync."""
    tb = TB()
    h = 0.0
    truth = []
    for _ in range(8):
        truth.append(us(h))
        for name in ("a", "b", "c", "sync", "d", "e"):
            if name == "sync":
                tb.api("cudaStreamSynchronize", h, 20.0)
                h += 20.0 + 6.0
            else:
                tb.kernel(h + 2, 3.0, name=name, launch_at=h, launch_dur=4.0)
                h += 4.0 + 6.0
    s, _e, note = starts_ends(tb)
    assert s == truth
    assert "the trace starts with the repetition" in note


def test_a_step_starts_at_the_host_work_that_leads_to_it() -> None:
    """Each step: a data-loading CPU op (no CUDA call), then 8 kernels; after the last kernel a
    short "log" op, then 150 µs the trace does not record (the loop's own Python). The step
    starts at the data op; the log op stays with the step before it."""
    tb = TB()
    h = 0.0
    truth = []
    for _ in range(6):
        truth.append(us(h))
        tb.cpu_op("next(data_iter)", h, 80.0)
        h += 85.0
        for j in range(8):
            tb.kernel(h + 3, 2.0, name=f"k{j}", launch_at=h, launch_dur=4.0)
            h += 10.0
        tb.cpu_op("log", h, 20.0)
        h += 20.0 + 150.0
    s, _e, note = starts_ends(tb)
    assert s == truth
    # all 6 start at their data op; before each of the last 5, 150 µs that the trace does not record
    assert "6 of the starts moved earlier, to the host range that leads to the step's first call" in note
    assert "the host recorded nothing for a median 150 µs" in note


def _allocating_loop(alloc_every: int, steps: int = 12) -> tuple[TB, list[int]]:
    """keep_outputs-like: an event record then 10 kernels a step; every `alloc_every`-th step (0: only the
    first) the caching allocator asks for a block first (cudaStreamIsCapturing, then cudaMalloc)."""
    tb = TB()
    h = 0.0
    truth = []
    for i in range(steps):
        truth.append(us(h))
        tb.api("cudaEventRecord", h, 1.0)
        h += 6.0
        if (alloc_every and i % alloc_every == 0) or (not alloc_every and i == 0):
            tb.api("cudaStreamIsCapturing", h, 1.0)
            tb.api("cudaMalloc", h + 2, 30.0)
            h += 40.0
        for j in range(10):
            tb.kernel(h + 3, 2.0, name=f"k{j}", launch_at=h, launch_dur=3.0)
            h += 5.0
        h += 60.0
    return tb, truth


def test_allocator_calls_every_few_steps_do_not_set_the_period() -> None:
    """A new block every second step makes the every-call sequence repeat every two steps; left out,
    it repeats every step: 12 steps, each starting at its event record, the note saying why."""
    tb, truth = _allocating_loop(2)
    s, _e, note = starts_ends(tb)
    assert s == truth
    assert "caching allocator's 12 calls (cudaMalloc and the like) left out" in note
    assert f"repeats every {2 * 11 + 2} calls, without them every 11" in note  # two steps and one block


def test_allocator_calls_at_start_up_only_leave_the_sequence_as_recorded() -> None:
    """A block asked for in the first step only: the sequence stays as recorded, no note (the first step,
    whose calls differ from the others', is left to the set-up, as before)."""
    tb, truth = _allocating_loop(0)
    s, _e, note = starts_ends(tb)
    assert s == truth[1:]
    assert "allocator" not in note


def test_a_step_starts_where_the_others_start_when_its_fetch_was_quicker() -> None:
    """slow_loader-like: each step fetches its batch (a "load batch" range of 1-6 ms, 65 µs after the step
    before ends), then uploads it ("h2d", 40 µs after the fetch) and runs 10 kernels. In step 5 the upload
    comes 77 µs after the fetch, more than the 65 µs before the fetch: still the step starts at its fetch,
    as the other 7 do."""
    tb = TB()
    h = 0.0
    truth = []
    for i in range(8):
        h += 65.0
        truth.append(us(h))
        tb.cpu_op("load batch", h, 1000.0 + 2500.0 * (i % 3))
        h += 1000.0 + 2500.0 * (i % 3) + (77.0 if i == 5 else 40.0)
        tb.cpu_op("h2d", h, 30.0)
        tb.kernel(h + 8, 10.0, name="copy", launch_at=h + 5, launch_dur=10.0)
        h += 30.0
        for j in range(10):
            tb.kernel(h + 3, 2.0, name=f"k{j}", launch_at=h, launch_dur=3.0)
            h += 5.0
    s, _e, _note = starts_ends(tb)
    assert s == truth
