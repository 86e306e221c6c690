"""Issue 30, class 5 (and the option items of class 7): bad options end in one line and exit 2, fast.
`import --scheduler` pointed at an HTTP server hung (still running at 120 s), at a proxy it exited 1
with a 3 EiB MemoryError; `--gap-threshold-us nan/1e308` exited 1, `-5` printed click's 3-line usage;
`import --workers 2` of a directory with a truncated rank printed Dask's "Compute Failed" traceback; a
report to a full disk did not name the file; `--window 2^63-1:2^63` was "empty", not out of range."""

from __future__ import annotations

import gzip
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hostile_util import DATA, cli, one_error_line

ROOT = Path(__file__).resolve().parents[1]
TORCH = DATA / "torch_mixed_small" / "trace.json.gz"


def _proc(db: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tracelab", "--db", str(db), *args],
        capture_output=True, text=True, env=env, timeout=timeout, check=False,
    )


def _one_line(proc: subprocess.CompletedProcess, name: str) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert name in lines[0] and "Traceback" not in proc.stderr
    return lines[0]


def _ranks(root: Path) -> Path:
    d = root / "ranks"
    d.mkdir()
    for r in (0, 1):
        shutil.copyfile(DATA / "ddp" / f"rank{r}.json.gz", d / f"rank{r}.json.gz")
    return d


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def chatty_proxy():
    """A server that greets every connection with an HTTP error page at once (what a proxy does):
    Dask read its first 8 bytes as a 3 EiB frame length."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            try:
                conn.sendall(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            finally:
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"tcp://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    sock.close()


def _closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"tcp://127.0.0.1:{port}"


@pytest.mark.parametrize("server", ["http_server", "chatty_proxy", "closed"])
def test_scheduler_that_is_not_dask_fails_fast_in_one_line(tmp_path, request, server):
    address = _closed_port() if server == "closed" else request.getfixturevalue(server)
    d = _ranks(tmp_path)
    before = sorted(p.name for p in d.iterdir())
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", "import", str(d), "--scheduler", address)
    took = time.monotonic() - t0
    line = one_error_line(res, Path(address.split("//")[1]))
    assert ("Dask" in line) and took < 10, (line, took)
    assert sorted(p.name for p in d.iterdir()) == before


@pytest.mark.parametrize("value", ["nan", "1e308", "-5", "inf", "-0.5", "ten"])
def test_bad_gap_threshold_is_one_line(tmp_path, value):
    res = cli(tmp_path / "s.db", "analyze", str(TORCH), f"--gap-threshold-us={value}")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, (res.exit_code, res.stderr)
    assert "--gap-threshold-us" in lines[0] and "Usage" not in res.stderr


def test_good_gap_threshold_still_counts_gaps(tmp_path):
    import json

    small = json.loads(cli(tmp_path / "s.db", "analyze", str(TORCH), "--json", "--gap-threshold-us", "0").stdout)
    big = json.loads(cli(tmp_path / "s.db", "analyze", str(TORCH), "--json", "--gap-threshold-us", "1e12").stdout)
    assert len(big["gaps"]) == 0 and len(small["gaps"]) > 0


@pytest.mark.parametrize("window", ["9223372036854775807:9223372036854775808", "0:99999999999999999999", "99999999999999999999:"])
def test_window_beyond_any_time_is_out_of_range_not_empty(tmp_path, window):
    res = cli(tmp_path / "s.db", "analyze", str(TORCH), f"--window={window}")
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1, res.stderr
    assert "out of range" in lines[0]


def test_truncated_rank_on_dask_workers_is_one_line(tmp_path):
    d = _ranks(tmp_path)
    data = (d / "rank1.json.gz").read_bytes()
    (d / "rank1.json.gz").write_bytes(data[: len(data) // 3])
    with pytest.raises(EOFError):
        gzip.decompress((d / "rank1.json.gz").read_bytes())  # really truncated
    proc = _proc(tmp_path / "s.db", "import", "--workers", "2", str(d))
    line = _one_line(proc, "rank1.json.gz")
    assert "Compute Failed" not in proc.stderr and "truncated" in line


def _mount_tmpfs(at: Path, size: str) -> bool:
    at.mkdir()
    return os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(at)], capture_output=True, check=False
    ).returncode == 0


@pytest.mark.parametrize("command,name", [("report", "r.html"), ("export", "p.json")])
def test_full_disk_names_the_output_file(tmp_path, command, name):
    full = tmp_path / "full"
    if not _mount_tmpfs(full, "64k"):
        pytest.skip("needs root and tmpfs mounts to make a full disk")
    try:
        res = cli(tmp_path / "s.db", command, str(TORCH), "-o", str(full / name))
        line = one_error_line(res, full / name)
        assert "No space left on device" in line
        assert os.listdir(full) == []  # no temporary file left behind
    finally:
        subprocess.run(["umount", str(full)], capture_output=True, check=False)
