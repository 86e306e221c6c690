"""Classify host API call names (CUDA runtime / driver, HIP) once per distinct name.

Both parsers use this so that Kineto and nsys traces get the same sync/launch flags.
"""

from __future__ import annotations

import re

import numpy as np

from .grouping import unique_inverse
from .kinds import Flag, SyncKind

_SYNC_PATTERNS: tuple[tuple[re.Pattern[str], SyncKind], ...] = (
    (re.compile(r"^(cuda|hip|cu)StreamWaitEvent", re.IGNORECASE), SyncKind.STREAM_WAIT_EVENT),
    (re.compile(r"^(cuda|hip|cu)(Stream|Event)Query", re.IGNORECASE), SyncKind.EVENT_QUERY),
    (re.compile(r"^(cuda|hip|cu)StreamSynchronize", re.IGNORECASE), SyncKind.STREAM),
    (re.compile(r"^(cuda|hip)(Device|Thread)Synchronize|^cuCtxSynchronize", re.IGNORECASE), SyncKind.DEVICE),
    (re.compile(r"^(cuda|hip|cu)EventSynchronize", re.IGNORECASE), SyncKind.EVENT),
    # synchronous copies / sets: cudaMemcpy, cudaMemcpy2D, cuMemcpyDtoH_v2, hipMemcpy, cudaMemset, cuMemsetD32
    # (no Async). Case-sensitive: cuMemSetAccess (virtual memory, NCCL) is no memset (issue 24 item 7)
    (re.compile(r"^(cuda|hip)Mem(cpy|set)(?!.*Async)|^cuMem(cpy|set)(?!.*Async)"), SyncKind.MEMCPY),
)

_LAUNCH = re.compile(
    r"^(cuda|hip)(LaunchKernel|LaunchKernelExC|LaunchCooperativeKernel|GraphLaunch|Mem(cpy|set)\w*Async|"
    r"ExtLaunchKernel|ModuleLaunchKernel|LaunchHostFunc)"
    r"|^cu(LaunchKernel|LaunchKernelEx|LaunchCooperativeKernel|GraphLaunch|Mem(cpy|set)\w*Async)"
    r"|^hipExtModuleLaunchKernel",
    re.IGNORECASE,
)


def classify_api_name(name: str) -> tuple[SyncKind, int]:
    """Return (sync kind, flags) for one API call name such as 'cudaStreamSynchronize'."""
    base = name.split("(", 1)[0].strip()
    for pattern, kind in _SYNC_PATTERNS:
        if pattern.search(base):
            blocking = kind in (SyncKind.STREAM, SyncKind.DEVICE, SyncKind.EVENT, SyncKind.MEMCPY)
            return kind, (Flag.BLOCKING if blocking else 0) | (Flag.LAUNCH if kind == SyncKind.MEMCPY else 0)
    if _LAUNCH.search(base):
        return SyncKind.NONE, Flag.LAUNCH
    return SyncKind.NONE, 0


def classify_api_ids(strings: list[str] | tuple[str, ...], name_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized: classify each distinct name id once, then map back onto the rows."""
    uniq, inverse = unique_inverse(name_ids)
    sync = np.zeros(len(uniq), dtype=np.int8)
    flags = np.zeros(len(uniq), dtype=np.int16)
    for i, sid in enumerate(uniq.tolist()):
        if 0 <= sid < len(strings):
            s, f = classify_api_name(strings[sid])
            sync[i], flags[i] = int(s), f
    return sync[inverse], flags[inverse]


_COMM = re.compile(r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|all_to_all|sendrecv|c10d", re.IGNORECASE)


# _COMM's alternatives spelled out: substring tests on the case-folded name find the same names as
# `_COMM.search` and take time linear in the name at C speed (the regex took 1.4 ms on a 10 KB kernel
# name: 100k distinct long names spent 99 s there); tests/test_hostile_sizes.py holds them equal
# (grouped under a shared part, so a name without any of them is scanned 5 times, not 12)
_COMM_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ccl", ("nccl", "rccl")),
    ("all", ("allreduce", "all_reduce", "allgather", "all_gather", "alltoall", "all_to_all")),
    ("reduce", ("reducescatter", "reduce_scatter")),
    ("sendrecv", ("sendrecv",)),
    ("c10d", ("c10d",)),
)


COMM_NAME_CHARS = 1024  # only a name's first 1 KiB is looked at (NCCL / c10d names say so up front)


def is_comm_name(name: str) -> bool:
    """Communication kernels: NCCL/RCCL collectives and peers (their names say so, in their first
    COMM_NAME_CHARS characters: time per name stays bounded however long the names are)."""
    name = name[:COMM_NAME_CHARS]
    low = name.lower() if name.isascii() else name.casefold()
    return any(part in low and any(w in low for w in words) for part, words in _COMM_WORDS)


def comm_mask(strings: list[str] | tuple[str, ...], name_ids: np.ndarray) -> np.ndarray:
    uniq, inverse = unique_inverse(name_ids)
    hit = np.array([0 <= s < len(strings) and is_comm_name(strings[s]) for s in uniq.tolist()], dtype=bool)
    return hit[inverse] if len(uniq) else np.zeros(len(name_ids), dtype=bool)
