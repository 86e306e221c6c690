"""`tracelab sql` through the real CLI (subprocesses) on a store of two bundled runs (nsys and torch), with
every expected number read from the raw trace files (tests/sql_oracle.py), and the store left untouched."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from sql_oracle import projected, raw, union_length

from tracelab.demo import demo_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("sync_pitfalls-item_every_step-nsys", "sync_pitfalls-item_every_step-torch")
STEP = re.compile(r"^step \d+$")


def cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": str(db), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True, env=env, timeout=300, check=False)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("sql") / "t.db"
    for name in RUNS:
        r = cli(db, "import", str(demo_run(name)), "--name", name)
        assert r.returncode == 0, r.stderr
    return db


def query(db: Path, sql: str, *extra: str) -> list[dict]:
    r = cli(db, "sql", sql, "--json", *extra)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    return [dict(zip(doc["columns"], row, strict=True)) for row in doc["rows"]]


def test_kernels_view_matches_the_raw_kernels(store):
    rows = query(store, "SELECT r.name, count(*) n, sum(k.duration_ns) t, count(DISTINCT k.name) names "
                        "FROM kernels k JOIN runs r USING (run_id) GROUP BY r.name")
    got = {r["name"]: r for r in rows}
    for name in RUNS:
        ks = raw(demo_run(name))["kernels"]
        assert got[name]["n"] == len(ks)
        assert abs(got[name]["t"] - sum(e - s for s, e, _ in ks)) <= 2 * len(ks)  # Kineto µs -> ns rounding
        assert got[name]["names"] == len({n for *_, n in ks})


def test_gaps_view_matches_idle_intervals_of_the_raw_gpu_work(store):
    rows = query(store, "SELECT r.name, count(*) n, sum(g.duration_ns) t FROM gaps g JOIN runs r USING (run_id) "
                        "GROUP BY r.name")
    got = {r["name"]: r for r in rows}
    for name in RUNS:
        merged: list[list[int]] = []
        for s, e, _, _ in sorted(raw(demo_run(name))["ops"]):
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        idle = [b[0] - a[1] for a, b in itertools.pairwise(merged) if b[0] - a[1] >= 10_000]  # 10 µs
        assert got[name]["n"] == len(idle)
        assert abs(got[name]["t"] - sum(idle)) <= 4 * len(idle)


def test_steps_and_ranges_views_match_the_markers_and_the_projection(store):
    steps = {r["name"]: r["n"] for r in query(store, "SELECT r.name, count(*) n FROM steps s JOIN runs r USING (run_id) "
                                                    "GROUP BY r.name")}
    for name in RUNS:
        run = demo_run(name)
        assert steps[name] == sum(1 for *_, n in raw(run)["ranges"] if STEP.match(n))
        for rng in ("forward", "h2d batch"):
            rows = query(store, "SELECT gpu_ops, gpu_ns, kernel_ns FROM ranges JOIN runs r USING (run_id) "
                                f"WHERE r.name = '{name}' AND ranges.name = '{rng}' ORDER BY ranges.start_ns")
            want = projected(run, rng)
            assert len(rows) == len(want) > 0
            for g, (ops, gpu, kern) in zip(rows, want, strict=True):
                assert g["gpu_ops"] == ops
                assert abs(g["gpu_ns"] - gpu) <= 2 * ops and abs(g["kernel_ns"] - kern) <= 2 * ops


def test_findings_view_and_the_run_filter(store):
    rows = query(store, "SELECT DISTINCT r.name, rule, json_extract(data, '$') IS NOT NULL ok FROM findings "
                        "JOIN runs r USING (run_id)", "--run", RUNS[0])
    assert {r["name"] for r in rows} == {RUNS[0]}  # only the run asked for was analysed
    assert "sync_per_iteration" in {r["rule"] for r in rows} and all(r["ok"] for r in rows)


def test_csv_and_table_output(store):
    r = cli(store, "sql", "SELECT name, events FROM runs ORDER BY name", "--csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0] == ["name", "events"] and [x[0] for x in rows[1:]] == sorted(RUNS)
    r = cli(store, "sql", "SELECT name FROM runs")
    assert r.returncode == 0 and "(2 rows)" in r.stdout


@pytest.mark.parametrize("sql", [
    "DELETE FROM runs",
    "INSERT INTO runs (run_id) VALUES ('x')",
    "CREATE TABLE x (a)",
    "ATTACH DATABASE '/tmp/x.db' AS x",
    "PRAGMA writable_schema=1",
    "SELECT * FROM nope",
    "SELECT 1; DROP TABLE runs",
    "",
])
def test_bad_or_writing_sql_is_one_line_exit_2_and_the_store_is_unchanged(store, sql):
    before = store.read_bytes()
    listing = sorted(p.name for p in store.parent.iterdir())
    r = cli(store, "sql", sql)
    assert r.returncode == 2, r.stderr
    assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert store.read_bytes() == before
    assert sorted(p.name for p in store.parent.iterdir()) == listing


def test_union_helper():
    assert union_length([(0, 5), (3, 9), (20, 21)]) == 10
