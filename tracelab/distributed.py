"""Many ranks at once: parse the per-rank files of one run in parallel on Dask.

`tracelab import DIR_OR_GLOB` hands a directory of per-rank traces, or a glob of them
(`'traces/rank*.json.gz'`), to `load_rank_set`:

- one file, `workers=1`, or (without `workers`) a set smaller than `PARALLEL_MIN_BYTES` of JSON:
  parsed here, one after another (no Dask: starting a cluster would cost more than it saves);
- otherwise, without `scheduler`: a local Dask cluster of processes (`distributed.LocalCluster`, one
  single-threaded worker per core unless `workers` says, at most one per file) is started for the
  import and closed after it;
- `scheduler="tcp://HOST:PORT"`: one task per rank file is submitted to that existing Dask scheduler;
  its workers read the files by absolute path, so the path must be shared with them.

Each task parses one file and returns `RankColumns`: the timeline's columns as numpy arrays plus its
string table, lanes, devices and metadata (what pickles compactly), never Python objects per event.
The parts are merged here exactly as the serial directory loader merges them (same ranks, same string
ids, same event order), so the run is the same whichever way it was parsed, and the store import
stays one transaction.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np

from .errors import BadInput, MissingDependency
from .model.timeline import (
    EVENT_COLUMNS,
    LANE_COLUMNS,
    ContextInfo,
    DeviceInfo,
    RunMeta,
    Timeline,
)

if TYPE_CHECKING:
    from .store import Store

Progress = Callable[[int, int], None]
_GLOB_CHARS = frozenset("*?[")


class RankColumns(msgspec.Struct, frozen=True):
    """One parsed rank file in columnar form: what a Dask task sends back."""

    path: str
    events: dict[str, np.ndarray]  # EVENT_COLUMNS (lane included)
    lanes: dict[str, np.ndarray]  # LANE_COLUMNS
    strings: tuple[str, ...]
    devices: tuple[DeviceInfo, ...]
    contexts: tuple[ContextInfo, ...]
    meta: RunMeta
    peak_rss_bytes: int  # the worker's peak resident memory after this task
    worker_pid: int  # the process that parsed it

    @classmethod
    def of(cls, path: str, tl: Timeline) -> RankColumns:
        if tl.sm_blocks is not None:  # only recorded run directories carry probe blocks
            raise BadInput("per-rank files with SM probe data cannot be imported as a rank set", path)
        return cls(
            path=path,
            events={c: tl.events[c].to_numpy() for c in EVENT_COLUMNS},
            lanes={c: tl.lanes[c].to_numpy() for c in LANE_COLUMNS},
            strings=tl.strings,
            devices=tl.devices,
            contexts=tl.contexts,
            meta=tl.meta,
            peak_rss_bytes=peak_rss_bytes(),
            worker_pid=os.getpid(),
        )

    def timeline(self) -> Timeline:
        import pandas as pd

        return Timeline(
            events=pd.DataFrame(self.events, copy=False),
            strings=self.strings,
            lanes=pd.DataFrame(self.lanes, copy=False),
            devices=self.devices,
            meta=self.meta,
            contexts=self.contexts,
        )


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux reports ru_maxrss in KiB)."""
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def parse_rank_file(path: str) -> RankColumns:
    """The Dask task: parse one rank file into columns. Runs in a worker process."""
    from tracelab.io.detect import load_rank_file

    return RankColumns.of(path, load_rank_file(Path(path)))


# ---- what a PATH argument names -------------------------------------------------------------------


def is_glob(spec: str | Path) -> bool:
    s = str(spec)
    return not Path(s).exists() and any(c in s for c in _GLOB_CHARS)


def is_rank_set(spec: str | Path) -> bool:
    """A directory of per-rank traces (not a recorded run directory) or a glob pattern."""
    p = Path(spec)
    return is_glob(spec) or (p.is_dir() and not (p / "meta.json").is_file())


def rank_files(spec: str | Path) -> list[Path]:
    """The trace files a directory or a glob names, in name order; BadInput when there are none."""
    from tracelab.io.detect import check_rank_kinds, rank_files_in

    if not is_glob(spec):
        return rank_files_in(Path(spec))
    files = sorted(Path(p) for p in glob.glob(str(spec)) if Path(p).is_file())
    if not files:
        raise BadInput("no trace files match this pattern", str(spec))
    check_rank_kinds(files, str(spec))
    return files


