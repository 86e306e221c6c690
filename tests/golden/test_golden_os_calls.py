"""OS runtime calls (nsys --trace=osrt, table OSRT_API) in gap causes: hand-made nsys-schema exports through
the CLI, answers computed by hand in each test.

Every program: kernel A [0,100) µs then kernel B [300,400) µs on stream 7 (one 200 µs gap [100,300)); B is
launched by thread 1 at 290 (a 4 µs call), so the time up to the next launch is the window [100,290) =
190 µs. The rule (docs/DESIGN.md, "Gap causes"): `no_work` when the launching thread spent at least half of
that window in OS calls outside its CUDA calls AND for at least half of it no launching thread of its
process ran (each in an OS call, waiting for the GPU, or outside its recorded life); a wait for another
thread (pthread_cond_wait, sem_wait, ...) counts only until the last wake-up call (signal, broadcast,
sem_post) made in the process while it waited. The blocking call here is clock_nanosleep: a wait for data
(read, poll, sem_wait, ...) makes the gap `input_wait` instead (test_golden_input_wait.py, issue 29).
"""

from __future__ import annotations

from conftest import analyze_cli
from trace_builder import Program

US = 1000  # ns per µs
WINDOW = 190  # µs: [100, 290)


def ab(a_tid: int = 1) -> Program:
    p = Program()
    p.kernel(0, 100, launch=(-20, 4, "cudaLaunchKernel", a_tid))
    p.kernel(300, 100, launch=(290, 4, "cudaLaunchKernel", 1))
    if a_tid != 1:
        p.api("cudaGetDevice", -30, 1, tid=1)  # thread 1 is recorded (alive) from -30 on
    return p


def gap_of(doc: dict) -> dict:
    (g,) = [g for g in doc["gaps"] if g["start_ns"] - min(x["start_ns"] for x in doc["gaps"]) == 0 and g["device"] == 0]
    assert g["duration_ns"] == 200 * US
    return g


def nsys(p: Program, tmp_path, name: str = "t") -> dict:
    return analyze_cli(p.nsys(tmp_path / f"{name}.sqlite"))


def test_blocked_in_sleep_is_no_work_and_names_the_call(tmp_path):
    p = ab()
    p.os_call("clock_nanosleep", 110, 170)  # [110,280): 170 of the 190 µs window
    g = gap_of(nsys(p, tmp_path))
    assert g["cause"] == "no_work" and g["host_data"] == "cuda_api+os_calls"
    ev = g["evidence"]
    # 170/190 = 89.5% -> "89%" (both the thread and "no launching thread ran": it is the only one)
    assert "which was blocked in OS calls 89% of the time up to then (clock_nanosleep from 10.0 µs into the gap to 180.0 µs into the gap)" in ev
    assert "no launching thread of the process ran for 89% of it (1 launching thread)" in ev
    assert ev.endswith("(host data: CUDA API calls + OS calls)")


def test_the_same_program_without_os_call_data(tmp_path):
    """Without an OSRT_API table (nsys without osrt) or in Kineto, nothing shows the block: launch_latency,
    and host_data says which data the trace had."""
    p = ab()
    g = gap_of(nsys(p, tmp_path))  # no os_call(): no OSRT_API table
    assert (g["cause"], g["host_data"]) == ("launch_latency", "cuda_api")
    doc = analyze_cli(p.kineto(tmp_path / "t.json", cpu_ops=False))
    assert (gap_of(doc)["cause"], gap_of(doc)["host_data"]) == ("launch_latency", "cuda_api")


def test_blocked_less_than_half_is_launch_latency(tmp_path):
    p = ab()
    p.os_call("clock_nanosleep", 110, 80)  # 80/190 = 42% < 50%
    g = gap_of(nsys(p, tmp_path))
    assert (g["cause"], g["host_data"]) == ("launch_latency", "cuda_api+os_calls")
    assert "host busy 0% of the time up to the next launch (host data: CUDA API calls + OS calls)" in g["evidence"]


def test_another_launching_thread_running_keeps_it_launch_latency(tmp_path):
    """Thread 2 launches A (at -20) and C (at 495): it is a launching thread alive through the window, with
    no OS call in it, so it was running: the host was not blocked."""
    p = ab(a_tid=2)
    p.kernel(500, 20, launch=(495, 3, "cudaLaunchKernel", 2), stream=8)
    p.os_call("clock_nanosleep", 110, 170)
    assert gap_of(nsys(p, tmp_path))["cause"] == "launch_latency"
    # thread 2 also blocked, in pthread_cond_wait [90,450) (no wake-up call in the process): both blocked over
    # [110,280) = 170/190 -> no_work, "2 launching threads"
    p.os_call("pthread_cond_wait", 90, 360, tid=2)
    g = gap_of(nsys(p, tmp_path, "both"))
    assert g["cause"] == "no_work"
    assert "no launching thread of the process ran for 89% of it (2 launching threads)" in g["evidence"]


