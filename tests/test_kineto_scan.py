"""The C scanner (`tracelab/_native/_kineto_scan.c`) against the msgspec reference path.

The scanner either declines a piece (the parser then decodes it with msgspec) or must give exactly what
the msgspec path gives. Each check loads the same file twice, with and without the scanner, and
compares the whole Timeline (or the error message)."""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import sanitized
from timeline_compare import assert_same_timeline

from tracelab.errors import TracelabError
from tracelab.io.detect import load_trace
from tracelab.io.kineto import rows as kineto_rows

needs_scanner = pytest.mark.skipif(not kineto_rows.scanner_available(), reason="C scanner not built")
BOTH_PATHS = [pytest.param(True, id="scanner", marks=needs_scanner), pytest.param(False, id="msgspec")]

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DATA = Path(__file__).parent / "data"


def _load(path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool):
    with monkeypatch.context() as m:
        if not scanner:
            m.setattr(kineto_rows, "_scan", None)
        try:
            return load_trace(path)
        except TracelabError as e:
            return f"{type(e).__name__}: {e}"


_same = assert_same_timeline  # the whole Timeline, or the same error line


def _kineto_files() -> list[Path]:
    files = sorted(DATA.rglob("*.json")) + sorted(DATA.rglob("*.json.gz"))
    return [f for f in files if f.name != "meta.json" and f.stat().st_size > 200][:40]


@needs_scanner
@pytest.mark.parametrize("path", _kineto_files(), ids=lambda p: str(p.relative_to(DATA)))
def test_fixtures_same_with_and_without_scanner(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


@needs_scanner
@pytest.mark.corpus
def test_corpus_same_and_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted((CORPUS / "hta").glob("*.json.gz"))
    if not files:
        pytest.skip("../shared/corpus absent")
    for path in files:
        _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))
    # and the scanner really reads the pieces of an ordinary trace (string pids "Traces" included)
    calls: list[bool] = []
    real = kineto_rows._scan
    monkeypatch.setattr(kineto_rows, "_scan", lambda piece: calls.append((r := real(piece)) is not None) or r)
    load_trace(CORPUS / "hta" / "df_index_resolver__df_index_resolver.json.gz")
    assert calls and all(calls), calls


BASE = {
    "ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100.5, "dur": 2.25,
    "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3], "block": [4, 5, 6],
             "registers per thread": 32, "shared memory": 0, "External id": 9},
}
LAUNCH = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 99.0,
          "dur": 1.0, "args": {"correlation": 5}}
META = {"ph": "M", "name": "process_name", "pid": "Traces", "tid": "Trace PyTorch Profiler", "args": {"name": "x"}}

# each variant is one raw JSON text for the kernel event: odd types, escapes, duplicates, nulls, ...
VARIANTS = [
    '{"ph": "X", "cat": "kernel", "name": "k\\u00e9\\n\\"q\\"", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e2, "dur": 2E0, "args": null}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": "3", "tid": "stream 9", "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": null, "tid": null, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "ts": 50}',
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0.0, "stream": 7}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": true, "stream": 7}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "grid": [1, 2], "block": null}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "grid": [1, 2, 3000000000], "block": [-2147483648, 1, 1]}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "registers per thread": 4294967296}}'),
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 123456789012345678901, "stream": 7}}'),
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e400, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": -0, "dur": -0.0}',
    ('{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": -5, '
    '"args": {"x": [1, {"y": "\\ud800"}]}}'),
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "extra": "\\q"}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "extra": [1,]}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "t\\u0073": 7}',
    '{"ph": "X", "cat": "kernel", "name": "\xff\xfe", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "x": "\xff"}',
    '{"ph": "X", "cat": 5, "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "\xff", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, "\xe9": 1}',
    ('{"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "correlation": 5, "cuda_sync_kind": ""}}'),
    ('{"ph": "X", "cat": "cuda_sync", "name": "x", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 4294967295, "correlation": 5, "cuda_sync_kind": "event sync"}}'),
    '{"ph": "i", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "s": "g"}',
    '{"ph": "X", "cat": "gpu_user_annotation", "name": "a", "pid": 0, "tid": 7, "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 100, "dur": 2}',
    '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 100, "dur": 2, '
    '"args": {"device": 0, "stream": 7, "nest": ' + "[" * 70 + "]" * 70 + "}}",
    '{"ph" : "X" ,\t"cat":"kernel" ,\r\n"name":"k","pid":0,"tid":7,"ts":100,"dur":2 }',
    "{}",
]