def rank_set_fingerprint(spec: str | Path) -> str:
    """The content hash of a rank set: a directory's is `trace_fingerprint`'s; a glob's is the sha256 of
    the sorted hashes of the files it matches (the same rule, so a glob of all the files of a
    directory is the same run as the directory)."""
    from tracelab.io.detect import _file_hash, trace_fingerprint

    if not is_glob(spec):
        return trace_fingerprint(spec)
    hashes = sorted(_file_hash(p) for p in rank_files(spec))
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()


# ---- importing ----------------------------------------------------------------------------------------


def import_rank_set(
    spec: str | Path,
    store: Store,
    name: str | None = None,
    *,
    replace: bool = False,
    workers: int | None = None,
    scheduler: str | None = None,
    parse_progress: Progress | None = None,
    store_progress: Progress | None = None,
) -> tuple[str, bool]:
    """Parse a rank set (in parallel as `load_rank_set` says) and save it as one run of `store` in one
    transaction: (run id, newly imported). Content already in the store (same fingerprint) is not parsed
    again: its run id comes back with False, unless `replace`."""
    from .api.runs import store_timeline
    from .errors import DuplicateRun

    fp = rank_set_fingerprint(spec)
    existing = store.find_fingerprint(fp)
    if existing and not replace:
        return existing, False
    timeline = load_rank_set(spec, workers=workers, scheduler=scheduler, progress=parse_progress)
    source = str(spec) if is_glob(spec) else str(Path(spec).absolute())
    try:
        rid = store_timeline(
            timeline, store, source_path=source, fingerprint=fp, name=name, progress=store_progress, replace=replace
        )
    except DuplicateRun as e:  # imported concurrently by another process
        return e.run_id, False
    return rid, True


# ---- parsing ----------------------------------------------------------------------------------------


def load_rank_set(
    spec: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> Timeline:
    """Parse every rank file of a directory or glob and merge them into one multi-rank Timeline.

    `workers`: processes of the local cluster (default: one per core, at most one per file; 1 = serial
    here). `scheduler`: address of an existing Dask scheduler to submit one task per file to instead.
    `progress(done_files, total_files)`."""
    from tracelab.io.detect import merge_rank_parts

    files, parts = parse_rank_set(spec, workers=workers, scheduler=scheduler, progress=progress)
    return merge_rank_parts(str(spec), files, [p.timeline() for p in parts])


def parse_rank_set(
    spec: str | Path,
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    progress: Progress | None = None,
) -> tuple[list[Path], list[RankColumns]]:
    """The files of a rank set and their parsed columns, in file order (see `load_rank_set`)."""
    if workers is not None and workers < 1:
        raise BadInput(f"--workers must be at least 1 (got {workers})")
    files = [f.absolute() for f in rank_files(spec)]
    if scheduler is None and (workers or _default_workers(files)) == 1:
        return files, _parse_serial(files, progress)
    return files, _parse_on_dask(files, workers, scheduler, progress)


# Starting a local cluster of processes costs seconds (measured 3-13 s on a 2-core machine: processes,
# imports, teardown), so without --workers a rank set is parsed in parallel only when its JSON is big
# enough for that to pay: about this many bytes (a gzip file counts 10x its size on disk).
PARALLEL_MIN_BYTES = 512 * 2**20


def _work_bytes(files: Sequence[Path]) -> int:
    return sum(f.stat().st_size * (10 if f.name.lower().endswith(".gz") else 1) for f in files)


def _default_workers(files: Sequence[Path]) -> int:
    """One worker per core, at most one per file; 1 (serial) for one file or a small rank set."""
    if len(files) < 2 or _work_bytes(files) < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, len(files)))


def _parse_serial(files: Sequence[Path], progress: Progress | None) -> list[RankColumns]:
    out = []
    for i, f in enumerate(files):
        out.append(parse_rank_file(str(f)))
        if progress is not None:
            progress(i + 1, len(files))
    return out


