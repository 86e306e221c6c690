"""Seeded mutations of the bundled fixtures: every case is (name, file name, builder) where the builder
writes the hostile file into a directory. Deterministic (seed 11), so a failure names a case that
reproduces.

Kineto cases start from a small trace cut out of tests/data/torch_mixed_small (its metadata and ~170
events: kernels, copies, API calls, CPU ops, flows); nsys cases from tests/data/nsys_mixed_small.sqlite.xz.
Classes: truncation, byte flips, type swaps, overflow values, deep nesting, encodings, structure
(nested / repeated traceEvents keys), SQLite page damage, value and schema changes, views.
"""

from __future__ import annotations

import copy
import gzip
import json
import lzma
import random
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data"
SEED = 11


@dataclass(frozen=True)
class Case:
    name: str
    filename: str
    build: Callable[[Path], None]  # writes the file into the given directory

    def write(self, directory: Path) -> Path:
        self.build(directory / self.filename)
        return directory / self.filename


# ---- Kineto ----------------------------------------------------------------------------------------


@cache
def kineto_doc() -> dict:
    with gzip.open(DATA / "torch_mixed_small" / "trace.json.gz", "rb") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    gpu = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")][:40]
    corr = {e.get("args", {}).get("correlation") for e in gpu}
    launches = [
        e for e in events if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in corr
    ]
    rest = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "ac2g", "cuda_sync")][:80]
    doc["traceEvents"] = gpu + launches + rest
    return doc


def _kineto_bytes(doc: dict | None = None) -> bytes:
    return json.dumps(kineto_doc() if doc is None else doc).encode()


def _writer(data: bytes) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(data)


def _lazy(make: Callable[[], bytes]) -> Callable[[Path], None]:
    return lambda p: p.write_bytes(make())


HOSTILE_VALUES: list[object] = [
    True,
    False,
    None,
    "x",
    "",
    [],
    {},
    1.5,
    -1,
    0,
    2**31,
    2**32 + 1,
    2**63,
    2**64,
    2**70,
    -(2**63),
    1e19,
    1e300,
    -1e300,
    "\u202egnp.exe",
    "y" * 100_000,
    [[[[[1]]]]],
]
EVENT_FIELDS = ["ts", "dur", "pid", "tid", "ph", "cat", "name", "args"]
ARG_FIELDS = [
    "device",
    "stream",
    "correlation",
    "context",
    "bytes",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "cuda_sync_kind",
]
META_FIELDS = [
    ("deviceProperties", 0, "totalGlobalMem"),
    ("deviceProperties", 0, "numSms"),
    ("deviceProperties", 0, "id"),
    ("deviceProperties", 0, "computeMajor"),
    ("distributedInfo", None, "rank"),
    ("baseTimeNanoseconds", None, None),
]


def _type_swap(rng: random.Random) -> bytes:
    doc = copy.deepcopy(kineto_doc())
    ev = rng.choice(doc["traceEvents"])
    value = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    if rng.random() < 0.5:
        ev[rng.choice(EVENT_FIELDS)] = value
    else:
        ev.setdefault("args", {})
        if isinstance(ev["args"], dict):
            ev["args"][rng.choice(ARG_FIELDS)] = value
    return _kineto_bytes(doc)


def _meta_overflow(field: tuple, value: object) -> bytes:
    doc = copy.deepcopy(kineto_doc())
    top, idx, key = field
    if idx is None and key is None:
        doc[top] = value
    elif idx is None:
        doc[top] = {key: value, "backend": "nccl", "world_size": 2}
    else:
        doc[top][idx][key] = value
    return _kineto_bytes(doc)


def _deep(depth: int, where: str) -> bytes:
    nest = "[" * depth + "]" * depth
    raw = _kineto_bytes().decode()
    if where == "args":
        raw = raw.replace('"args": {', '"args": {"deep": ' + nest + ", ", 1)
    elif where == "name":
        raw = raw.replace('"name": "', '"name": ' + nest + ', "x": "', 1)
    elif where == "meta":
        raw = '{"deep": ' + nest + ", " + raw[1:]
    else:  # an element of traceEvents
        raw = raw.replace('"traceEvents": [', '"traceEvents": [' + nest + ", ", 1)
    return raw.encode()


def _bad_utf8(field: str) -> bytes:
    raw = _kineto_bytes()
    key = f'"{field}": "'.encode()
    i = raw.find(key)
    j = i + len(key)
    return raw[:j] + b"\xff\xfe\xc3" + raw[j:]


