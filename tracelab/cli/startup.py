"""The `tracelab` command's start-up: numpy with one BLAS thread, the analyses imported on a second core
while the trace is read, freed pages kept for the next arrays, no cyclic GC and no interpreter teardown
for the read-only commands (DECISIONS.md records what each buys)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

_ANALYSIS_MODULES = ("tracelab.analyses.analyze", "tracelab.render.findings", "tracelab.render.document")


def prefetch(*modules: str) -> None:
    """Import `modules` on a background thread while the main thread reads the trace: the C scanner
    and the file reads release the GIL, so on a second core the analyses are loaded by the time the
    parse ends. Errors are left to the main thread's own import. The thread
    is joined at exit, so the interpreter never shuts down in the middle of an import."""
    import atexit
    import importlib
    import threading

    def run() -> None:
        for m in modules:
            try:
                importlib.import_module(m)
            except Exception:  # noqa: BLE001, S110 - the main thread imports it again and reports
                pass

    from ..memory import inherit

    thread = threading.Thread(target=inherit(run), name="tracelab-prefetch", daemon=True)
    thread.start()
    atexit.register(thread.join)


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """numpy's OpenBLAS starts a thread per core when numpy is first imported (~50 ms of a 0.2 s start-up
    here); tracelab does no linear algebra, so numpy loads with one. The variable is set only for that
    import (and only where the user has not set it): programs tracelab starts later see their own."""
    if "numpy" in sys.modules or _BLAS_THREADS in os.environ:
        yield
        return
    os.environ[_BLAS_THREADS] = "1"
    try:
        yield
    finally:
        os.environ.pop(_BLAS_THREADS, None)


def reuse_pages() -> None:
    """The batch commands (import, analyze, compare, report, export) keep the pages of freed big numpy
    arrays for the next ones (`tracelab.memory`; not `serve`, a long-lived process that would hold them)."""
    with _one_blas_thread():
        from ..memory import install

        install()


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"
_quick_exit = False  # set by `entry`, the `tracelab` command: `quick_exit` may end the process


def allow_quick_exit() -> None:
    """Called by `entry`, the `tracelab` command (and `python -m tracelab`): allowed to skip the
    interpreter's teardown once a read-only command has written everything (`quick_exit`)."""
    global _quick_exit
    _quick_exit = True


def quick_exit() -> None:
    """End the process now, with exit status 0, when run as the `tracelab` command: stdout and stderr are
    flushed, then the interpreter's teardown (freeing every module and array: ~60 ms after an `analyze`
    of a 54 MB trace) is skipped with os._exit. Only for commands that wrote no file and hold no store:
    nothing is left half-done. In-process callers (tests, `main()` from Python) are unaffected."""
    if not _quick_exit:
        return
    store = sys.modules.get("tracelab.store.store")
    if store is not None and getattr(store, "OPENED", False):
        return  # a store's connections (one per thread that read it) close at the normal exit: no -wal/-shm left
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def no_cycle_collection() -> None:
    """As the `tracelab` command (`quick_exit` ends it), `analyze` of a trace file runs without the
    cyclic garbage collector: its passes over every object the imports made were ~2-3 % of `analyze` on
    the 53.7 MB trace, and the command makes next to no reference cycles (arrays, lists and strings are
    freed by reference counting as before). Not for a run in the store: its read-only connection sits
    in a cycle, and only the collector closes it at exit (SQLite then removes the -wal / -shm files).
    In-process callers keep theirs."""
    if _quick_exit:
        import gc

        gc.disable()



@contextlib.contextmanager
def reading_early(path: Path) -> Iterator[None]:
    """Around the parse of a trace file given on the command line: a Kineto trace is read and scanned on
    another core while numpy loads (decode workers read the file themselves); else a gzip file (an nsys
    export?) is inflated meanwhile; the analyses are imported meanwhile (`prefetch`)."""
    from ..parsers import block_reader, early_scan

    if os.environ.get("TRACELAB_DECODE_WORKERS", "").strip() or not early_scan.start(path):
        block_reader.start_early(path)
    try:
        with _one_blas_thread():
            from ..parsers import detect, kineto  # noqa: F401 - what the parse needs first, before the prefetch
        reuse_pages()
        prefetch(*_ANALYSIS_MODULES)
        yield
    finally:
        early_scan.discard()
        block_reader.discard_early()