def _parse_on_dask(
    files: Sequence[Path], workers: int | None, scheduler: str | None, progress: Progress | None
) -> list[RankColumns]:
    try:
        from distributed import Client, as_completed
    except ImportError as exc:
        raise MissingDependency(f"parallel import needs dask[distributed] ({exc})") from None
    paths = [str(f) for f in files]
    cluster = None
    # dask logs warnings (slow event loop, lost connections) on stderr; tracelab's stderr is for its own
    # one-line messages, so only dask's errors get through while we use it
    quiet = logging.getLogger("distributed")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        if scheduler is None:
            cluster = _local_cluster(min(workers or _default_workers(files), len(files)))
            client = Client(cluster, set_as_default=False)
        else:
            probe_scheduler(scheduler)
            try:
                client = Client(scheduler, timeout="15s", set_as_default=False)
            except (OSError, TimeoutError) as exc:
                raise BadInput(f"cannot reach the Dask scheduler ({exc})", scheduler) from None
        with client:
            pending = as_completed(
                client.map(parse_rank_file, paths, key=[f"tracelab-rank-{_key(p)}" for p in paths]),
                loop=client.loop,
            )
            done: dict[str, RankColumns] = {}
            for future in pending:
                part = future.result()  # a BadInput raised in a worker comes back as itself
                # the worker forgets a rank's columns once they are here, so it holds one file's
                # columns at a time, however many rank files it parses
                future.release()
                done[part.path] = part
                if progress is not None:
                    progress(len(done), len(paths))
    finally:
        if cluster is not None:
            cluster.close()
        quiet.setLevel(level)
    return [done[p] for p in paths]


SCHEDULER_PROBE_S = 3.0  # connect + first bytes of a --scheduler address (TRACELAB_SCHEDULER_PROBE_S)
_MAX_HANDSHAKE = 1 << 20


def probe_scheduler(address: str) -> None:
    """BadInput (one line naming the address) unless a Dask scheduler answers at a tcp:// address
    within SCHEDULER_PROBE_S: a Dask server writes its handshake as soon as a connection opens (an
    8-byte little-endian length, then the frames), so anything else is known at once. Without this an
    HTTP server there made Dask wait forever, and a proxy's reply was read as a 3 EiB frame length
    (MemoryError after 31 s). Other schemes (tls://, ucx://) are left to Dask."""
    import socket
    import struct

    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp"):
        return
    host, _, port_text = rest.rpartition(":") if ":" in rest.rsplit("]", 1)[-1] else (rest, ":", "8786")
    host = host.strip("[]")
    if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise BadInput("not a Dask scheduler address (expected tcp://HOST:PORT)", address)
    try:
        limit = max(0.1, float(os.environ.get("TRACELAB_SCHEDULER_PROBE_S", SCHEDULER_PROBE_S)))
    except ValueError:
        limit = SCHEDULER_PROBE_S
    try:
        sock = socket.create_connection((host, int(port_text)), timeout=limit)
    except OSError as exc:
        raise BadInput(f"cannot reach the Dask scheduler ({exc.strerror or exc})", address) from None
    try:
        sock.settimeout(limit)
        head = b""
        while len(head) < 8:
            block = sock.recv(8 - len(head))
            if not block:
                break
            head += block
    except OSError:  # a timeout: the server waits for a request (HTTP) instead of greeting
        head = b""
    finally:
        sock.close()
    size = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
    if not 8 <= size <= _MAX_HANDSHAKE:
        what = f"it sent {head[:8]!r}" if head else f"it sent nothing within {limit:g} s"
        raise BadInput(f"not a Dask scheduler: no Dask handshake ({what})", address)


def _local_cluster(n_workers: int) -> Any:
    """A LocalCluster of single-threaded worker processes. On Linux they are forked from this process,
    which already holds tracelab, numpy and pandas: measured 1.7-2.4 s from start to close for 2 workers
    on the loaded 2-core machine, against 11-12 s when each worker spawns a fresh interpreter and imports
    everything again (dask's default)."""
    import multiprocessing

    import dask
    from distributed import LocalCluster

    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    options = {"distributed.worker.multiprocessing-method": method} if method else {}
    with dask.config.set(options):
        return LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.CRITICAL,  # a task that fails comes back as its error: no "Compute Failed" log
        )


def _key(path: str) -> str:
    return hashlib.sha1(path.encode()).hexdigest()[:16]


def worker_peak_rss(parts: Sequence[RankColumns]) -> dict[int, int]:
    """Peak RSS of each process that parsed rank files (pid -> bytes), for benchmarks."""
    peaks: dict[int, int] = {}
    for p in parts:
        peaks[p.worker_pid] = max(peaks.get(p.worker_pid, 0), p.peak_rss_bytes)
    return peaks
