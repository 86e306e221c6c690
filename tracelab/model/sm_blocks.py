"""The columns of `Timeline.sm_blocks`, the measured per-block SM records a Timeline may carry (probe kernels),
shared by the readers that make them and the store that keeps them."""

from __future__ import annotations

# the measured per-block SM records a Timeline may carry (Timeline.sm_blocks): these columns always; a run
# directory's probe records also name their kernel ("kernel": its row in the events, -1 unknown)
SM_BLOCK_COLUMNS: dict[str, str] = {
    "rank": "int32",
    "device": "int32",
    "green_context": "int64",
    "sm": "int32",
    "start": "int64",
    "end": "int64",
    "name": "int32",
}
