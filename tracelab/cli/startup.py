"""The `tracelab` command's start-up: numpy loads with one BLAS thread (tracelab does no linear algebra)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


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
