"""What a HostView answers per thread or device: the OS calls, data-loading ranges and host waits as sorted
sets (starts, running maximum of the ends, their union) that gap causes look up with searchsorted."""

from __future__ import annotations

import msgspec
import numpy as np


class OsCalls(msgspec.Struct, frozen=True):
    """One thread's OS runtime calls sorted by start (with the running maximum of their ends and which
    call holds it; their ends sorted, for counting), and the union of the time it was blocked in them
    outside its CUDA API calls."""

    start: np.ndarray
    runmax: np.ndarray
    arg: np.ndarray
    ends_sorted: np.ndarray
    name: np.ndarray
    end: np.ndarray
    blocked_start: np.ndarray
    blocked_end: np.ndarray
    input_start: np.ndarray  # the union of the time blocked in waits for data (INPUT_OS_CALLS)
    input_end: np.ndarray
    is_input: np.ndarray  # per call (start order): an INPUT_OS_CALLS call


class InputSpans(msgspec.Struct, frozen=True):
    """One thread's data-loading ranges sorted by start (running maximum of their ends and which range
    holds it, their names and ends) and the union of its input-wait time (ranges and OS waits for data)."""

    start: np.ndarray
    runmax: np.ndarray
    arg: np.ndarray
    name: np.ndarray
    end: np.ndarray
    wait_start: np.ndarray
    wait_end: np.ndarray


class WaitSet(msgspec.Struct, frozen=True):
    """A subset of a HostView's waits (positions `idx` into its wait_* arrays), sorted by start, with
    the running maximum of their ends (and which wait holds it) and their union."""

    idx: np.ndarray
    start: np.ndarray
    runmax: np.ndarray
    arg: np.ndarray  # index into the HostView's wait_* arrays
    us: np.ndarray
    ue: np.ndarray

