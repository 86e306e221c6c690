"""Issue 30, class 3: nsys kernel tables that lose their duration or stream. A CUPTI_ACTIVITY_KIND_KERNEL
without an `end` column, with `end` NULL, or with `end` only a generated column showed every kernel
with zero length and no note; without `streamId` every kernel went to stream -1 (no overlap) without a
note. Each now keeps the reading and says what could not be measured, with the count from the file."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time

import pytest
from hostile_util import cli, loosen, nsys_copy, sql

K = "CUPTI_ACTIVITY_KIND_KERNEL"

CASES = {
    "no end column": (f'ALTER TABLE {K} DROP COLUMN "end";', "has no end column"),
    "end NULL everywhere": (loosen(K) + f'UPDATE {K} SET "end" = NULL;', "have no end time"),
    "end NULL in a third": (loosen(K) + f'UPDATE {K} SET "end" = NULL WHERE rowid % 3 = 0;', "have no end time"),
    "end generated": (
        (
            f'ALTER TABLE {K} RENAME COLUMN "end" TO end_recorded; '
            f'ALTER TABLE {K} ADD COLUMN "end" INTEGER GENERATED ALWAYS AS (start + 1) VIRTUAL;'
        ),
        "generated column",
    ),
    "no streamId": (f"ALTER TABLE {K} DROP COLUMN streamId;", "has no streamId column"),
}


def _count(db, where: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(f"SELECT count(*) FROM {K} WHERE {where}").fetchone()[0]
    finally:
        conn.close()


def _has_column(db, column: str) -> bool:
    conn = sqlite3.connect(db)
    try:
        return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({K})"))
    finally:
        conn.close()


@pytest.mark.parametrize("case", list(CASES))
def test_kernel_table_losing_end_or_stream_is_noted(tmp_path, case):
    script, phrase = CASES[case]
    p = sql(nsys_copy(tmp_path / "t.sqlite"), script)
    if "end" in case and "generated" not in case and _has_column(p, "end"):
        expected = _count(p, '"end" IS NULL')
    else:
        expected = _count(p, "1")
    digest = hashlib.sha256(p.read_bytes()).hexdigest()
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", "analyze", str(p), "--json")
    assert time.monotonic() - t0 < 10 + 4 * p.stat().st_size / 1e6
    assert res.exit_code == 0, res.stderr
    notes = [n for n in json.loads(res.stdout)["notes"] if phrase in n]
    assert len(notes) == 1, json.loads(res.stdout)["notes"]
    assert f"{expected:,} " in notes[0]  # the count, read from the file by this test
    assert hashlib.sha256(p.read_bytes()).hexdigest() == digest


def test_complete_kernel_table_has_none_of_these_notes(tmp_path):
    p = nsys_copy(tmp_path / "t.sqlite")
    res = cli(tmp_path / "s.db", "analyze", str(p), "--json")
    assert res.exit_code == 0, res.stderr
    notes = json.loads(res.stdout)["notes"]
    assert not [n for n in notes if "no end" in n or "streamId" in n or "generated" in n]
