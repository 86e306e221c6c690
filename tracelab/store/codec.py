"""Run metadata <-> JSON text, and run ids. Pure functions, no I/O."""

from __future__ import annotations

import hashlib
import string
from typing import Any

import msgspec
import numpy as np
import orjson

from ..model.timeline import ContextInfo, DeviceInfo, RunMeta

_HEX = set(string.hexdigits.lower())


def run_id_candidates(fingerprint: str):
    """Short stable ids for a content fingerprint: its first 8 hex chars, longer on a collision."""
    fp = fingerprint.lower()
    digest = fp if len(fp) >= 16 and set(fp) <= _HEX else hashlib.sha256(fingerprint.encode()).hexdigest()
    for n in range(8, len(digest) + 1, 2):
        yield digest[:n]


def _default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


def dumps(obj: Any) -> str:
    return orjson.dumps(
        obj, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
    ).decode()


def loads(text: str) -> Any:
    return orjson.loads(text)


def meta_to_json(meta: RunMeta, extra: dict[str, Any] | None = None) -> str:
    m = msgspec.structs.asdict(meta)
    m.update(ranks=list(meta.ranks), notes=list(meta.notes), stats=dict(meta.stats), extra=dict(meta.extra))
    return dumps({"meta": m, **(extra or {})})


def meta_from_json(text: str) -> tuple[RunMeta, dict[str, Any]]:
    doc = loads(text)
    m = doc.pop("meta")
    kw = {f: m[f] for f in RunMeta.__struct_fields__ if f in m}
    meta = RunMeta(**{**kw, "source": m["source"], "format": m["format"], "ranks": tuple(m.get("ranks", (0,))),
                      "notes": tuple(m.get("notes", ()))})
    return meta, doc


def infos_to_json(infos) -> str:
    return dumps([msgspec.structs.asdict(i) for i in infos])


def devices_from_json(text: str) -> tuple[DeviceInfo, ...]:
    return tuple(DeviceInfo(**d) for d in loads(text))


def contexts_from_json(text: str) -> tuple[ContextInfo, ...]:
    return tuple(ContextInfo(**c) for c in loads(text))


def default_name(meta: RunMeta, source_path: str) -> str:
    """A readable run name: workload/variant[/backend] for recorded runs, else the file's name."""
    if meta.workload:
        parts = [meta.workload, meta.variant, meta.backend, str(meta.extra.get("params_label") or "")]
        return "/".join(p for p in parts if p)
    from pathlib import PurePath

    return PurePath(source_path).name or str(source_path)
