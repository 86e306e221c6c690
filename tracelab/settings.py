"""Where things live (the store path: TRACELAB_DB or --db override the user-data default) and what the
machine gives (the cores this process may use)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "tracelab"


def default_db_path() -> Path:
    env = os.environ.get("TRACELAB_DB")
    return Path(env) if env else data_dir() / "tracelab.db"


def runs_dir() -> Path:
    """Where `tracelab record` writes run directories by default."""
    env = os.environ.get("TRACELAB_RUNS")
    return Path(env) if env else data_dir() / "runs"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, e.g. under taskset)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def release_memory() -> None:
    """Give the free memory the C allocator holds back to the system (glibc's malloc_trim; elsewhere nothing):
    memory freed on the loader's and the analysis's threads stays resident otherwise. Results never depend on it."""
    global _trim
    if _trim is None:
        _trim = _malloc_trim()
    _trim()


def _malloc_trim() -> Callable[[], object]:
    import ctypes

    try:
        trim = ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return lambda: None
    trim.argtypes = [ctypes.c_size_t]
    return lambda: trim(0)


_trim: Callable[[], object] | None = None
