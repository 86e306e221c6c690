"""The timeline model shared by every parser, analysis, renderer and the store."""

from .kinds import GPU_ACTIVITY_KINDS, CopyKind, EventKind, Flag, LaneKind, MemKind, SyncKind
from .strings import StringInterner
from .timeline import (
    EVENT_COLUMNS,
    LANE_COLUMNS,
    ContextInfo,
    DeviceInfo,
    ModelError,
    RunMeta,
    Timeline,
    build_timeline,
    merge_timelines,
)

__all__ = [
    "EVENT_COLUMNS",
    "GPU_ACTIVITY_KINDS",
    "LANE_COLUMNS",
    "ContextInfo",
    "CopyKind",
    "DeviceInfo",
    "EventKind",
    "Flag",
    "LaneKind",
    "MemKind",
    "ModelError",
    "RunMeta",
    "StringInterner",
    "SyncKind",
    "Timeline",
    "build_timeline",
    "merge_timelines",
]
