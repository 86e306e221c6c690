"""Cross-table links after all rows are read: processes kept apart, host launches matched to GPU work
by correlationId (orphans, CUDA-graph launches, Programmatic Dependent Launch)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracelab.io.nsys.db import quote_ident
from tracelab.io.nsys.strings import NsysStrings
from tracelab.io.nsys.util import distinct
from tracelab.model import EventKind, Flag
from tracelab.model.grouping import any_of

_GRAPH_LAUNCH = re.compile(r"^(cuda|cu)GraphLaunch", re.IGNORECASE)
_EX_LAUNCH = re.compile(r"^(cuda|cu)LaunchKernelEx", re.IGNORECASE)
_API_KINDS = (int(EventKind.RUNTIME), int(EventKind.DRIVER))


def separate_processes(cols: dict[str, np.ndarray], gpu: np.ndarray, processes: np.ndarray | None = None) -> list[str]:
    """CUPTI correlation ids (and context ids) are per process. With several processes in one
    export, correlation becomes (process index << 32) | correlationId so that a join on
    correlation alone never pairs a launch with another process's kernel; contexts that two
    processes number alike on one GPU get the same prefix. `processes`: the distinct globalPids
    (>= 0) of cols["_gpid"] when the caller has them."""
    notes: list[str] = []
    gpid = cols["_gpid"]
    procs = distinct(gpid[gpid >= 0]) if processes is None else processes
    if len(procs) <= 1:
        return notes
    index = np.searchsorted(procs, gpid)
    ok = (gpid >= 0) & (cols["correlation"] >= 0)
    cols["correlation"] = np.where(ok, (index.astype(np.int64) << 32) | cols["correlation"], cols["correlation"])
    on_gpu = (cols["device"] >= 0) & (gpid >= 0) & (gpu | (cols["kind"] == int(EventKind.SYNC)))
    if on_gpu.any():
        keys = pd.DataFrame({"rank": cols["rank"][on_gpu], "device": cols["device"][on_gpu],
                             "context": cols["context"][on_gpu], "gpid": gpid[on_gpu]}).drop_duplicates()
        shared = keys.groupby(["rank", "device", "context"])["gpid"].transform("nunique") > 1
        if shared.any():
            clash = keys[shared]
            rows = pd.MultiIndex.from_arrays([cols["rank"], cols["device"], cols["context"]]).isin(
                pd.MultiIndex.from_frame(clash[["rank", "device", "context"]])) & on_gpu
            cols["context"] = np.where(rows, ((index.astype(np.int64) + 1) << 32) | cols["context"], cols["context"])
            notes.append("several processes use the same CUDA context ids on one GPU: their contexts are shown "
                         "as (process index + 1) << 32 | contextId")
    return notes


def _ids_matching(strings: tuple[str, ...], ids: np.ndarray, pattern: re.Pattern[str]) -> np.ndarray:
    uniq = distinct(ids[ids >= 0])
    return np.array([i for i in uniq.tolist() if pattern.search(strings[i])], dtype=np.int64)


def _pdl_overlap(cols: dict[str, np.ndarray], kernels: np.ndarray) -> np.ndarray:
    """Kernels that start before an earlier kernel of the same stream has ended: on one stream only
    Programmatic Dependent Launch lets that happen."""
    idx = np.flatnonzero(kernels)
    out = np.zeros(len(kernels), dtype=bool)
    if len(idx) < 2:
        return out
    df = pd.DataFrame({"r": cols["rank"][idx], "d": cols["device"][idx], "c": cols["context"][idx],
                       "s": cols["stream"][idx], "start": cols["start"][idx], "end": cols["end"][idx], "i": idx,
                       }).sort_values(["r", "d", "c", "s", "start"], kind="stable")
    keys = ["r", "d", "c", "s"]
    df["run_end"] = df.groupby(keys, sort=False)["end"].cummax()
    prev_end = df.groupby(keys, sort=False)["run_end"].shift(1)
    hit = (df["start"] < prev_end).to_numpy()
    out[df["i"].to_numpy()[hit]] = True
    return out


def link_host_and_gpu(
    cols: dict[str, np.ndarray], strings: NsysStrings, gpu: np.ndarray, has_api: bool
) -> tuple[dict[str, int], list[str]]:
    notes: list[str] = []
    kind = cols["kind"]
    corr = cols["correlation"]
    flags = cols["flags"]
    api = any_of(kind, _API_KINDS) & (corr >= 0)
    orphan = gpu.copy()
    if api.any():  # GPU work whose correlation id no launch carries (looked up for the GPU rows only)
        rows = np.flatnonzero(gpu)
        orphan[rows] = ~np.isin(corr[rows], corr[api])
    flags[orphan] |= Flag.ORPHAN
    n_orphan = int(orphan.sum())
    if has_api and n_orphan:
        notes.append(f"{n_orphan} GPU operations have no matching CUDA API launch (correlationId)")

    table = strings.strings
    names = cols["name"]
    graph_ids = _ids_matching(table, names[api], _GRAPH_LAUNCH)
    if len(graph_ids):
        graph_corr = corr[api & np.isin(names, graph_ids)]
        flags[gpu & np.isin(corr, graph_corr)] |= Flag.GRAPH

    kernels = kind == int(EventKind.KERNEL)
    ex_ids = _ids_matching(table, names[api], _EX_LAUNCH)
    if len(ex_ids):
        ex_corr = corr[api & np.isin(names, ex_ids)]
        pdl = kernels & np.isin(corr, ex_corr) & _pdl_overlap(cols, kernels)
        flags[pdl] |= Flag.PDL
    cols["flags"] = flags
    stats = {"orphan_gpu_events": n_orphan, "graph_gpu_events": int(((flags & Flag.GRAPH) != 0)[gpu].sum()),
             "pdl_kernels": int(((flags & Flag.PDL) != 0).sum()), "comm_kernels": int(((flags & Flag.COMM) != 0)[kernels].sum())}
    return stats, notes


GRAPH_TABLES = ("CUDA_GRAPH_NODE_EVENTS", "CUDA_GRAPH_EVENTS")


def fill_graph_ids(db, cols: dict[str, np.ndarray]) -> None:
    """graph_id for graph-node work from the graph creation tables (graphNodeId -> graphId), for
    exports whose activity tables have no graphId column. Looks up each distinct node once."""
    node = cols["graph_node"]
    todo = (node > 0) & (cols["graph_id"] < 0)
    if not todo.any():
        return
    mapping: dict[int, int] = {}
    for table in GRAPH_TABLES:
        if not db.has(table, "graphNodeId", "graphId"):
            continue
        extra = ', "originalGraphNodeId"' if "originalGraphNodeId" in db.columns(table) else ""  # a constant
        for row in db.rows(
            f'SELECT DISTINCT "graphNodeId", "graphId"{extra} FROM {quote_ident(table)} WHERE "graphId" IS NOT NULL'
        ):
            for nid in row[:1] + row[2:]:
                if isinstance(nid, int) and isinstance(row[1], int):
                    mapping.setdefault(nid, row[1])
    if not mapping:
        return
    keys = np.array(sorted(mapping), dtype=np.int64)
    vals = np.array([mapping[k] for k in keys.tolist()], dtype=np.int64)
    pos = np.clip(np.searchsorted(keys, node), 0, len(keys) - 1)
    hit = todo & (keys[pos] == node)
    cols["graph_id"] = np.where(hit, vals[pos], cols["graph_id"])