def _zstd(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor().compress(data)


def _nested_keys(n: int) -> bytes:
    raw = _kineto_bytes()
    return b'{"a": [' + b",".join([b'{"traceEvents": 1}'] * n) + b"], " + raw[1:]


def kineto_cases() -> list[Case]:
    rng = random.Random(SEED)
    base = _kineto_bytes()
    cases: list[Case] = [Case("kineto-base", "trace.json", _writer(base))]
    for i in range(50):  # truncation
        cut = rng.randrange(1, len(base))
        cases.append(Case(f"kineto-truncate-{i}-at-{cut}", "trace.json", _writer(base[:cut])))
    for i in range(110):  # byte flips
        data = bytearray(base)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cases.append(Case(f"kineto-flip-{i}", "trace.json", _writer(bytes(data))))
    for i in range(120):  # type swaps (values that are the wrong type or out of range)
        data = _type_swap(rng)
        cases.append(Case(f"kineto-swap-{i}", "trace.json", _writer(data)))
    for field in META_FIELDS:  # overflow values in the metadata
        for value in (2**31, 2**63, 2**64, -(2**63), 1e300, True, "x", -1):
            tag = f"{field[0]}.{field[2]}={value!r}"[:60]
            cases.append(
                Case(f"kineto-meta-{tag}", "trace.json", _lazy(lambda f=field, v=value: _meta_overflow(f, v)))
            )
    for depth in (100, 900, 1000, 1100, 5000):
        for where in ("args", "name", "meta", "element"):
            cases.append(
                Case(
                    f"kineto-deep-{where}-{depth}", "trace.json", _lazy(lambda d=depth, w=where: _deep(d, w))
                )
            )
    for field in ("name", "cat", "ph"):
        cases.append(Case(f"kineto-utf8-{field}", "trace.json", _lazy(lambda f=field: _bad_utf8(f))))
    enc: dict[str, tuple[str, Callable[[], bytes]]] = {
        "bom": ("trace.json", lambda: b"\xef\xbb\xbf" + base),
        "utf16": ("trace.json", lambda: base.decode().encode("utf-16")),
        "latin1-meta": ("trace.json", lambda: base.replace(b'"traceName"', b'"trace\xe9Name"', 1)),
        "nul-bytes": ("trace.json", lambda: base[:500] + b"\x00" * 64 + base[500:]),
        "ws-10": ("trace.json", lambda: b" " * 10 + base),
        "ws-64": ("trace.json", lambda: b"\n" * 64 + base),
        "ws-100k": ("trace.json", lambda: b" \t\r\n" * 25_000 + base),
        "ws-between": ("trace.json", lambda: base.replace(b"}, {", b"}," + b" " * 70_000 + b"{", 3)),
        "crlf": ("trace.json", lambda: json.dumps(kineto_doc(), indent=1).encode().replace(b"\n", b"\r\n")),
        "gzip": ("trace.json.gz", lambda: gzip.compress(base)),
        "gzip-truncated": ("trace.json.gz", lambda: gzip.compress(base)[:-100]),
        "gzip-twice": ("trace.json.gz", lambda: gzip.compress(gzip.compress(base))),
        "gzip-ws-bomb": ("trace.json.gz", lambda: gzip.compress(b" " * (8 << 20) + base, 9)),
        "zstd": ("trace.json.zst", lambda: _zstd(base)),
        "zstd-truncated": ("trace.json.zst", lambda: _zstd(base)[:-50]),
        "nested-keys-20k": ("trace.json", lambda: _nested_keys(20_000)),
        "key-in-string": (
            "trace.json",
            lambda: b'{"x": "' + b'\\"traceEvents\\": [' * 20_000 + b'", ' + base[1:],
        ),
        "duplicate-key": ("trace.json", lambda: base[:-1] + b', "traceEvents": [1, 2]}'),
        "events-object": ("trace.json", lambda: b'{"traceEvents": {"a": 1}}'),
        "events-string": ("trace.json", lambda: b'{"traceEvents": "[]"}'),
        "bare-array": ("trace.json", lambda: json.dumps(kineto_doc()["traceEvents"]).encode()),
        "empty-array": ("trace.json", lambda: b'{"traceEvents": []}'),
        "non-objects": ("trace.json", lambda: b'{"traceEvents": [1, "a", null, true]}'),
        "trailing-garbage": ("trace.json", lambda: base + b"}}}]]"),
        "only-whitespace": ("trace.json", lambda: b" " * 5000),
        "empty": ("trace.json", lambda: b""),
        "big-name": ("trace.json", lambda: base.replace(b'"name": "', b'"name": "' + b"n" * (3 << 20), 1)),
        "bidi-names": (
            "trace.json",
            lambda: base.replace(b'"name": "', '"name": "\u202e\u2066'.encode(), 50),
        ),
    }
    for tag, (fname, make) in enc.items():
        cases.append(Case(f"kineto-enc-{tag}", fname, _lazy(make)))
    return cases


# ---- nsys ------------------------------------------------------------------------------------------


@cache
def nsys_bytes() -> bytes:
    return lzma.decompress((DATA / "nsys_mixed_small.sqlite.xz").read_bytes())


READ_TABLES = [
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
    "StringIds",
    "TARGET_INFO_GPU",
    "TARGET_INFO_CUDA_CONTEXT_INFO",
    "ENUM_CUDA_MEMCPY_OPER",
]
SQL_VALUES = [
    "NULL",
    "'text'",
    "x'ff00fe'",
    "1.5",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967297",
    "2147483648",
    "1e300",
    "-1",
]
RECURSIVE = "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r"


def _sql_case(sql: str) -> Callable[[Path], None]:
    def build(p: Path) -> None:
        p.write_bytes(nsys_bytes())
        conn = sqlite3.connect(p)
        try:
            conn.executescript(sql)
            conn.commit()
        finally:
            conn.close()

    return build


def _loosen(table: str) -> str:
    """SQL that rebuilds `table` without its NOT NULL / type constraints (keeps its rows and rowids)."""
    return (
        f'ALTER TABLE "{table}" RENAME TO loose_tmp; '
        f'CREATE TABLE "{table}" AS SELECT rowid AS rowid_keep, * FROM loose_tmp; DROP TABLE loose_tmp; '
    )


@cache
def _columns(table: str) -> list[str]:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(nsys_bytes())
    cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
    conn.close()
    return cols


def nsys_cases() -> list[Case]:
    rng = random.Random(SEED + 1)
    base = nsys_bytes()
    page = int.from_bytes(base[16:18], "big") or 65536
    cases: list[Case] = [Case("nsys-base", "trace.sqlite", _writer(base))]
    for i in range(40):  # page damage: random bytes or zeros over part of a page
        data = bytearray(base)
        pg = rng.randrange(len(data) // page)
        off = pg * page + rng.randrange(page - 64)
        n = rng.choice([1, 4, 16, 64])
        data[off : off + n] = bytes(rng.randrange(256) for _ in range(n)) if rng.random() < 0.7 else bytes(n)
        cases.append(Case(f"nsys-page-{i}-p{pg}", "trace.sqlite", _writer(bytes(data))))
    for i in range(12):  # truncation, at page boundaries and inside pages
        cut = rng.randrange(1, len(base) // page) * page if i % 2 else rng.randrange(1, len(base))
        cases.append(Case(f"nsys-truncate-{i}-at-{cut}", "trace.sqlite", _writer(base[:cut])))
    for i in range(60):  # values of the wrong type or out of range, in the columns the parser reads
        table = rng.choice(READ_TABLES)
        cols = _columns(table)
        if not cols:
            continue
        column = rng.choice(cols)
        value = rng.choice(SQL_VALUES)
        which = rng.choice(["min", "max"])
        sql = _loosen(table) + (
            f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid = (SELECT {which}(rowid) FROM "{table}");'
        )
        cases.append(Case(f"nsys-value-{i}-{table}.{column}={value}"[:90], "trace.sqlite", _sql_case(sql)))
    schema = {
        "view-kernel-recursive": "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME TO k_old; "
        f'CREATE VIEW CUPTI_ACTIVITY_KIND_KERNEL AS SELECT x AS start, x AS "end" FROM ({RECURSIVE});',
        "view-stringids": "ALTER TABLE StringIds RENAME TO s_old; CREATE VIEW StringIds AS SELECT * FROM s_old;",
        "view-unrelated": f"CREATE VIEW my_view AS {RECURSIVE};",
        "drop-kernel": "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;",
        "drop-stringids": "DROP TABLE StringIds;",
        "drop-runtime": "DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;",
        "drop-all-activity": "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL; DROP TABLE CUPTI_ACTIVITY_KIND_MEMCPY; "
        "DROP TABLE CUPTI_ACTIVITY_KIND_MEMSET; DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME; "
        "DROP TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION; DROP TABLE NVTX_EVENTS;",
        "quoted-pdl-column": 'ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL ADD COLUMN "pdl"", ('
        + RECURSIVE
        + ' LIMIT 1 OFFSET 100000000)) --" INTEGER;',
        "wal-mode": "PRAGMA journal_mode=WAL;",
        "stringids-bad-utf8": "UPDATE StringIds SET value = CAST(x'ff41fe' AS TEXT) WHERE id IN (SELECT id FROM StringIds LIMIT 50);",
        "bad-utf8-table-name": 'CREATE TABLE "T\xff" (a);',
        "enum-huge-id": "INSERT INTO ENUM_CUDA_MEMCPY_OPER (id, name) VALUES (1000000000000, 'X');",
        "gpu-huge-sms": _loosen("TARGET_INFO_GPU")
        + "UPDATE TARGET_INFO_GPU SET smCount = 9223372036854775807;",
        "gpu-duplicated": "INSERT INTO TARGET_INFO_GPU SELECT * FROM TARGET_INFO_GPU;",
        "sparse-rowids": "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = 9223372036854775807 WHERE rowid = "
        "(SELECT max(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME); UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET rowid = "
        "-9223372036854775808 WHERE rowid = (SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_RUNTIME);",
        "kernel-start-null-all": _loosen("CUPTI_ACTIVITY_KIND_KERNEL")
        + "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = NULL;",
        "kernel-end-before-start": 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1000;',
        "kernel-huge-duration": 'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = 4611686018427387903 WHERE rowid = '
        "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL);",
        "all-huge-durations": 'UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 0, "end" = 4611686018427387000;',
    }
    for tag, sql in schema.items():
        cases.append(Case(f"nsys-schema-{tag}", "trace.sqlite", _sql_case(sql)))
    cases.append(
        Case("nsys-gzip", "trace.sqlite.gz", lambda p: p.write_bytes(gzip.compress(nsys_bytes(), 1)))
    )
    cases.append(
        Case(
            "nsys-gzip-truncated",
            "trace.sqlite.gz",
            lambda p: p.write_bytes(gzip.compress(nsys_bytes(), 1)[:-999]),
        )
    )
    return cases


# ---- run directories (meta.json + trace) ---------------------------------------------------------


META_PATHS = [
    ("trace_file",),
    ("backend",),
    ("gpu",),
    ("gpu", "sm_count"),
    ("gpu", "cc"),
    ("gpu", "name"),
    ("gpu", "total_memory"),
    ("gpu", "regs_per_multiprocessor"),
    ("partitions",),
    ("partitions", 0),
    ("partitions", 0, "sm_count"),
    ("partitions", 0, "context_id"),
    ("partitions", 0, "marker"),
    ("pdl_kernels",),
    ("probe",),
]


def _run_dir(meta_bytes: bytes) -> Callable[[Path], None]:
    def build(d: Path) -> None:
        d.mkdir()
        (d / "meta.json").write_bytes(meta_bytes)
        (d / "trace.json.gz").write_bytes((DATA / "torch_mixed_small" / "trace.json.gz").read_bytes())

    return build


def _meta_swap(path: tuple, value: object) -> bytes:
    meta = json.loads((DATA / "torch_mixed_small" / "meta.json").read_text())
    node = meta
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(meta).encode()


def rundir_cases() -> list[Case]:
    rng = random.Random(SEED + 2)
    meta = (DATA / "torch_mixed_small" / "meta.json").read_bytes()
    cases = [Case("rundir-base", "run", _run_dir(meta))]
    for i in range(30):
        path = rng.choice(META_PATHS)
        value = copy.deepcopy(rng.choice(HOSTILE_VALUES))
        cases.append(Case(f"rundir-meta-{i}-{'.'.join(map(str, path))}", "run", _run_dir(_meta_swap(path, value))))
    cases.append(Case("rundir-meta-deep", "run", _run_dir(b'{"gpu": ' + b"[" * 5000 + b"]" * 5000 + b"}")))
    cases.append(Case("rundir-meta-bad-utf8", "run", _run_dir(meta.replace(b"NVIDIA", b"NV\xffIDIA"))))
    cases.append(Case("rundir-meta-traversal", "run", _run_dir(_meta_swap(("trace_file",), "../../../etc/passwd"))))
    return cases


def all_cases() -> list[Case]:
    return kineto_cases() + nsys_cases() + rundir_cases()