@needs_scanner
@pytest.mark.parametrize("variant", range(len(VARIANTS)))
def test_odd_events_same_with_and_without_scanner(
    variant: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ",\n".join([json.dumps(LAUNCH), VARIANTS[variant], json.dumps(BASE), json.dumps(META)])
    text = '{"schemaVersion": 1, "traceEvents": [' + body + "]}"
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


@needs_scanner
def test_truncated_and_corrupt_pieces_give_the_reference_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = ",\n".join(json.dumps(dict(BASE, ts=100.0 + i)) for i in range(2000))
    full = '{"traceEvents": [' + body + "]}"
    for cut in (len(full) // 3, len(full) // 2, len(full) - 3):
        for text in (full[:cut], full[:cut] + '"}' + full[cut:], full.replace('"dur": 2.25', '"dur" 2.25', 1)):
            path = tmp_path / "c.json.gz"
            path.write_bytes(gzip.compress(text.encode()))
            _same(_load(path, monkeypatch, True), _load(path, monkeypatch, False))


# ---- the scanner alone, piece by piece, against the msgspec oracle (tests/kineto_scan_oracle.py) -----
SCANNER_C = Path(__file__).resolve().parents[1] / "tracelab" / "_native" / "_kineto_scan.c"

# pieces that reach every branch kind of the scanner: empty table / empty strings, escapes, number
# edges (the strict decoder's own rounding, -0, subnormals, underflow, 18 / 19 digits), growth of the
# columns (past 1024 events) and of the string table (past 512 distinct strings)
EDGE_PIECES = [
    b"[]",
    b" [\n] ",
    b'[{"name": ""}]',
    b'[{"name": "", "cat": "", "pid": "", "args": {"cuda_sync_kind": ""}}]',
    b'[{"name": "\\n", "cat": "\\u0000", "pid": "\\u00e9\\u20ac", "tid": "\\"stream 7\\""}]',
    b'[{"ts": -0, "dur": -0.0}, {"ts": 0e999999999, "dur": -1e-400}, {"ts": 4.9e-324, "dur": 1e308}]',
    b'[{"ts": 2.2250738585072011e-308, "dur": 1.00000000000000011102230246251565404236316680908203125}]',
    b'[{"ts": 999999999999999999, "dur": -999999999999999999, "pid": 999999999999999999, "tid": -0}]',
    b'[{"ts": 9007199254740993, "pid": 1234567890123456789}]',
    b'[{"args": {"grid": [2147483648, -2147483649, 0], "block": null, "registers per thread": 4294967296}}]',
    b"[" + b",".join([b"{}"] * 1100) + b"]",
    # [memory] instants: the args kept per instant with args (absent, null, negative, over int32; "I" too)
    (b'[{"ph": "i", "name": "[memory]", "ts": 1, "args": {"Bytes": -512, "Addr": 140055778689024, "Device Id": null}},'
    b' {"ph": "X", "name": "k", "ts": 1, "args": {"Bytes": 7}}, {"ph": "I", "name": "m", "args": {}},'
    b' {"ph": "i", "name": "[memory]"}, {"ph": "i", "args": null},'
    b' {"ph": "i", "args": {"Total Reserved": 4294967296, "Total Allocated": 1, "Device Type": 0, "x": [1, {}]}}]'),
    b'[{"ph": "i", "name": "[memory]", "args": {"Bytes": 1.5}}]',
    b'[{"ph": "i", "name": "[memory]", "args": {"Bytes": 1, "Bytes": 2}}]',
    b"[" + b",".join(b'{"name": "n%d", "pid": "%d", "c": %d}' % (i, i, i % 7) for i in range(700)) + b"]",
    *(b"[" + v.encode() + b"]" for v in VARIANTS if "\xff" not in v and "\xe9" not in v),
]


@needs_scanner
def test_edge_pieces_equal_the_msgspec_columns() -> None:
    from kineto_scan_oracle import check

    accepted = sum(check(p, kineto_rows._scan(p)) for p in EDGE_PIECES)
    assert accepted >= 20  # most of them are read by the scanner, not declined


def _same_scan(a: tuple | None, b: tuple | None) -> bool:
    if a is None or b is None:
        return a is b
    return a[0] == b[0] and a[1] == b[1] and {k: bytes(v) for k, v in a[2].items()} == {
        k: bytes(v) for k, v in b[2].items()
    }


@needs_scanner
def test_scan_rest_reads_the_elements_after_a_comma_as_scan_reads_the_piece() -> None:
    """`scan_rest` (the second half of a piece cut in two, scanned in place) on the bytes after a piece's
    '[' gives what `scan` gives for the piece; with no element before the ']' it declines, and a piece
    that still has its '[' is declined too (an array is not an event)."""
    from tracelab._native._kineto_scan import scan, scan_rest

    compared = 0
    for p in EDGE_PIECES:
        body = p.strip()
        assert body.startswith(b"[")
        rest = body[1:]
        if rest.strip() == b"]":
            assert scan_rest(rest) is None
            continue
        assert _same_scan(scan_rest(rest), scan(p)), p[:80]
        assert scan_rest(body) is None
        compared += scan(p) is not None
    assert compared >= 15
    # after the ',' of a real cut: the halves' events are the whole piece's
    whole = b"[" + b",".join(json.dumps(dict(BASE, ts=i)).encode() for i in range(50)) + b"]"
    cut = whole.index(b"},", len(whole) // 2)
    first, second = scan(whole[: cut + 1] + b"]"), scan_rest(whole[cut + 2 :])
    assert first is not None and second is not None and first[0] + second[0] == 50
    ts = np.concatenate([np.frombuffer(first[2]["ts"]), np.frombuffer(second[2]["ts"])])
    assert ts.tolist() == list(range(50))


def _sanitized_scanner(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """_kineto_scan.c built with AddressSanitizer + UBSan (halting on the first report), and the
    environment that loads it into a plain Python."""
    out = tmp_path / "_kineto_scan.so"
    env = sanitized.build(SCANNER_C, out)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)])
    return out, env


_SANITIZED_CHILD = """
import ctypes, importlib.util, pickle, sys
spec = importlib.util.spec_from_file_location("_kineto_scan", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
from kineto_scan_oracle import check
pieces = pickle.load(open(sys.argv[2], "rb"))
accepted = 0
for p in pieces:
    # a buffer of exactly len(p) bytes (no trailing NUL): ASan sees a read one byte past the piece
    buf = (ctypes.c_char * len(p)).from_buffer_copy(p)
    accepted += check(p, mod.scan(memoryview(buf)))
    rest = (ctypes.c_char * max(len(p) - 1, 0)).from_buffer_copy(p[1:])  # scan_rest reads to its end too
    mod.scan_rest(memoryview(rest))
print("scanned", len(pieces), "accepted", accepted)
"""


@needs_scanner
def test_sanitized_scanner_on_edge_and_cut_pieces(tmp_path: Path) -> None:
    """Regression (c-fuzz): the scanner did `memcpy(NULL, src, 0)` / `NULL + 0` (undefined behaviour:
    UBSan stops on the first piece) when the string table or a buffer was still empty. Every edge piece
    and every prefix of a few of them (each cut point, reading to the exact end of the buffer) goes
    through the ASan + UBSan build and the msgspec oracle."""
    so, env = _sanitized_scanner(tmp_path)
    cuts = [p[:k] for p in EDGE_PIECES[:10] + [EDGE_PIECES[-1]] for k in range(len(p))]
    pieces = tmp_path / "pieces.pickle"
    pieces.write_bytes(pickle.dumps(EDGE_PIECES + cuts))
    child = [sys.executable, "-c", _SANITIZED_CHILD, str(so), str(pieces)]
    res = subprocess.run(child, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert res.returncode == 0 and "runtime error" not in res.stderr, res.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in res.stderr, res.stderr[-3000:]
    assert f"scanned {len(EDGE_PIECES) + len(cuts)} accepted" in res.stdout, res.stdout


def _huge_number_piece(field: bytes, digits: int, repeat: int = 2 << 20) -> tuple[memoryview, object]:
    """`[{"<field>": 111...1}]` with `digits` digits, as a read-only view of 4+ GiB of address space
    that costs a few MiB of memory: one memfd block of '1's mapped again and again (Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, *[ctypes.c_int] * 3, ctypes.c_long]
    head, tail = b'[{"' + field + b'": ', b"}]"
    n_blocks = -(-(len(head) + digits + len(tail)) // repeat)
    total = n_blocks * repeat
    base = libc.mmap(None, total, 0, 0x22, -1, 0)  # PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS: reserve
    assert base not in (None, ctypes.c_void_p(-1).value)
    fds = []

    def block(content: bytes) -> int:
        fd = os.memfd_create("kineto-scan-test")
        os.write(fd, content)
        fds.append(fd)
        return fd

    ones = block(b"1" * repeat)
    first = block(head + b"1" * (repeat - len(head)))
    end = len(head) + digits + len(tail) - (n_blocks - 1) * repeat  # bytes used in the last block
    last = block(b"1" * (end - len(tail)) + tail + b" " * (repeat - end))
    for i in range(n_blocks):
        fd = first if i == 0 else last if i == n_blocks - 1 else ones
        got = libc.mmap(base + i * repeat, repeat, 1, 0x11, fd, 0)  # PROT_READ, MAP_SHARED | MAP_FIXED
        assert got == base + i * repeat, ctypes.get_errno()
    view = memoryview((ctypes.c_char * total).from_address(base)).cast("B")

    def close() -> None:
        view.release()
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(base, total)
        for fd in fds:
            os.close(fd)

    return view, close


@needs_scanner
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="memfd / mmap layout is Linux-only")
def test_number_of_4gib_digits_is_not_read_as_a_short_one() -> None:
    """Regression (c-fuzz): number lengths were kept in `int`, so an integer of 2^32 + 3 digits read as
    one of 3 digits and was accepted with a wrapped value (pid 8198552921648689607; a ts the same way).
    msgspec decides such a number (the scanner declines). Only a few MiB of memory: the 4 GiB piece maps
    one block again and again."""
    view, close = _huge_number_piece(b"pid", (1 << 32) + 3)
    try:
        assert kineto_rows._scan(view) is None
    finally:
        close()


# ---- found by the differential fuzzer, on both paths (kineto_columns.stream_from_tid) -----------------
def _legacy_kernel_file(tmp_path: Path, tid: str) -> Path:
    launch = {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 99.0,
              "dur": 1.0, "args": {"correlation": 5}}  # fmt: skip
    kernel = {"ph": "X", "cat": "Kernel", "name": "k", "pid": 0, "tid": tid, "ts": 100, "dur": 2,
              "args": {"device": 0, "correlation": 5}}  # fmt: skip
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps({"traceEvents": [launch, kernel]}))
    return path


@pytest.mark.parametrize("scanner", BOTH_PATHS)
def test_legacy_stream_number_past_int64_is_unknown_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool
) -> None:
    """Regression (c-fuzz): a 2021-schema kernel without args.stream takes its stream from tid
    "stream N"; an N past int64 raised OverflowError (exit 1, "internal error"). It is an unknown stream
    now, so the kernel has no lane: the one clear error for that."""
    got = _load(_legacy_kernel_file(tmp_path, "stream 99999999999999999999"), monkeypatch, scanner)
    assert isinstance(got, str) and got.startswith("TraceFormatError") and "no stream or device" in got, got
    tl = _load(_legacy_kernel_file(tmp_path, "stream 7"), monkeypatch, scanner)
    assert tl.gpu_events()["stream"].tolist() == [7]


@pytest.mark.parametrize("scanner", BOTH_PATHS)
def test_long_digit_run_in_a_legacy_tid_is_linear(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, scanner: bool
) -> None:
    """Regression (c-fuzz): `re.search(r"(\\d+)\\s*$", tid)` is quadratic on a long digit run that does not
    end the tid: 100,000 digits and an "x" took minutes (40,000 digits: 39 s). Now linear."""
    t0 = time.monotonic()
    got = _load(_legacy_kernel_file(tmp_path, "1" * 100_000 + "x"), monkeypatch, scanner)
    elapsed = time.monotonic() - t0
    assert isinstance(got, str) and "no stream or device" in got, got
    assert elapsed < 15.0, elapsed


# ---- crafted hash collisions in the scanner's string table --------------------------------------------
_M64 = (1 << 64) - 1
_K1, _K2 = 0x87C37B91114253D5, 0x4CF5AD432745937F  # hash_bytes' multipliers (_kineto_scan.c)


def _colliding_names(n: int, low_bits: int = 24) -> list[bytes]:
    """n distinct 16-byte strings whose `hash_bytes` (mirrored from _kineto_scan.c: update both together)
    ends in `low_bits` zero bits, so they all start probing at slot 0 of the string table. The hash is a
    chain of bijections: pick the first 8 bytes, invert the rest for the last 8 (kept when those are
    plain string bytes; they need not be UTF-8 for the scanner to do the table work first)."""
    u = np.uint64
    rng = np.random.default_rng(11)

    def unshift(y: np.ndarray, s: int) -> np.ndarray:  # inverse of x ^ (x >> s)
        x = y.copy()
        for _ in range(64 // s + 1):
            x = y ^ (x >> u(s))
        return x

    h0 = u(0x9E3779B97F4A7C15 ^ ((16 * 0xC2B2AE3D27D4EB4F) & _M64))
    out: list[np.ndarray] = []
    with np.errstate(over="ignore"):
        while sum(map(len, out)) < n:
            first = rng.integers(0x61, 0x7B, size=(4 * n, 8), dtype=np.uint8)
            h1 = (h0 ^ (first.view("<u8").ravel() * u(_K1))) * u(_K2)
            h1 ^= h1 >> u(31)
            target = rng.integers(0, 1 << 40, size=4 * n, dtype=np.uint64) << u(low_bits)
            k2_inverse = u(pow(_K2, -1, 1 << 64))
            before_last = unshift(unshift(target, 29) * k2_inverse, 31) * k2_inverse
            last = ((before_last ^ h1) * u(pow(_K1, -1, 1 << 64))).view(np.uint8).reshape(-1, 8)
            plain = ((last >= 0x20) & (last != 0x22) & (last != 0x5C)).all(axis=1)
            out.append(np.concatenate([first[plain], last[plain]], axis=1))
    return [bytes(row) for row in np.concatenate(out)[:n]]


@needs_scanner
def test_crafted_string_hash_collisions_stay_linear() -> None:
    """Regression (c-fuzz): the string table's hash is fixed and invertible, so a file can carry names
    that all land in one slot; each lookup then walked the whole cluster (60,000 such names: ~4 s of CPU
    against 0.05 s for ordinary ones; a 4 MB piece of them ~25 s). A lookup now gives up after 256 slots
    and the piece goes to msgspec."""
    n = 60_000
    crafted = b"[" + b",".join(b'{"name":"' + s + b'"}' for s in _colliding_names(n)) + b"]"
    plain = b"[" + b",".join(b'{"name":"%016d"}' % i for i in range(n)) + b"]"
    assert len(crafted) == len(plain)
    cpu = {}
    for label, piece in (("plain", plain), ("crafted", crafted)):
        t0 = time.process_time()
        got = kineto_rows._scan(piece)
        cpu[label] = time.process_time() - t0
        assert label == "crafted" or (got is not None and got[0] == n)
    assert cpu["crafted"] < max(10 * cpu["plain"], 0.5), cpu
