"""Many ranks on Dask (tracelab.distributed): a real LocalCluster of processes and a real `dask scheduler`
+ `dask worker` pair on 127.0.0.1 parse the corpus 8-rank DLRM set; the run must equal the serial one,
event for event, and `tracelab import DIR_OR_GLOB --scheduler/--workers` must store the same run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from tracelab import distributed
from tracelab.cli import main
from tracelab.io import load_trace
from tracelab.io.detect import merge_rank_parts
from tracelab.store import Store

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("TRACELAB_CORPUS") or ROOT.parent / "shared" / "corpus")
DLRM = CORPUS / "param" / "dlrm_kineto_8rank"
DASK = Path(sys.executable).with_name("dask")

pytestmark = [
    pytest.mark.corpus,
    pytest.mark.skipif(not DLRM.is_dir(), reason="needs ../shared/corpus"),
]


def assert_same_run(a, b) -> None:
    """Same run content: every event column, the string table, lanes, devices and rank metadata."""
    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.lanes, b.lanes)
    assert a.strings == b.strings
    assert a.devices == b.devices
    assert a.meta.ranks == b.meta.ranks and a.meta.stats == b.meta.stats and a.meta.notes == b.meta.notes


@pytest.fixture(scope="module")
def serial():
    return load_trace(DLRM)


def test_local_cluster_equals_serial(serial):
    files, parts = distributed.parse_rank_set(DLRM, workers=2)
    assert len(files) == 8 and [f.name for f in files] == sorted(f.name for f in DLRM.iterdir())
    # the tasks ran in the cluster's worker processes, not in this one
    peaks = distributed.worker_peak_rss(parts)
    assert os.getpid() not in peaks and 1 <= len(peaks) <= 2 and all(v > 0 for v in peaks.values())
    tl = merge_rank_parts(str(DLRM), files, [p.timeline() for p in parts])
    assert tl.meta.ranks == tuple(range(8)) and len(tl.events) == len(serial.events)
    assert_same_run(serial, tl)


def test_small_sets_are_parsed_here_without_a_cluster(serial):
    # 7 MB of JSON is far below PARALLEL_MIN_BYTES: no cluster is started unless --workers asks for one
    assert sum(f.stat().st_size for f in DLRM.iterdir()) < distributed.PARALLEL_MIN_BYTES
    _, parts = distributed.parse_rank_set(DLRM)
    assert set(distributed.worker_peak_rss(parts)) == {os.getpid()}


def test_glob_is_the_same_run_as_its_directory(serial, tmp_path):
    pattern = str(DLRM / "worker*_step_12.*.json")
    assert distributed.is_rank_set(pattern) and not distributed.is_rank_set(DLRM / "nope.json")
    assert distributed.rank_set_fingerprint(pattern) == distributed.rank_set_fingerprint(DLRM)
    tl = distributed.load_rank_set(pattern, workers=1)
    assert_same_run(serial, tl)
    # a glob of some of the files is another run
    some = str(DLRM / "worker[0-3]_*.json")
    assert distributed.load_rank_set(some, workers=1).meta.ranks == (0, 1, 2, 3)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def dask_scheduler():
    """A real `dask scheduler` and one `dask worker` (two processes) on 127.0.0.1; stopped afterwards."""
    if not DASK.exists():
        pytest.skip(f"no dask command next to {sys.executable}")
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    procs = [
        subprocess.Popen(
            [str(DASK), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        procs.append(
            subprocess.Popen(
                [str(DASK), "worker", address, "--nworkers", "2", "--nthreads", "1", "--no-dashboard"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        from distributed import Client

        deadline = time.monotonic() + 90
        while True:
            try:
                with Client(address, timeout="5s") as c:
                    if len(c.scheduler_info()["workers"]) >= 2:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                pytest.fail("dask scheduler / worker did not start")
            time.sleep(0.5)
        yield address
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def test_scheduler_import_equals_serial_import(dask_scheduler, tmp_path, serial):
    runner = CliRunner()
    db_serial, db_dask = tmp_path / "serial.db", tmp_path / "dask.db"
    a = runner.invoke(main, ["import", str(DLRM), "--workers", "1", "--db", str(db_serial)])
    assert a.exit_code == 0, a.output
    b = runner.invoke(main, ["import", str(DLRM), "--scheduler", dask_scheduler, "--db", str(db_dask)])
    assert b.exit_code == 0, b.output
    rid = a.stdout.strip()
    assert rid == b.stdout.strip()  # same content hash
    with Store(db_serial) as sa, Store(db_dask) as sb:
        ta, tb = sa.load(rid), sb.load(rid)
        assert sa.get_run(rid).ranks == sb.get_run(rid).ranks == tuple(range(8))
    assert_same_run(ta, tb)
    # and the stored run is the parsed one
    pd.testing.assert_frame_equal(ta.events, serial.events)

    # a bad file among the ranks: one line naming it, exit 2, nothing stored
    bad = tmp_path / "ranks"
    shutil.copytree(DLRM, bad)
    (bad / "worker3_step_12.1694128201557.pt.trace.json").write_text('{"traceEvents": [{"ph": "X", "ts": ')
    r = runner.invoke(main, ["import", str(bad), "--scheduler", dask_scheduler, "--db", str(tmp_path / "c.db")])
    assert r.exit_code == 2
    assert "worker3_step_12.1694128201557.pt.trace.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "Traceback" not in r.stderr


def test_cli_local_cluster_and_glob(tmp_path):
    runner = CliRunner()
    db = tmp_path / "t.db"
    r = runner.invoke(main, ["import", str(DLRM / "worker*.json"), "--db", str(db)])
    assert r.exit_code == 0, r.output
    rid = r.stdout.strip()
    # the directory is the same content: already imported
    again = runner.invoke(main, ["import", str(DLRM), "--db", str(db)])
    assert again.exit_code == 0 and again.stdout.strip() == rid and "already imported" in again.stderr
    with Store(db) as s:
        assert s.get_run(rid).ranks == tuple(range(8))


def test_bad_scheduler_and_empty_glob(tmp_path):
    runner = CliRunner()
    port = _free_port()  # nothing listens there
    r = runner.invoke(
        main, ["import", str(DLRM), "--scheduler", f"tcp://127.0.0.1:{port}", "--db", str(tmp_path / "a.db")]
    )
    assert r.exit_code == 2 and f"tcp://127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
    r = runner.invoke(main, ["import", str(tmp_path / "none*.json"), "--db", str(tmp_path / "a.db")])
    assert r.exit_code == 2 and "no trace files match" in r.stderr


def _held_rank_keys(address: str) -> list[str]:
    """The tracelab rank results the scheduler's workers hold in memory right now."""
    from distributed import Client

    with Client(address, timeout="10s", set_as_default=False) as c:
        held = c.run(lambda dask_worker: [str(k) for k in dask_worker.data if str(k).startswith("tracelab-rank-")])
    return sorted(k for keys in held.values() for k in keys)


def test_workers_forget_each_rank_once_it_is_fetched(dask_scheduler, serial):
    """Bounded memory per worker: a worker keeps a parsed rank only until the importer has it, so it
    holds one file's columns at a time, not every file it parsed. When the last rank has arrived
    (inside the import, before the importer's client closes) the workers hold none of them."""
    seen: list[list[str]] = []

    def progress(done: int, total: int) -> None:
        if done == total:
            deadline = time.monotonic() + 15
            while (held := _held_rank_keys(dask_scheduler)) and time.monotonic() < deadline:
                time.sleep(0.2)  # the release reaches the workers asynchronously
            seen.append(held)

    files, parts = distributed.parse_rank_set(DLRM, scheduler=dask_scheduler, progress=progress)
    assert seen == [[]]
    tl = merge_rank_parts(str(DLRM), files, [p.timeline() for p in parts])
    assert_same_run(serial, tl)
