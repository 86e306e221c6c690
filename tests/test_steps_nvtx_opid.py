"""Issue 24: step markers recorded by nsys `--pytorch=autograd-nvtx`. torch's emit_nvtx names the NVTX range of a
record_function / ProfilerStep "ProfilerStep#3, op_id = 1234" (", sizes = [...]" may follow); the marker's name is
the part before ", op_id = ", so such a run has marked steps instead of falling back to inference.

- a hand-made nsys export (the real table and column names, tests/test_nsys.make_export) holding three
  "ProfilerStep#N, op_id = M" ranges (one with a ", sizes = ..." suffix) and other op_id-named ranges nested in
  them: three marked steps with exactly those ranges, read back from the SQLite with sqlite3;
- the bundled nsys demo runs recorded with autograd-nvtx carry both the program's own `step N` NVTX ranges and
  torch's "step N, op_id = M" ranges nested in them: their marked steps stay the outer `step N` ranges; with the
  plain ranges deleted from a copy of the export, the op_id-named ranges are the marked steps.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from test_nsys import PID, gtid, make_export

from tracelab.analyses.steps.infer import find_steps
from tracelab.demo import demo_run
from tracelab.io.nsys.load import load_nsys_sqlite

OP_ID = ", op_id = "
NAME = "coalesce(text, (SELECT value FROM StringIds WHERE id = textId))"  # an NVTX range's inline or registered name


def _top(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Ranges no earlier one contains, sorted."""
    top: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if not top or b > top[-1][1]:
            top.append((a, b))
    return top


def _nvtx_ranges(db: Path, name: re.Pattern[str]) -> list[tuple[int, int]]:
    """(start, end) of the NVTX ranges whose name, read up to ", op_id = ", matches `name`: straight from SQLite."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    strings = dict(con.execute("SELECT id, value FROM StringIds"))
    out = []
    for s, e, text, tid in con.execute("SELECT start, end, text, textId FROM NVTX_EVENTS WHERE end IS NOT NULL"):
        full = text if text is not None else strings.get(tid, "")
        if name.fullmatch(full.split(OP_ID, 1)[0]):
            out.append((s, e))
    con.close()
    return _top(out)


STEPS = [  # (start, end, name) of the ProfilerStep ranges of the hand-made export, ns
    (10_000, 20_000, "ProfilerStep#1, op_id = 10"),
    (20_500, 31_000, "ProfilerStep#2, op_id = 25, sizes = [[], [4096]]"),
    (31_200, 40_000, "ProfilerStep#3, op_id = 40"),
]


def _export(path: Path) -> Path:
    """make_export's export with its NVTX ranges replaced: three ProfilerStep ranges as autograd-nvtx names them,
    an op range nested in each (also op_id-named), and one launch + kernel inside each step."""
    make_export(path)
    con = sqlite3.connect(path)
    t1 = gtid(PID, 4243)
    con.execute("DELETE FROM NVTX_EVENTS")
    rows = []
    for i, (a, b, name) in enumerate(STEPS):
        rows.append((a, b, 59, name, t1, None, 0))
        rows.append((a + 100, a + 900, 59, f"aten::mm, op_id = {100 + i}, sizes = [[4096, 4096]]", t1, None, 0))
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) VALUES (?,?,?,?,?,?,?)",
        rows,
    )
    g = gtid(PID, 0)
    for i, (a, _b, _name) in enumerate(STEPS):
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId, nameId, "
            "returnValue) VALUES (?,?,0,?,?,3,0)",
            (a + 200, a + 260, t1, 500 + i),
        )
        con.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, greenContextId, streamId, "
            "correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, "
            "blockY, blockZ, staticSharedMemory, dynamicSharedMemory, launchType) "
            "VALUES (?,?,0,1,0,7,?,?,1,2,32,1,1,1,32,1,1,0,0,1)",
            (a + 300, a + 2300, 500 + i, g),
        )
    con.commit()
    con.close()
    return path


def test_profiler_step_with_op_id_is_a_marked_step(tmp_path: Path) -> None:
    db = _export(tmp_path / "autograd_nvtx.sqlite")
    want = _nvtx_ranges(db, re.compile(r"ProfilerStep#\d+"))
    assert want == [(a, b) for a, b, _ in STEPS]  # the export holds what the test wrote
    got = find_steps(load_nsys_sqlite(db))
    assert [(s.start_ns, s.end_ns) for s in got.steps] == want
    assert {s.source for s in got.steps} == {"marked"}
    assert not any("inferred" in n for n in got.notes)


def test_other_op_id_names_are_not_markers(tmp_path: Path) -> None:
    """An op range's name with the suffix (aten::mm, op_id = ...) stays a non-step; a name only like the
    suffix form (no space around '=') is not read as one either."""
    db = _export(tmp_path / "autograd_nvtx.sqlite")
    con = sqlite3.connect(db)
    con.execute("UPDATE NVTX_EVENTS SET text = replace(text, ', op_id = ', ', op_id=') WHERE text LIKE 'Prof%'")
    con.commit()
    con.close()
    got = find_steps(load_nsys_sqlite(db))
    assert {s.source for s in got.steps} <= {"inferred"}


NESTED_RUNS = ["comm_overlap-sequential-nsys", "sync_pitfalls-deferred_sync-nsys"]


@pytest.mark.parametrize("name", NESTED_RUNS)
def test_demo_runs_with_op_id_step_ranges(name: str, tmp_path: Path) -> None:
    run = demo_run(name, tmp_path / "cache")
    db = run / "trace.sqlite"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    n_opid = con.execute(f"SELECT count(*) FROM NVTX_EVENTS WHERE {NAME} GLOB 'step [0-9]*, op_id = *'").fetchone()[0]
    con.close()
    assert n_opid > 0  # the demo run carries autograd-nvtx step ranges
    tl = load_nsys_sqlite(db)
    got = find_steps(tl)
    mine = sorted((s.start_ns, s.end_ns) for s in got.steps)
    # unchanged: the outer `step N` ranges (the op_id-named ones lie inside them)
    assert mine == sorted(_top_per_thread(db, plain_only=True))
    # the plain ranges deleted: the op_id-named ones are the markers
    copy = tmp_path / "op_id_only.sqlite"
    shutil.copyfile(db, copy)
    con = sqlite3.connect(copy)
    con.execute(f"DELETE FROM NVTX_EVENTS WHERE {NAME} GLOB 'step [0-9]*' AND {NAME} NOT LIKE '%op_id%'")
    con.commit()
    con.close()
    want = sorted(_top_per_thread(copy, plain_only=False))
    assert len(want) == len(mine) and want != mine
    got2 = find_steps(load_nsys_sqlite(copy))
    assert {s.source for s in got2.steps} == {"marked"}
    assert sorted((s.start_ns, s.end_ns) for s in got2.steps) == want


def _top_per_thread(db: Path, plain_only: bool) -> list[tuple[int, int]]:
    """The top-level `step N` ranges (plain names only, or any with the op_id suffix) of each process of an
    export, from SQLite."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    per: dict[int, list[tuple[int, int]]] = {}
    for s, e, name, gt in con.execute(f"SELECT start, end, {NAME}, globalTid FROM NVTX_EVENTS WHERE end IS NOT NULL"):
        name = name or ""
        head = name if plain_only else name.split(OP_ID, 1)[0]
        if re.fullmatch(r"step \d+", head):
            per.setdefault((gt >> 24) & 0xFFFFFF, []).append((s, e))
    con.close()
    return [r for ranges in per.values() for r in _top(ranges)]
