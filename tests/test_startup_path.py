"""The parts of `tracelab analyze`'s start-up path: the gzip block reader, the `tracelab` command's
output, numpy loaded with one BLAS thread, and the numpy-only helpers
that replace np.unique / np.isin on that path. Each is checked against the reference it
replaces (gzip, np.unique, np.isin) on real data or many random cases."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from tl_hygiene import CORPUS

from tracelab.cli import main
from tracelab.io.kineto import blocks as block_reader
from tracelab.io.kineto.blocks import BlockReader, ChunkError
from tracelab.model.grouping import member, sorted_unique

SMALL_TRACE = CORPUS / "hta" / "critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"
ROOT = Path(__file__).resolve().parents[1]


def _read_all(path: Path, block: int = 1 << 16) -> bytes:
    r = BlockReader(path, block)
    out = []
    try:
        while data := r.read():
            assert len(data) <= block
            out.append(data)
    finally:
        r.close()
    return b"".join(out)


def _payload(n: int = 300_000) -> bytes:
    rng = np.random.default_rng(7)
    words = [b"kernel", b"memcpy", b'"name"', b"\\u00e9", b"{", b"}", b"0.5", b"stream 7"]
    return b" ".join(words[i] for i in rng.integers(0, len(words), n))


@pytest.fixture(params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Each block-reader test runs with ISA-L's inflater (the dependency) and with the stdlib's zlib
    (the fallback where isal has no wheel)."""
    if request.param == "zlib":
        monkeypatch.setattr(block_reader, "_inflater", zlib)
    else:
        assert block_reader._inflater is not zlib, "isal is a dependency (pyproject.toml)"
    return request.param


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda d: gzip.compress(d), id="one member"),
        pytest.param(lambda d: gzip.compress(d[: 3 << 16]) + gzip.compress(d[3 << 16 :]), id="member ends with a block"),
        pytest.param(lambda d: gzip.compress(d[:1000]) + gzip.compress(d[1000:]), id="two members"),
        pytest.param(lambda d: gzip.compress(d) + b"\x00" * 5000, id="zero padding"),
        pytest.param(lambda d: gzip.compress(d[:7]) + b"\x00" * 3 + gzip.compress(d[7:]), id="padding between"),
        pytest.param(lambda d: gzip.compress(b"") + gzip.compress(d), id="empty first member"),
        pytest.param(lambda d: d, id="plain"),
    ],
)
def test_block_reader_gives_what_gzip_gives(tmp_path, make, inflater):
    data = _payload()
    p = tmp_path / "t.json.gz"
    p.write_bytes(make(data))
    assert _read_all(p) == data
    assert _read_all(p, block=4 << 20) == data
    assert _read_all(p, block=len(data)) == data  # one block exactly
    small = tmp_path / "small.json.gz"
    small.write_bytes(make(data[:5000]))
    assert _read_all(small, block=1) == data[:5000]  # one byte a block


@pytest.mark.corpus
def test_block_reader_reads_a_real_trace_like_gzip(inflater):
    assert _read_all(SMALL_TRACE) == gzip.decompress(SMALL_TRACE.read_bytes())


@pytest.mark.parametrize("compress", [gzip.compress, lambda d: d], ids=["gzip", "plain"])
def test_read_after_joins_the_tail_and_the_next_block(tmp_path, compress, inflater):
    """`read_after(buf, start)`: the tail buf[start:] + the next block, whatever the tail's length; a tail that fits the block's
    headroom is written into it (the block's own buffer comes back, not a copy): a plain file's block and an inflated
    one (copied into a buffer with headroom on the reading thread) alike."""
    data = _payload()
    p = tmp_path / "t.json"
    p.write_bytes(compress(data))
    block = 1 << 16
    r = BlockReader(p, block)
    handed: list = []
    next_block = r._next
    r._next = lambda: handed.append(next_block()) or handed[-1]
    got, pos = [], 0
    tails = [b"", b"x", b"y" * 1000, b"z" * block_reader.HEADROOM, b"w" * (block_reader.HEADROOM + 1)]
    try:
        for i in range(len(data) // block + 2):
            tail = tails[i % len(tails)]
            buf, n = r.read_after(b"before" + tail, 6)
            assert bytes(buf[: len(tail)]) == tail and len(buf) == len(tail) + n
            got.append(bytes(buf[len(tail) :]))
            pos += n
            fits = 0 < handed[-1][1] and len(tail) <= handed[-1][1]
            assert (buf is handed[-1][0]) == fits
            assert fits == (n > 0 and len(tail) <= block_reader.HEADROOM)
            if not n:
                break
    finally:
        r.close()
    assert b"".join(got) == data and pos == len(data)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda z: z[:-40], "truncated gzip stream"),
        (lambda z: z[:5], "truncated gzip stream"),
        (lambda z: z[:-8] + bytes([z[-8] ^ 0xFF]) + z[-7:], "corrupt gzip data"),  # the CRC-32 is wrong
        (lambda z: z + b"garbage!", "corrupt gzip data (trailing bytes"),
        (lambda z: z[:10] + b"\xff" * 200, "corrupt gzip data"),
    ],
)
def test_block_reader_bad_gzip_is_one_chunk_error(tmp_path, make, message, inflater):
    p = tmp_path / "bad.json.gz"
    p.write_bytes(make(gzip.compress(_payload(50_000))))
    with pytest.raises(ChunkError) as info:
        _read_all(p)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)
    with pytest.raises(zlib.error if "CRC" in message else Exception):  # what gzip itself says: also an error
        gzip.decompress(p.read_bytes())


