"""Where `tracelab analyze --json` spends its time, per thread: the real command run in this process with
timers around the Kineto reader's steps (inflate, scans, `piece_work`, merges) and the command's phases
(load, analysis, extras, write). Prints, for each (thread, step), the calls, their summed wall and CPU time
(CPU of that thread: waiting for the GIL or a lock is not CPU) and the span from first start to last end:

    python benchmarks/load_timeline.py TRACE [--dump EVENTS.json]

A step whose wall sum is far above its CPU on several threads at once is contending for the GIL (session 8:
four `piece_work` calls side by side took 7-10 ms wall each for ~2 ms of work). `--dump` writes every
call as [thread, step, start_s, end_s, cpu_s] for a closer look. Run it from a directory other than the
trace's (the command creates nothing there, but the habit is the one of the CLI)."""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

EVENTS: list[tuple[str, str, float, float, float]] = []


def _timed(fn: Callable[..., Any], step: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        t, c = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            EVENTS.append((threading.current_thread().name, step, t, time.perf_counter(), time.thread_time() - c))

    return run


def _wrap(owner: Any, attr: str, step: str) -> None:
    if not hasattr(owner, attr):
        raise SystemExit(f"load_timeline: {getattr(owner, '__name__', owner)}.{attr} no longer exists: update _instrument")
    setattr(owner, attr, _timed(getattr(owner, attr), step))


class _TimedDecompress:
    """A decompressor whose `decompress` calls are timed ("inflate"); the rest is the decompressor's."""

    def __init__(self, d: Any) -> None:
        self._d = d
        self.decompress = _timed(d.decompress, "inflate")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._d, name)


class _TimedInflater:
    """The reader's zlib-like module, its decompressors timed."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self.error = module.error

    def decompressobj(self, *args: Any) -> _TimedDecompress:
        return _TimedDecompress(self._module.decompressobj(*args))


def _instrument() -> Callable[[], None]:
    """Timers on the steps; returns the command's `main`."""
    from tracelab import api
    from tracelab.analyses import pipeline
    from tracelab.analyses.ranks import critical_path, path_graph
    from tracelab.api import analysis as api_analysis
    from tracelab.cli import analysis_cmds, common, main
    from tracelab.io.kineto import blocks, comm_args, pieces
    from tracelab.render.export import document

    for owner, attr, step in [
        (pieces, "scan", "scan"), (pieces, "scan_rest", "scan_rest"), (pieces, "piece_work", "piece_work"),
        (pieces, "populate", "populate"), (pieces._Parsed, "_merge", "merge"),
        (pieces._Parsed, "_flush", "flush (wait + merge)"), (pieces._Parsed, "finish", "finish"),
        (blocks.BlockReader, "_next", "next block (wait)"), (comm_args.CommArgs, "feed", "comm_args.feed"),
        (common.api, "load", "LOAD"), (analysis_cmds, "_analyzed", "ANALYZE"), (api, "document_extras", "EXTRAS"),
        (document, "write_document", "WRITE"), (api_analysis, "_projection", "range projection"),
        (path_graph, "per_rank_edges", "per-rank edges"), (critical_path, "start_path", "critical path (early)"),
        (pipeline, "host_views", "host views"), (pipeline, "device_summaries", "device summaries"),
        (pipeline, "step_rows", "step rows"),
    ]:
        _wrap(owner, attr, step)
    blocks._inflater = _TimedInflater(blocks._inflater)
    return main


def _thread_group(name: str) -> str:
    """Pool threads counted together: tracelab-scan_3 -> tracelab-scan, tracelab-analyze-2 -> tracelab-analyze."""
    for pool in ("tracelab-scan", "tracelab-analyze"):
        if name.startswith(pool):
            return pool
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--dump", help="write every timed call to this JSON file")
    args = ap.parse_args()
    t0 = time.perf_counter()
    command = _instrument()
    imported = time.perf_counter()
    sys.argv = ["tracelab", "analyze", "--json", args.trace]
    stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # noqa: SIM115 - the document is not wanted
    try:
        command(prog_name="tracelab", standalone_mode=False)
    finally:
        sys.stdout.close()
        sys.stdout = stdout
    end = time.perf_counter()
    print(f"imports {1e3 * (imported - t0):.0f} ms, command {1e3 * (end - imported):.0f} ms")
    rows: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0, float("inf"), 0.0])
    for thread, step, a, b, cpu in EVENTS:
        r = rows[(_thread_group(thread), step)]
        r[0] += 1
        r[1] += b - a
        r[2] += cpu
        r[3] = min(r[3], a)
        r[4] = max(r[4], b)
    for (thread, step), (n, wall, cpu, a, b) in sorted(rows.items(), key=lambda kv: kv[1][3]):
        print(f"{thread:22s} {step:22s} n={int(n):5d}  wall {1e3 * wall:8.1f} ms  cpu {1e3 * cpu:8.1f} ms  "
              f"span {1e3 * (a - imported):7.1f} .. {1e3 * (b - imported):7.1f} ms")
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump([(th, st, a - imported, b - imported, c) for th, st, a, b, c in EVENTS], f)


if __name__ == "__main__":
    main()
