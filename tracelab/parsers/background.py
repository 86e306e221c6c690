"""One background thread that runs one call at a time: what `ThreadPoolExecutor(1)` gives the Kineto
parser, without importing concurrent.futures (and logging with it: ~6-10 ms of `tracelab analyze`'s
start-up)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any


class OneWorker:
    """`submit(fn, arg)` starts fn(arg) on the worker thread; `wait()` returns its result or raises its
    error. Calls alternate: one submit, then one wait."""

    def __init__(self, name: str) -> None:
        self._todo: queue.SimpleQueue = queue.SimpleQueue()
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        from tracelab.memory import inherit

        self._thread = threading.Thread(target=inherit(self._run), name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (job := self._todo.get()) is not None:
            fn, arg = job
            try:
                self._done.put((True, fn(arg)))
            except BaseException as exc:  # noqa: BLE001 - re-raised by wait() on the caller's thread
                self._done.put((False, exc))

    def submit(self, fn: Callable[[Any], Any], arg: Any) -> None:
        self._todo.put((fn, arg))

    def wait(self) -> Any:
        ok, value = self._done.get()
        if not ok:
            raise value
        return value

    def close(self) -> None:
        """Stop the thread once its current call (if any) is done."""
        self._todo.put(None)
        self._thread.join()