def test_sorted_unique_and_member_equal_numpy():
    rng = np.random.default_rng(3)
    for n in (0, 1, 2, 5, 100, 10_000):
        for dtype, hi in ((np.int32, 50), (np.int64, 1 << 40), (np.uint8, 200), (np.bool_, 2)):
            a = rng.integers(0, hi, n).astype(dtype)
            u = sorted_unique(a)
            assert u.dtype == np.unique(a).dtype and np.array_equal(u, np.unique(a))
            keys = sorted_unique(rng.integers(0, hi, 7).astype(dtype))
            assert np.array_equal(member(a, keys), np.isin(a, keys))
    s = np.array(["b", "a", "b", "c", "a"])
    assert np.array_equal(sorted_unique(s), np.unique(s))


def _run_command(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracelab", *args],
        capture_output=True,
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        timeout=120,
        check=False,
    )


@pytest.mark.corpus
def test_the_command_writes_everything(tmp_path):
    """`python -m tracelab analyze` (the console script's path) writes the same complete
    output as the in-process command, and exits 0; text output too."""
    assert SMALL_TRACE.is_file()
    inproc = CliRunner().invoke(main, ["analyze", "--json", str(SMALL_TRACE)])
    assert inproc.exit_code == 0, inproc.output
    done = _run_command("analyze", "--json", str(SMALL_TRACE), env={"TRACELAB_DB": str(tmp_path / "db")})
    assert done.returncode == 0, done.stderr
    assert done.stdout == inproc.stdout_bytes
    assert json.loads(done.stdout)["schema"] == 2
    text = _run_command("analyze", str(SMALL_TRACE))
    assert text.returncode == 0 and text.stdout.decode().rstrip().endswith(
        CliRunner().invoke(main, ["analyze", str(SMALL_TRACE)]).output.rstrip().splitlines()[-1]
    )
    bad = _run_command("analyze", "--json", str(tmp_path / "missing.json"), env={"TRACELAB_DB": str(tmp_path / "db")})
    assert bad.returncode == 2 and bad.stdout == b""


_THREADS_AFTER_NUMPY = (
    "import os, sys\n"
    "from tracelab.cli import _one_blas_thread\n"
    "assert 'numpy' not in sys.modules\n"
    "before = len(os.listdir('/proc/self/task'))\n"
    "with {ctx}:\n"
    "    import numpy\n"
    "print(len(os.listdir('/proc/self/task')) - before, os.environ.get('OPENBLAS_NUM_THREADS'))\n"
)


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_numpy_loads_with_one_blas_thread_and_the_setting_does_not_leak():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}

    def threads_started(ctx: str, **extra: str) -> str:
        code = _THREADS_AFTER_NUMPY.format(ctx=ctx)
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=dict(env, **extra),
            timeout=60, check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert threads_started("_one_blas_thread()") == "0 None"  # no BLAS thread; the variable is gone again
    assert threads_started("_one_blas_thread()", OPENBLAS_NUM_THREADS="3").endswith(" 3")  # the user's own kept
    # (without it, numpy's OpenBLAS starts a thread per core at import on this project's machine, one here;
    # how many depends on the build and the machine, so that is not asserted)


NOT_LOADED_BY_ANALYZE = (
    "numpy.ma",  # np.unique's first plain call imports it (~20 ms): sorted_unique instead
    "tempfile",  # only for exporting a .nsys-rep
    "gzip",  # the sniff inflates a .json.gz's first bytes with zlib; the reader uses isal
    "pandas",
    "tracelab.analyses.sm.summary",  # the SM-lane facade: the summary comes from sm_time
    "tracelab.analyses.ranks.collectives",  # cross-rank only
    "tracelab.analyses.ranks.view",
)


@pytest.mark.corpus
def test_a_one_rank_analyze_loads_only_what_it_uses():
    """The start-up work `analyze --json` of a Kineto trace skips (each module above was measured:
    3-25 ms of import on this project's 2-core machine)."""
    code = (
        "import sys\n"
        "from tracelab.cli import main\n"
        "try:\n"
        f"    main(['analyze', '--json', {str(SMALL_TRACE)!r}], standalone_mode=False)\n"
        "finally:\n"
        "    sys.stdout.flush()\n"
        f"print('LOADED', [m for m in {NOT_LOADED_BY_ANALYZE!r} if m in sys.modules], file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "LOADED []" in done.stderr, done.stderr[-500:]
