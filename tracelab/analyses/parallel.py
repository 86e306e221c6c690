"""Independent analyses of one big timeline, run side by side on threads.

The analyses are pure functions of an immutable Timeline and spend their time in numpy calls that
release the GIL on big arrays (sorts, searches, gathers, reductions), so two of them on two threads
take about the time of the longer one. Results do not depend on the thread count: each task returns
its own value and the caller combines them in a fixed order. Small timelines stay on one thread (the
threads would cost more than they save)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tracelab.analyses.core.memo import bound
from tracelab.settings import release_memory, usable_cores

T = TypeVar("T")

PARALLEL_MIN_EVENTS = 100_000  # below this, one thread is as fast (54 MB, 123 k events: 0.58 vs 0.68 s on 16 cores)
PARALLEL_MAX_EVENTS = 8_000_000  # above this, one thread: two analyses' temporaries at once raise the peak memory
THREADS_ENV = "TRACELAB_ANALYZE_THREADS"  # caps the threads (1: one thread)
# above this, memory first (issue 26: x64, 7.9 M events, within 2.5 GiB on the 16-core host; the 1M-kernel nsys
# export, 4.5 M events, stays below: memory first took it from 5.2-5.4 to 5.5-6.2 s): the C allocator's
# free memory is given back after each task of the analysis (`run_each(..., release=True)`: each helper thread's
# malloc arena otherwise keeps what its tasks freed, ~0.7 GB at x64 with 4 threads) and the extras begin after
# the analysis, not beside it (tracelab.api.analysis.start_extras)
MEMORY_FIRST_EVENTS = 6_000_000


def memory_first(n_events: int) -> bool:
    """Whether a timeline of n_events events is analysed memory first (MEMORY_FIRST_EVENTS)."""
    return n_events > MEMORY_FIRST_EVENTS


def threads_for(n_events: int) -> int:
    """How many threads `run_each` should use for a timeline of n_events events."""
    if not PARALLEL_MIN_EVENTS <= n_events <= PARALLEL_MAX_EVENTS:
        return 1
    cap = 4
    try:
        cap = max(1, min(cap, int(os.environ.get(THREADS_ENV, cap))))
    except ValueError:
        pass
    return min(usable_cores(), cap)


def run_each(
    tasks: Sequence[Callable[[], T]], threads: int, first: Sequence[bool] | None = None, release: bool = False
) -> list[T]:
    """Every task's result, in the tasks' order. With threads > 1 the tasks are taken by this thread
    and up to threads - 1 helper threads, each taking the next task when it is free: those marked in
    `first` (the long ones) before the others, else in order. The first
    error raised by a task is raised here once every started task has finished (no helper keeps
    working on a half-built result after this returns); a KeyboardInterrupt on this thread is raised
    at once (the helpers are daemon threads). `release`: `release_memory()` after each task (memory first)."""
    n = len(tasks)
    if release:
        tasks = [_releasing(task) for task in tasks]
    if threads <= 1 or n <= 1:
        return [task() for task in tasks]
    tasks = [bound(task) for task in tasks]  # the analysis contexts active here, on every thread
    order = sorted(range(n), key=lambda i: not first[i]) if first is not None else list(range(n))
    results: list[Any] = [None] * n
    errors: list[BaseException] = []
    lock = threading.Lock()
    next_task = [0]
    caller = threading.current_thread()

    def work() -> None:
        while True:
            with lock:
                k = next_task[0]
                if k >= n or errors:
                    return
                next_task[0] = k + 1
            i = order[k]
            try:
                results[i] = tasks[i]()
            except BaseException as exc:  # re-raised on the caller's thread below
                with lock:
                    errors.append(exc)
                if threading.current_thread() is caller and not isinstance(exc, Exception):
                    raise  # Ctrl-C: now, not after the helpers' tasks
                return

    helpers = [threading.Thread(target=work, name=f"tracelab-analyze-{k}", daemon=True) for k in range(min(threads, n) - 1)]
    for h in helpers:
        h.start()
    work()
    for h in helpers:
        h.join()
    if errors:
        raise errors[0]
    return results


def _releasing(task: Callable[[], T]) -> Callable[[], T]:
    def run() -> T:
        try:
            return task()
        finally:
            release_memory()

    return run


def in_background(fn: Callable[[], T]) -> Callable[[], T]:
    """Start fn() on a daemon thread now; the returned call waits for its result (or raises its error).
    A caller that fails before asking leaves the thread to finish on its own."""
    done = threading.Event()
    box: list[Any] = []
    fn = bound(fn)  # the analysis contexts active here

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the waiter on the caller's thread
            box.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="tracelab-background", daemon=True).start()

    def result() -> T:
        done.wait()
        ok, value = box[0]
        if not ok:
            raise value
        return value

    return result

