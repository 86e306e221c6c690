"""Export metadata, devices and contexts: META_DATA_EXPORT / EXPORT_META_DATA, TARGET_INFO_GPU,
TARGET_INFO_CUDA_DEVICE, TARGET_INFO_CUDA_CONTEXT_INFO (green contexts), PROCESSES, ThreadNames."""

from __future__ import annotations

from collections.abc import Iterable

from tracelab.io.nsys.db import NsysDb, quote_ident
from tracelab.io.nsys.strings import NsysStrings
from tracelab.model import ContextInfo, DeviceInfo

KNOWN_SCHEMA_MAJOR = 3


def export_meta(db: NsysDb) -> dict[str, str]:
    """name -> value of the export metadata table (whichever name this schema uses)."""
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if db.has(table, "name", "value"):
            return {str(n): str(v) for n, v in db.rows(f"SELECT name, value FROM {quote_ident(table)}") if n is not None}
    return {}


def schema_version(meta: dict[str, str]) -> str:
    return meta.get("EXPORT_SCHEMA_VERSION", "")


def schema_major(version: str) -> int | None:
    try:
        return int(version.split(".", 1)[0])
    except ValueError:
        return None


def _int(v: object, default: int = 0) -> int:
    try:
        return int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return default


def _select_dicts(db: NsysDb, table: str, wanted: Iterable[str]) -> list[dict[str, object]]:
    cols = [c for c in wanted if c in db.columns(table)]
    if not cols:
        return []
    sql = f"SELECT {', '.join(quote_ident(c) for c in cols)} FROM {quote_ident(table)}"
    return [dict(zip(cols, row)) for row in db.rows(sql)]


_GPU_COLUMNS = ("id", "name", "smCount", "computeMajor", "computeMinor", "totalMemory", "maxWarpsPerSm", "threadsPerWarp",
                "maxBlocksPerSm", "maxRegistersPerSm", "maxRegistersPerBlock", "maxShmemPerSm", "maxShmemPerBlockOptin",
                "maxShmemPerBlock")


def read_devices(db: NsysDb, used: Iterable[tuple[int, int]]) -> tuple[list[DeviceInfo], bool]:
    """DeviceInfo for each (rank, deviceId) the events use. CUPTI deviceId is matched to
    TARGET_INFO_GPU.id; TARGET_INFO_CUDA_DEVICE (cudaId -> numMultiprocessors) fills in the SM count
    when TARGET_INFO_GPU is absent (time-sliced exports). Returns (devices, described)."""
    gpus: dict[int, dict[str, object]] = {}
    for row in _select_dicts(db, "TARGET_INFO_GPU", _GPU_COLUMNS):
        gpus.setdefault(_int(row.get("id"), -1), row)  # multi-VM exports repeat ids: first wins
    sms: dict[int, int] = {}
    for row in _select_dicts(db, "TARGET_INFO_CUDA_DEVICE", ("cudaId", "numMultiprocessors")):
        sms.setdefault(_int(row.get("cudaId"), -1), _int(row.get("numMultiprocessors")))
    out = []
    for rank, dev in sorted(set(used)):
        g = gpus.get(dev)
        if g is None:
            out.append(DeviceInfo(rank=rank, device=dev, sm_count=sms.get(dev, 0)))
            continue
        warp = _int(g.get("threadsPerWarp"), 32) or 32
        out.append(DeviceInfo(
            rank=rank, device=dev, name=str(g.get("name") or ""), sm_count=_int(g.get("smCount")) or sms.get(dev, 0),
            cc_major=_int(g.get("computeMajor")), cc_minor=_int(g.get("computeMinor")),
            total_memory=_int(g.get("totalMemory")), max_threads_per_sm=_int(g.get("maxWarpsPerSm")) * warp,
            max_blocks_per_sm=_int(g.get("maxBlocksPerSm")), registers_per_sm=_int(g.get("maxRegistersPerSm")),
            max_registers_per_block=_int(g.get("maxRegistersPerBlock")), shared_mem_per_sm=_int(g.get("maxShmemPerSm")),
            max_shared_mem_per_block=_int(g.get("maxShmemPerBlockOptin")) or _int(g.get("maxShmemPerBlock")),
            warp_size=warp,
        ))
    return out, bool(gpus)


def read_contexts(db: NsysDb, rank_of_pid: dict[int, int]) -> list[ContextInfo]:
    """Every CUDA context the export describes; green contexts carry their parent and SM count."""
    rows = _select_dicts(db, "TARGET_INFO_CUDA_CONTEXT_INFO",
                         ("processId", "deviceId", "contextId", "parentContextId", "isGreenContext", "numMultiprocessors"))
    out: dict[tuple[int, int, int], ContextInfo] = {}
    for r in rows:
        rank = rank_of_pid.get(_int(r.get("processId"), -1), 0)
        green = _int(r.get("isGreenContext")) == 1
        ctx = _int(r.get("contextId"), -1)
        parent = _int(r.get("parentContextId"), -1)
        key = (rank, _int(r.get("deviceId"), -1), ctx)
        out.setdefault(key, ContextInfo(rank=key[0], device=key[1], context=ctx, is_green=green,
                                        parent_context=parent if green and parent > 0 else -1,
                                        green_context=ctx if green else -1, sm_count=_int(r.get("numMultiprocessors"))))
    return sorted(out.values(), key=lambda c: (c.rank, c.device, c.context))


def process_names(db: NsysDb) -> dict[int, str]:
    return {_int(r.get("pid"), -1): str(r.get("name") or "") for r in _select_dicts(db, "PROCESSES", ("pid", "name"))
            if r.get("name")}


def thread_names(db: NsysDb, strings: NsysStrings, wanted: set[tuple[int, int]]) -> dict[str, str]:
    """'pid:tid' -> thread name, for the threads that carry events."""
    out: dict[str, str] = {}
    for r in _select_dicts(db, "ThreadNames", ("nameId", "globalTid")):
        gtid = _int(r.get("globalTid"), -1)
        if gtid < 0:
            continue
        key = ((gtid >> 24) & 0xFFFFFF, gtid & 0xFFFFFF)
        if key in wanted:
            name = strings.value(_int(r.get("nameId"), -1))
            if name:
                out[f"{key[0]}:{key[1]}"] = name
    return out


def green_streams(db: NsysDb) -> dict[tuple[int, int], int]:
    """(pid, streamId) -> green context id, for streams that TARGET_INFO_CUDA_STREAM places in a
    context that TARGET_INFO_CUDA_CONTEXT_INFO marks green."""
    green = {(_int(r.get("processId"), -1), _int(r.get("contextId"), -1))
             for r in _select_dicts(db, "TARGET_INFO_CUDA_CONTEXT_INFO", ("processId", "contextId", "isGreenContext"))
             if _int(r.get("isGreenContext")) == 1}
    if not green:
        return {}
    out: dict[tuple[int, int], int] = {}
    for r in _select_dicts(db, "TARGET_INFO_CUDA_STREAM", ("processId", "contextId", "streamId")):
        key = (_int(r.get("processId"), -1), _int(r.get("contextId"), -1))
        if key in green:
            out[(key[0], _int(r.get("streamId"), -1))] = key[1]
    return out
