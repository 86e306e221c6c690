"""Kineto metadata helpers: DeviceInfo from deviceProperties / computeProperties, memcpy and memset
names -> copy kind and memory kinds."""

from __future__ import annotations

import re

import orjson

from tracelab.model import CopyKind, DeviceInfo, EventKind, MemKind

_MEMCPY = re.compile(r"memcpy\s+(\w+)(?:\s*\((\w+)\s*->\s*(\w+)\))?", re.IGNORECASE)
_COPY_KINDS = {
    "htod": CopyKind.HTOD,
    "dtoh": CopyKind.DTOH,
    "dtod": CopyKind.DTOD,
    "htoh": CopyKind.HTOH,
    "ptop": CopyKind.PTOP,
}
_MEM_KINDS = {
    "pageable": MemKind.PAGEABLE,
    "pinned": MemKind.PINNED,
    "device": MemKind.DEVICE,
    "array": MemKind.ARRAY,
    "managed": MemKind.MANAGED,
}


def copy_info(name: str, kind: EventKind) -> tuple[int, int, int]:
    if kind == EventKind.MEMSET:
        m = re.search(r"\((\w+)\)", name)
        mem = _MEM_KINDS.get(m.group(1).lower(), MemKind.UNKNOWN) if m else MemKind.UNKNOWN
        return int(CopyKind.UNKNOWN), int(MemKind.UNKNOWN), int(mem)
    m = _MEMCPY.search(name)
    if not m:
        return int(CopyKind.UNKNOWN), int(MemKind.UNKNOWN), int(MemKind.UNKNOWN)
    ck = _COPY_KINDS.get(m.group(1).lower(), CopyKind.UNKNOWN)
    src = _MEM_KINDS.get((m.group(2) or "").lower(), MemKind.UNKNOWN)
    dst = _MEM_KINDS.get((m.group(3) or "").lower(), MemKind.UNKNOWN)
    return int(ck), int(src), int(dst)


def _text(v: object) -> str:
    """A name from the metadata: a string, else '' (lists, objects and numbers are not names)."""
    return v if isinstance(v, str) else ""


def is_mtia(top: dict) -> bool:
    props = top.get("deviceProperties")
    try:
        text = orjson.dumps(props).decode() if props is not None else ""
        dist = orjson.dumps(top.get("distributedInfo", "")).decode()
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: not an MTIA trace
        return False
    return "ARTEMIS" in text or "mtia" in dist.lower()


def _int(d: dict, *keys: str) -> int:
    for k in keys:
        v = d.get(k)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**63:
            return int(v)
    return 0


def listed_names(top: dict) -> list[str]:
    props = top.get("deviceProperties")
    if not isinstance(props, list):
        props = top.get("computeProperties")
    if not isinstance(props, list):
        return []
    return sorted({_text(p.get("name")) for p in props if isinstance(p, dict) and _text(p.get("name"))})


def devices_from_properties(top: dict, rank: int, used: list[int]) -> list[DeviceInfo]:
    """DeviceInfo for the GPUs the events use, from deviceProperties (current) or computeProperties (2021)."""
    props = top.get("deviceProperties")
    if not isinstance(props, list):
        props = top.get("computeProperties")
    by_id: dict[int, dict] = {}
    if isinstance(props, list):
        for i, p in enumerate(props):
            if isinstance(p, dict):
                by_id[_int(p, "id") if "id" in p else i] = p
    names = {_text(p.get("name")) for p in by_id.values()}
    fallback = None
    if by_id and not set(used) & set(by_id) and len(names) == 1:
        # ROCm numbers GPUs by agent (e.g. device 2) while deviceProperties counts from 0: when every
        # listed GPU is the same model, its properties are the ones the events' GPU has
        fallback = next(iter(by_id.values()))
    out = []
    for dev in used:
        p = by_id.get(dev, fallback)
        if p is None:
            out.append(DeviceInfo(rank=rank, device=dev))
            continue
        out.append(
            DeviceInfo(
                rank=rank,
                device=dev,
                name=_text(p.get("name")),
                sm_count=_int(p, "numSms", "multiProcessorCount"),
                cc_major=_int(p, "computeMajor", "major"),
                cc_minor=_int(p, "computeMinor", "minor"),
                total_memory=_int(p, "totalGlobalMem"),
                max_threads_per_sm=_int(p, "maxThreadsPerMultiprocessor", "maxThreadsPerMultiProcessor"),
                max_blocks_per_sm=_int(p, "maxBlocksPerMultiprocessor", "maxBlocksPerMultiProcessor"),
                registers_per_sm=_int(p, "regsPerMultiprocessor", "regsPerMultiProcessor"),
                max_registers_per_block=_int(p, "regsPerBlock"),
                shared_mem_per_sm=_int(p, "sharedMemPerMultiprocessor", "sharedMemPerMultiProcessor"),
                max_shared_mem_per_block=_int(p, "sharedMemPerBlockOptin", "sharedMemPerBlock"),
                warp_size=_int(p, "warpSize") or 32,
            )
        )
    return out
