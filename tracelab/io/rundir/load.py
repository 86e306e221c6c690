"""A run directory written by `tracelab record` (or the workload runner) → one Timeline.

Layout: `meta.json` (workload, variant, backend, GPU, versions, parameters, wall time per step,
green-context partitions, PDL kernels, probe metadata), the raw trace named by `meta["trace_file"]`
(`trace.sqlite` / `trace.nsys-rep` for nsys, `trace.json.gz` for torch.profiler) and optionally
`sm_probe.npz` (format: tracelab/workloads/probes.py).

`load_run_dir` loads the trace through `tracelab.io.load_trace`, then applies what only the
run knows:
- RunMeta: backend, workload, variant, gpu, and meta.json under `extra["run"]`;
- devices: SM count and limits from meta.json where the trace has none;
- green contexts for torch traces (Kineto does not record them): the stream on which a partition's
  marker kernel (`tl_probe_large_partition` / `tl_probe_small_partition`) ran is that partition's
  stream; its GPU events get the partition's green-context id (the driver's context id, the same
  id nsys reports) and a ContextInfo with the partition's SM count is added. For nsys traces the
  parser's contexts are kept and only missing SM counts are filled in;
- the PDL flag on kernels the workload launched with PDL (`meta["pdl_kernels"]`);
- `sm_blocks` from the probe file: the k-th trace kernel (by start) with the probed kernel's name is
  invocation k; each invocation is shifted by `trace start - earliest probe t_start`. Column `kernel`
  is the row of that kernel event in the returned `Timeline.events` (-1 when unknown).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from tracelab.errors import BadInput, TraceFormatError
from tracelab.model import EVENT_COLUMNS, ContextInfo, DeviceInfo, EventKind, Flag, Timeline, build_timeline
from tracelab.model.sm_blocks import SM_BLOCK_COLUMNS
from tracelab.workload_params import WORKLOAD_PARAMS

META_FILE = "meta.json"
TRACE_CANDIDATES = ("trace.sqlite", "trace.json.gz", "trace.json", "trace.nsys-rep")
# the model's SM block columns and the kernel each probe record names (its row in the events; -1 unknown)
PROBE_BLOCK_COLUMNS = {**SM_BLOCK_COLUMNS, "kernel": "int64"}


def read_meta(path: str | Path) -> dict[str, Any]:
    p = Path(path) / META_FILE
    try:
        meta = json.loads(p.read_text())
    except FileNotFoundError:
        raise BadInput("not a tracelab run directory (no meta.json)", Path(path)) from None
    except (OSError, ValueError, UnicodeDecodeError, RecursionError) as e:
        raise TraceFormatError(f"meta.json is not valid JSON ({e.__class__.__name__})", p) from None
    if not isinstance(meta, dict):
        raise TraceFormatError("meta.json must hold a JSON object", p)
    check_meta(meta, p)
    return meta


_META_TYPES: dict[str, tuple[type, ...]] = {
    "trace_file": (str,),
    "backend": (str,),
    "workload": (str,),
    "variant": (str,),
    "gpu": (dict,),
    "partitions": (list,),
    "pdl_kernels": (list,),
    "probe": (dict,),
    "params": (dict,),
}
_GPU_INTS = (
    "sm_count",
    "total_memory",
    "max_threads_per_multi_processor",
    "regs_per_multiprocessor",
    "shared_memory_per_multiprocessor",
    "shared_memory_per_block_optin",
    "warp_size",
)
_CC = re.compile(r"\d{1,3}(\.\d{1,3})?")


def _is_count(v: object, limit: int = 1 << 31, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < limit


def check_meta(meta: dict[str, Any], p: Path) -> None:
    """The fields of meta.json tracelab uses have the types it expects (a run directory can come from
    anywhere); anything else refuses the directory in one line naming the field."""

    def bad(field: str, what: str) -> TraceFormatError:
        return TraceFormatError(f"meta.json: {field} is not {what}", p)

    for key, types in _META_TYPES.items():
        if meta.get(key) is not None and not isinstance(meta[key], types):
            raise bad(key, f"a JSON {'object' if types == (dict,) else 'array' if types == (list,) else 'string'}")
    gpu = meta.get("gpu") or {}
    for key in _GPU_INTS:
        if gpu.get(key) is not None and not _is_count(gpu[key], 1 << 63 if key == "total_memory" else 1 << 31):
            raise bad(f"gpu.{key}", "a non-negative integer in range")
    if gpu.get("name") is not None and not isinstance(gpu["name"], str):
        raise bad("gpu.name", "a string")
    if gpu.get("cc") is not None and not (isinstance(gpu["cc"], str) and _CC.fullmatch(gpu["cc"])):
        raise bad("gpu.cc", 'a compute capability such as "9.0"')
    for i, part in enumerate(meta.get("partitions") or []):
        if not isinstance(part, dict):
            raise bad(f"partitions[{i}]", "a JSON object")
        if part.get("sm_count") is not None and not _is_count(part["sm_count"]):
            raise bad(f"partitions[{i}].sm_count", "a non-negative integer in range")
        if part.get("context_id") is not None and not _is_count(part["context_id"], 1 << 63, -1):
            raise bad(f"partitions[{i}].context_id", "an integer in range")
        for key in ("marker", "name"):
            if part.get(key) is not None and not isinstance(part[key], str):
                raise bad(f"partitions[{i}].{key}", "a string")
    if any(not isinstance(k, str) for k in meta.get("pdl_kernels") or []):
        raise bad("pdl_kernels", "a list of kernel names")
    probe = meta.get("probe") or {}
    if probe.get("file") is not None and not isinstance(probe["file"], str):
        raise bad("probe.file", "a string")
    names = probe.get("trace_names")
    if names is not None and not (isinstance(names, dict) and all(isinstance(v, str) for v in names.values())):
        raise bad("probe.trace_names", "an object of names")


def trace_path(path: str | Path, meta: dict[str, Any]) -> Path:
    d = Path(path)
    names = [meta["trace_file"]] if isinstance(meta.get("trace_file"), str) else []
    for name in (*names, *TRACE_CANDIDATES):
        cand = d / Path(name).name  # never leave the run directory
        if cand.is_symlink() and not _inside(cand, d):  # nor through a symlink
            raise BadInput(
                f"{cand.name} is a symlink to {os.readlink(cand)}, outside the run directory: refused "
                "(a run directory's trace lives in it)",
                d,
            )
        if cand.is_file():
            return cand
        if name in names and cand.is_dir() and not cand.is_symlink():  # per-rank traces of a multi-GPU run
            return cand
    raise BadInput(
        f"run directory holds no trace file (looked for {', '.join(names or TRACE_CANDIDATES)})", d
    )


def _inside(p: Path, d: Path) -> bool:
    try:
        return p.resolve().is_relative_to(d.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        return False


_OTHER_TRACES = (".json", ".json.gz", ".json.zst", ".sqlite", ".sqlite.gz", ".nsys-rep", ".qdrep")
# what tracelab record writes beside a trace: per-rank metadata, the program's own metadata
_RUN_SIDE_FILES = re.compile(r"^(meta_rank\d+|program_meta(_rank\d+)?)\.json$")


def _unread_traces_note(d: Path, chosen: Path) -> list[str]:
    """A note naming the other trace files beside the one a run directory's trace is read from (a run
    holding both trace.json.gz and trace.sqlite is read from one of them; the other is not merged)."""
    others = sorted(
        p.name
        for p in d.iterdir()
        if p.name != chosen.name and p.name != META_FILE and not p.name.startswith(".")
        and p.name.lower().endswith(_OTHER_TRACES) and not _RUN_SIDE_FILES.match(p.name)
    )
    if not others:
        return []
    shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return [f"run directory also holds {shown}: not read (the run's trace is {chosen.name})"]


def run_dir_timeline(d: Path, meta: dict[str, Any], chosen: Path, tl: Timeline) -> Timeline:
    """A run directory as one Timeline: its trace `tl` (read from `chosen`, `trace_path(d, meta)`) with what
    meta.json and the probe file add (tracelab.io.detect.load_run_dir reads the trace)."""
    notes = _unread_traces_note(d, chosen) + list(tl.meta.notes)
    devices = _devices(tl, meta)
    contexts = list(tl.contexts)
    ev = tl.events
    strings = tl.strings
    name_ids = {s: i for i, s in enumerate(strings)}

    # green contexts the trace does not know about (torch.profiler)
    ev, contexts, changed = _green_partitions(ev, meta, name_ids, contexts, notes)

    pdl_ids = [name_ids[n] for n in meta.get("pdl_kernels") or [] if n in name_ids]
    if pdl_ids:
        mask = (ev["kind"].to_numpy() == int(EventKind.KERNEL)) & np.isin(ev["name"].to_numpy(), pdl_ids)
        flags = ev["flags"].to_numpy()
        if (flags[mask] & Flag.PDL != Flag.PDL).any():
            ev = ev.copy() if not changed else ev
            ev["flags"] = np.where(mask, flags | Flag.PDL, flags).astype(flags.dtype)
            changed = True

    # block -> kernel rows are positions in `ev`; the rebuild below keeps them (ev is sorted by start,
    # so build_timeline does not reorder)
    sm_blocks, probe_notes, overhead = _probe_blocks(d, meta, ev, strings)
    notes += probe_notes
    extra = dict(tl.meta.extra)
    extra["run"] = meta
    changed_params = _non_default_params(meta)
    if changed_params:
        extra["params_label"] = changed_params
    if overhead:
        extra["probe_overhead_in_trace"] = overhead
    gpu = meta.get("gpu") or {}
    run_meta = msgspec.structs.replace(
        tl.meta,
        source=str(d),
        backend=str(meta.get("backend") or tl.meta.backend),
        workload=str(meta.get("workload") or ""),
        variant=str(meta.get("variant") or ""),
        gpu=str(gpu.get("name") or tl.meta.gpu),
        notes=tuple(notes),
        extra=extra,
    )
    if changed or devices != list(tl.devices) or contexts != list(tl.contexts):
        cols = {c: ev[c].to_numpy() for c in EVENT_COLUMNS if c != "lane"}
        return build_timeline(
            cols, strings, run_meta, devices=devices, contexts=contexts, sm_blocks=sm_blocks
        )
    return dataclasses.replace(tl, meta=run_meta, sm_blocks=sm_blocks)


def _green_partitions(
    ev: Any, meta: dict[str, Any], name_ids: dict[str, int], contexts: list, notes: list[str]
) -> tuple[Any, list, bool]:
    """The green-context partitions of meta.json marked on the streams of their marker kernels:
    (events, contexts, whether the events changed); a marker not in the trace is said in `notes`."""
    changed = False
    green_parts = [p for p in meta.get("partitions") or [] if p.get("green")]
    if not green_parts:
        return ev, contexts, changed
    gc = ev["green_context"].to_numpy().copy()
    for i, part in enumerate(green_parts):
        marker = name_ids.get(str(part.get("marker", "")))
        if marker is None:
            notes.append(f"green-context partition {part.get('name')}: marker kernel not in the trace")
            continue
        on = (ev["kind"].to_numpy() == int(EventKind.KERNEL)) & (ev["name"].to_numpy() == marker)
        keys = ev.loc[on, ["rank", "device", "stream"]].drop_duplicates()
        for rank, dev, stream in keys.itertuples(index=False):
            sel = (
                (ev["rank"].to_numpy() == rank)
                & (ev["device"].to_numpy() == dev)
                & (ev["stream"].to_numpy() == stream)
            )
            existing = gc[sel & (gc >= 0)]
            if len(existing):
                gid = int(np.bincount(existing - existing.min()).argmax() + existing.min())
            else:
                gid = int(part.get("context_id", -1))
                gid = gid if gid >= 0 else 1_000_000 + i
                gc[sel] = gid
                changed = True
            contexts = _with_green(contexts, int(rank), int(dev), gid, int(part.get("sm_count", 0)))
    if changed:
        ev = ev.copy()
        ev["green_context"] = gc
    return ev, contexts, changed


def _devices(tl: Timeline, meta: dict[str, Any]) -> list[DeviceInfo]:
    gpu = meta.get("gpu") or {}
    out = []
    for d in tl.devices:
        fill: dict[str, Any] = {}
        if not d.sm_count and gpu.get("sm_count"):
            fill["sm_count"] = int(gpu["sm_count"])
        if not d.name and gpu.get("name"):
            fill["name"] = str(gpu["name"])
        if not d.cc_major and gpu.get("cc"):
            major, _, minor = str(gpu["cc"]).partition(".")
            fill.update(cc_major=int(major or 0), cc_minor=int(minor or 0))
        for attr, key in (
            ("max_threads_per_sm", "max_threads_per_multi_processor"),
            ("registers_per_sm", "regs_per_multiprocessor"),
            ("shared_mem_per_sm", "shared_memory_per_multiprocessor"),
            ("max_shared_mem_per_block", "shared_memory_per_block_optin"),
            ("total_memory", "total_memory"),
        ):
            if not getattr(d, attr) and gpu.get(key):
                fill[attr] = int(gpu[key])
        out.append(msgspec.structs.replace(d, **fill) if fill else d)
    return out


def _with_green(
    contexts: list[ContextInfo], rank: int, device: int, gid: int, sm_count: int
) -> list[ContextInfo]:
    out = []
    found = False
    for c in contexts:
        if (
            c.rank == rank
            and c.device == device
            and (c.green_context == gid or (c.is_green and c.context == gid))
        ):
            found = True
            if not c.sm_count and sm_count:
                c = msgspec.structs.replace(c, sm_count=sm_count)
        out.append(c)
    if not found:
        out.append(
            ContextInfo(
                rank=rank, device=device, context=gid, is_green=True, green_context=gid, sm_count=sm_count
            )
        )
    return out


def _probe_blocks(d: Path, meta: dict[str, Any], ev: pd.DataFrame, strings: tuple[str, ...]):
    """sm_blocks aligned to the trace clock, notes, and the probe overhead seen in the trace."""
    probe = meta.get("probe") or {}
    f = d / Path(str(probe.get("file") or "sm_probe.npz")).name
    if not f.is_file():
        return None, [], {}
    try:
        with np.load(f, allow_pickle=False) as z:
            arr = {k: z[k] for k in z.files}
        need = ("kernel", "invocation", "smid", "t_start", "t_end", "names")
        if any(k not in arr for k in need):
            raise ValueError("missing arrays")
    except Exception as e:  # noqa: BLE001 - any unreadable probe file is the same user problem
        raise TraceFormatError(f"probe file is not a tracelab sm_probe.npz ({e})", f) from None
    names = [str(n) for n in arr["names"]]
    trace_names = probe.get("trace_names") or {}
    name_ids = {s: i for i, s in enumerate(strings)}
    kinds = ev["kind"].to_numpy()
    frames = []
    notes: list[str] = []
    overhead: dict[str, Any] = {}
    for k, key in enumerate(names):
        tname = trace_names.get(key, key)
        sid = name_ids.get(tname)
        rows = arr["kernel"] == k
        if sid is None:
            notes.append(f"probe data for {tname!r} but no such kernel in the trace")
            continue
        pos = np.flatnonzero((kinds == int(EventKind.KERNEL)) & (ev["name"].to_numpy() == sid))
        pos = pos[np.argsort(ev["start"].to_numpy()[pos], kind="stable")]  # rows of ev, by start
        kev = ev.iloc[pos]
        starts = kev["start"].to_numpy()
        inv = arr["invocation"][rows]
        t0 = arr["t_start"][rows]
        t1 = arr["t_end"][rows]
        sm = arr["smid"][rows]
        ok = (inv < len(starts)) & (t0 > 0) & (t1 >= t0)
        if (~ok).any():
            notes.append(f"{int((~ok).sum())} probe rows of {tname!r} could not be aligned")
        inv, t0, t1, sm = inv[ok], t0[ok], t1[ok], sm[ok]
        if not len(inv):
            continue
        uniq, first = np.unique(inv, return_inverse=True)
        min_t0 = np.full(len(uniq), np.iinfo(np.int64).max)
        np.minimum.at(min_t0, first, t0)
        offset = starts[uniq] - min_t0
        frames.append(
            pd.DataFrame(
                {
                    "rank": kev["rank"].to_numpy()[inv].astype("int32"),
                    "device": kev["device"].to_numpy()[inv].astype("int32"),
                    "green_context": kev["green_context"].to_numpy()[inv].astype("int64"),
                    "sm": sm.astype("int32"),
                    "start": (t0 + offset[first]).astype("int64"),
                    "end": (t1 + offset[first]).astype("int64"),
                    "name": np.full(len(inv), sid, dtype="int32"),
                    "kernel": pos[inv].astype("int64"),
                }
            )
        )
        dur = (kev["end"] - kev["start"]).to_numpy()
        probed = np.zeros(len(dur), dtype=bool)
        probed[uniq] = True
        if probed.any() and (~probed).any():
            a, b = float(np.median(dur[~probed])), float(np.median(dur[probed]))
            overhead[tname] = {
                "plain_median_ns": a,
                "probed_median_ns": b,
                "overhead_pct": round(100.0 * (b - a) / a, 2) if a else None,
                "probed_invocations": int(probed.sum()),
                "plain_invocations": int((~probed).sum()),
            }
    if not frames:
        return None, notes, overhead
    blocks = pd.concat(frames, ignore_index=True).sort_values("start", kind="stable").reset_index(drop=True)
    return blocks.astype(PROBE_BLOCK_COLUMNS), notes, overhead


def _non_default_params(meta: dict) -> str:
    """'matmul=triton' for a run recorded with parameters other than its workload's defaults (at the
    size it was recorded with), so two such runs get different names; '' otherwise."""
    params = meta.get("params")
    if not isinstance(params, dict) or not meta.get("workload"):
        return ""
    try:
        defaults = WORKLOAD_PARAMS[str(meta["workload"])].defaults(bool(meta.get("quick")))
    except (KeyError, TypeError, ValueError):  # an unknown or newer workload: no label, no failed import
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted(params.items()) if k in defaults and defaults[k] != v)
