"""A run's rows of the SQL views (tracelab/store/sql.py documents the columns): columns as lists, from the
timeline and its analysis, vectorized where the view is per event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from tracelab.analyses.results import CAUSES, Analysis, GapTable
from tracelab.model.kinds import EventKind, Flag
from tracelab.model.timeline import Timeline

_KIND_NAMES = np.array([k.name.lower() for k in EventKind] + ["other"], dtype=object)


def _names(tl: Timeline, ids: np.ndarray) -> list[Any]:
    strings = np.array(list(tl.strings) + [None], dtype=object)
    ids = np.where((ids >= 0) & (ids < len(tl.strings)), ids, len(tl.strings))
    return strings[ids].tolist()


def event_rows(run_id: str, tl: Timeline) -> dict[str, list[Any]]:
    n = tl.n_events
    c = tl.col
    start, end = c("start").astype(np.int64), c("end").astype(np.int64)
    kind = c("kind").astype(np.int64)
    return {
        "run_id": [run_id] * n, "seq": list(range(n)),
        "kind": _KIND_NAMES[np.clip(kind, 0, len(_KIND_NAMES) - 1)].tolist(), "name": _names(tl, c("name")),
        "category": _names(tl, c("category")), "start_ns": start.tolist(), "end_ns": end.tolist(),
        "duration_ns": (end - start).tolist(),
        **{k: c(k).tolist() for k in ("rank", "device", "stream", "pid", "tid", "correlation", "bytes", "flags")},
    }


def kernel_rows(run_id: str, tl: Timeline) -> dict[str, list[Any]]:
    rows = np.flatnonzero(tl.col("kind") == EventKind.KERNEL)
    c = tl.col
    start, end = c("start")[rows].astype(np.int64), c("end")[rows].astype(np.int64)
    out: dict[str, list[Any]] = {"run_id": [run_id] * rows.size, "seq": rows.tolist(), "name": _names(tl, c("name")[rows]),
                                 "start_ns": start.tolist(), "end_ns": end.tolist(), "duration_ns": (end - start).tolist()}
    for k in ("rank", "device", "context", "green_context", "stream", "correlation", "grid_x", "grid_y", "grid_z",
              "block_x", "block_y", "block_z", "registers", "shared_mem", "graph_id"):
        out[k] = c(k)[rows].tolist()
    out["comm"] = ((c("flags")[rows] & Flag.COMM) != 0).astype(np.int64).tolist()
    return out


def gap_rows(run_id: str, an: Analysis, evidence: Sequence[str]) -> dict[str, list[Any]]:
    gaps = GapTable.of(an.gaps)  # an analysis' gaps are a GapTable: columns, no Gap objects
    col = gaps.column
    start, end = col("start").astype(np.int64), col("end").astype(np.int64)
    ls = col("launch_start").astype(np.int64)
    return {"run_id": [run_id] * len(gaps), "rank": col("rank").tolist(), "device": col("device").tolist(),
            "start_ns": start.tolist(), "end_ns": end.tolist(), "duration_ns": (end - start).tolist(),
            "cause": [CAUSES[k] for k in col("cause").tolist()], "evidence": list(evidence),
            "host_data": [gaps.host_data_labels[k] for k in col("host_data").tolist()],
            "launch_start_ns": [x if x >= 0 else None for x in ls.tolist()],
            "host_active_fraction": col("host_active").tolist()}


def step_rows(run_id: str, an: Analysis) -> dict[str, list[Any]]:
    rows = {(r.rank, r.index): r for r in an.step_rows}
    out: dict[str, list[Any]] = {c: [] for c in ("run_id", "rank", "step", "source", "start_ns", "end_ns", "duration_ns",
                                                 "gpu_busy_ns", "gpu_idle_ns", "kernels", "blocking_syncs", "warmup",
                                                 "outlier")}
    for s in an.steps:
        r = rows.get((s.rank, s.index))
        vals = (run_id, s.rank, s.index, s.source, s.start_ns, s.end_ns, s.end_ns - s.start_ns,
                r.gpu_busy_ns if r else None, r.gpu_idle_ns if r else None, r.kernels if r else None,
                r.blocking_syncs if r else None, int(r.warmup) if r else None, int(r.outlier) if r else None)
        for k, v in zip(out, vals, strict=True):
            out[k].append(v)
    return out


def finding_rows(run_id: str, an: Analysis) -> dict[str, list[Any]]:
    fs = an.findings
    return {
        "run_id": [run_id] * len(fs),
        **{k: [getattr(f, k) for f in fs] for k in ("rule", "severity", "count", "wasted_ns", "message")},
        "location": [f.where for f in fs],
        "data": [orjson.dumps(f.data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY).decode() for f in fs],
    }


def range_rows(run_id: str, tl: Timeline) -> dict[str, list[Any]]:
    from tracelab.analyses.device.range_projection import project_ranges

    p = project_ranges(tl, keep_instances=True)
    r = p.rows
    c = tl.col
    has = p.gpu_ops > 0
    return {
        "run_id": [run_id] * r.size, "seq": r.tolist(),
        "kind": np.where(c("kind")[r] == EventKind.CPU_OP, "cpu_op", "nvtx").tolist(),
        "name": _names(tl, c("name")[r]), "rank": c("rank")[r].tolist(), "pid": c("pid")[r].tolist(),
        "tid": c("tid")[r].tolist(), "depth": p.depth.tolist(), "start_ns": c("start")[r].tolist(),
        "end_ns": c("end")[r].tolist(), "gpu_ops": p.gpu_ops.tolist(),
        "gpu_start_ns": [int(x) if h else None for x, h in zip(p.gpu_start.tolist(), has.tolist(), strict=True)],
        "gpu_end_ns": [int(x) if h else None for x, h in zip(p.gpu_end.tolist(), has.tolist(), strict=True)],
        "gpu_ns": p.gpu_ns.tolist(), "kernel_ns": p.kernel_ns.tolist(),
    }


def collective_rows(run_id: str, tl: Timeline) -> dict[str, list[Any]]:
    from tracelab.analyses.ranks.collectives import match_collectives

    calls = match_collectives(tl).calls
    columns = {"name": "name", "seq": "seq", "participants": "count", "ranks": "ranks"}  # column: Collective field
    columns |= {k: k for k in ("start_ns", "last_start_ns", "end_ns", "skew_ns", "last_rank", "wait_ns")}
    out: dict[str, list[Any]] = {"run_id": [run_id] * len(calls)}
    out |= {col: [getattr(k, f) for k in calls] for col, f in columns.items()}
    out["ranks"] = [",".join(map(str, r)) for r in out["ranks"]]
    return out