def test_a_woken_thread_is_running(tmp_path):
    """Thread 1 (launches B) waits in pthread_cond_wait [50,285); thread 2 (launches A and C) reads [60,140),
    signals at 150 and waits [155,450). Without the wake-up rule both would count blocked over [100,140) and
    [155,285): 170/190 -> no_work. With it thread 1 is blocked only until the signal at 150: [100,150) =
    50/190 = 26% of the window < 50% -> launch_latency (the time from the signal to its launch is the
    host's own hand-over latency, e.g. PyTorch's autograd thread woken by loss.backward())."""
    p = ab(a_tid=2)
    p.kernel(500, 20, launch=(495, 3, "cudaLaunchKernel", 2), stream=8)
    p.os_call("pthread_cond_wait", 50, 235, tid=1)
    p.os_call("read", 60, 80, tid=2)
    p.os_call("pthread_cond_signal", 150, 2, tid=2)
    p.os_call("pthread_cond_wait", 155, 295, tid=2)
    assert gap_of(nsys(p, tmp_path))["cause"] == "launch_latency"


def test_sync_in_progress_then_blocked_in_the_os(tmp_path):
    """The launching thread's cudaStreamSynchronize [10,102) is still waiting when the GPU goes idle at 100,
    then the thread blocks in clock_nanosleep [105,285): 180/190 = 94.7% of the window in OS calls, and it is the only
    launching thread, blocked (wait or OS call) over [100,102) + [105,285) = 182/190 -> no_work (the sync
    drained the queue, but the sleep is what kept the GPU idle)."""
    p = ab()
    p.api("cudaStreamSynchronize", 10, 92)
    p.os_call("clock_nanosleep", 105, 180)
    g = gap_of(nsys(p, tmp_path))
    assert g["cause"] == "no_work"
    # measured from the wait's return (issue 24 item 7): [102,290), 180/188 = 95.7% in the sleep
    assert "returned at 2.0 µs into the gap, covering 1% of the gap; after it:" in g["evidence"]
    assert "blocked in OS calls 96% of the time up to then (clock_nanosleep from 5.0 µs into the gap to 185.0 µs into the gap)" in g["evidence"]
    assert "no launching thread of the process ran for 96% of it" in g["evidence"]
    # a short read [105,150) (45/190 = 24%) leaves the in-progress sync as the cause
    q = ab()
    q.api("cudaStreamSynchronize", 10, 92)
    q.os_call("clock_nanosleep", 105, 45)
    # (issue 24 item 7: no longer host_sync; after the wait the thread was busy, not blocked)
    assert gap_of(nsys(q, tmp_path, "short"))["cause"] == "launch_latency"


def test_a_sync_covering_the_gap_stays_host_sync(tmp_path):
    p = ab()
    p.api("cudaStreamSynchronize", 100, 150)  # covers [100,250) = 75% of the gap
    p.os_call("clock_nanosleep", 255, 30)
    assert gap_of(nsys(p, tmp_path))["cause"] == "host_sync"


def test_os_calls_inside_a_cuda_call_are_cuda_time(tmp_path):
    """An ioctl made inside cudaMalloc [100,285) is time in the CUDA call (host busy), not blocked in the OS."""
    p = ab()
    p.api("cudaMalloc", 100, 185)
    p.os_call("ioctl", 110, 170)
    g = gap_of(nsys(p, tmp_path))
    assert g["cause"] == "launch_latency"
    assert "host busy 97% of the time up to the next launch" in g["evidence"]  # 185/190 = 97.4%


def test_a_launching_thread_outside_its_recorded_life_is_not_running(tmp_path):
    """Thread 2 launched A at -20 (its only event: life [-20,-16]); during [100,290) it is not alive in the
    trace, so only thread 1's read counts: 170/190 -> no_work, with 2 launching threads."""
    p = ab(a_tid=2)
    p.os_call("clock_nanosleep", 110, 170)
    g = gap_of(nsys(p, tmp_path))
    assert g["cause"] == "no_work" and "(2 launching threads)" in g["evidence"]
