"""Helpers of the tests/test_hostile_*.py files (issue 11): tiny Kineto traces whose numbers can be
worked out by hand, the bundled nsys export, and the real CLI in-process."""

from __future__ import annotations

import json
import lzma
import sqlite3
from pathlib import Path

from click.testing import CliRunner

from tracelab.cli import main

DATA = Path(__file__).resolve().parent / "data"
PROPS = [
    {
        "id": 0,
        "name": "NVIDIA H200",
        "numSms": 132,
        "computeMajor": 9,
        "computeMinor": 0,
        "totalGlobalMem": 150109880320,
    }
]


def kernel(
    ts: object, dur: object, corr: int, *, name: str = "k", device: object = 0, stream: object = 7
) -> dict:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"device": device, "stream": stream, "correlation": corr},
    }


def launch(ts: float, corr: int) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaLaunchKernel",
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": 2,
        "args": {"correlation": corr},
    }


def two_kernels() -> list[dict]:
    """Kernels at 1000-1010 µs and 1020-1025 µs: busy 15 µs, span 25 µs, idle 10 µs."""
    return [launch(990, 1), kernel(1000, 10, 1, name="k1"), launch(995, 2), kernel(1020, 5, 2, name="k2")]


def kineto_doc(events: list[dict], **meta: object) -> dict:
    return {"schemaVersion": 1, "deviceProperties": PROPS, **meta, "traceEvents": events}


def write_json(path: Path, doc: object) -> Path:
    path.write_bytes(json.dumps(doc).encode() if not isinstance(doc, bytes) else doc)
    return path


def nsys_copy(dest: Path) -> Path:
    """The bundled nsys export (tests/data/nsys_mixed_small.sqlite.xz), unpacked to dest."""
    dest.write_bytes(lzma.decompress((DATA / "nsys_mixed_small.sqlite.xz").read_bytes()))
    return dest


def sql(path: Path, script: str) -> Path:
    conn = sqlite3.connect(path)
    try:
        conn.executescript(script)
        conn.commit()
    finally:
        conn.close()
    return path


def loosen(table: str) -> str:
    """SQL that rebuilds `table` without its NOT NULL constraints (rows and their order kept)."""
    return (
        f'ALTER TABLE "{table}" RENAME TO loose_tmp; CREATE TABLE "{table}" AS SELECT * FROM loose_tmp; '
        "DROP TABLE loose_tmp; "
    )


def cli(db: Path, *args: str):
    """The real CLI in-process; returns click's Result (exit_code, stdout, stderr)."""
    return CliRunner().invoke(main, ["--db", str(db), *args])


def one_error_line(result, path: Path) -> str:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert len(lines) == 1, result.stderr
    assert path.name in lines[0], lines[0]
    return lines[0]


def analyze_json(db: Path, ref: str) -> dict:
    res = cli(db, "analyze", ref, "--json")
    assert res.exit_code == 0, (res.exit_code, res.stderr)
    return json.loads(res.stdout)


def listing(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())
