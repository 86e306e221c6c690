"""Human output fits a 100-column terminal: `runs`, `analyze` of every bundled run, `compare` of each
variant against its workload's first variant, `workloads`, `export`'s messages (report .md is exempt).
Plus the compact runs table's truncation rules."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from click.testing import CliRunner

from tracelab.cli import main
from tracelab.render.text.runs import format_runs_table, truncate

WIDTH = 100
ENV = {"COLUMNS": str(WIDTH)}


def _too_long(text: str, width: int = WIDTH) -> list[str]:
    return [line for line in text.splitlines() if len(line) > width]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    from tracelab.demo import demo_archives

    if not demo_archives():
        pytest.skip("no bundled demo runs")
    tmp = tmp_path_factory.mktemp("fit")
    db = tmp / "store.db"
    mp = pytest.MonkeyPatch()
    mp.setenv("TRACELAB_DB", str(db))
    mp.setenv("TRACELAB_DEMO_CACHE", str(tmp / "cache"))
    r = CliRunner().invoke(main, ["demo", "--no-serve"])
    assert r.exit_code == 0, r.output
    names = [line.split("· ", 1)[1] for line in r.stderr.splitlines() if "· " in line]
    yield names
    mp.undo()


def test_runs_fits_and_never_wraps(store, monkeypatch):
    r = CliRunner().invoke(main, ["runs"], env=ENV)
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert len(lines) == len(store) + 1  # a header and one line per run
    assert not _too_long(r.stdout)
    assert lines[0].split() == ["id", "name", "backend", "gpu", "events", "trace"]
    shown = {line.split()[1] for line in lines[1:]}
    assert shown == set(store)  # every name fits whole at 100 columns
    narrow = CliRunner().invoke(main, ["runs"], env={"COLUMNS": "50"}).stdout.splitlines()
    assert len(narrow) == len(store) + 1 and max(len(x) for x in narrow) <= 50
    for line in narrow[1:]:
        name = line.split()[1]
        if name.endswith("…"):
            assert any(full.startswith(name[:-1]) for full in store), name


def test_analyze_every_bundled_run_fits(store):
    cli = CliRunner()
    for name in store:
        r = cli.invoke(main, ["analyze", name], env=ENV)
        assert r.exit_code == 0, (name, r.output)
        assert not _too_long(r.stdout), (name, _too_long(r.stdout))


def test_a_wrapped_note_goes_on_under_its_text(store):
    """Notes wrap with a hanging indent: a continuation line starts under the note's text, never at
    column 0 (issue 28)."""
    name = next(n for n in store if n.startswith("sync_pitfalls/item_every_step/"))
    r = CliRunner().invoke(main, ["analyze", name], env=ENV)
    lines = r.stdout.rstrip().splitlines()
    notes = lines[lines.index("Notes") + 1:]
    notes = notes[: notes.index("")] if "" in notes else notes  # the sections after the notes (ranges, ...)
    assert notes and notes[0].startswith("  - ")
    assert len(notes) > sum(x.startswith("  - ") for x in notes)  # at 100 columns the warm-up note wraps
    for x in notes:
        assert x.startswith("  - ") or (x.startswith("    ") and x[4] != " "), notes


def test_compare_fits(store):
    firsts: dict[tuple[str, str], str] = {}
    pairs = []
    for name in store:
        workload, _variant, backend = name.split("/")[:3]
        key = (workload, backend)
        if key not in firsts:
            firsts[key] = name
        elif len(pairs) < 12 and name.count("/") == 2:
            pairs.append((firsts[key], name))
    assert len(pairs) >= 8
    cli = CliRunner()
    for a, b in pairs:
        r = cli.invoke(main, ["compare", a, b], env=ENV)
        assert r.exit_code == 0, (a, b, r.output)
        assert not _too_long(r.stdout), (a, b, _too_long(r.stdout))
        assert r.stdout.splitlines()[0].startswith("B ")  # the verdict first


def test_workloads_help_and_export_messages_fit(store, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the export prints the path it wrote: keep it short
    cli = CliRunner()
    for args in (["workloads"], ["--help"], ["runs", "--help"], ["compare", "--help"], ["export", "--help"]):
        r = cli.invoke(main, args, env=ENV)
        assert r.exit_code == 0 and not _too_long(r.output), (args, _too_long(r.output))
    r = cli.invoke(main, ["export", store[0], "-o", "x.perfetto.json"], env=ENV)
    assert r.exit_code == 0 and not _too_long(r.output), _too_long(r.output)


# ---- the table itself -------------------------------------------------------------------------------


def test_truncate_at_word_boundaries():
    assert truncate("graphs/eager/nsys", 40) == "graphs/eager/nsys"
    assert truncate("green_contexts/green_ctx/nsys", 20) == "green_contexts/…"
    assert truncate("sync_pitfalls/item_every_step/torch", 25) == "sync_pitfalls/item_every…"
    assert truncate("averyveryverylongsingleword", 10) == "averyvery…"  # no boundary: cut at the width
    assert truncate("abc", 1) == "…" and truncate("abc", 0) == ""


@dataclass
class _Run:
    id: str
    name: str
    backend: str
    gpu: str
    events: int
    source: str
    span_ns: int


def test_table_drops_columns_before_cutting_names():
    runs = [_Run("abcd1234", "overlap/streams_pageable/torch", "torch", "NVIDIA H200", 892, "/x/y/z.json", 166_890_000)]
    wide = format_runs_table(runs, 200).splitlines()
    assert wide[0].split() == ["id", "name", "backend", "gpu", "events", "trace", "source"]
    # the GPU without its vendor
    assert wide[1].split() == ["abcd1234", "overlap/streams_pageable/torch", "torch", "H200", "892",
                               "166.89", "ms", "y/z.json"]
    # widths: id 8, name 30, backend 7, gpu 4, events 6, trace 9, source 8, 2 between columns
    assert max(len(x) for x in wide) == 8 + 30 + 7 + 4 + 6 + 9 + 8 + 6 * 2
    mid = format_runs_table(runs, 70).splitlines()  # 74 without the source: the GPU goes too (68)
    assert mid[0].split() == ["id", "name", "backend", "events", "trace"]
    assert "overlap/streams_pageable/torch" in mid[1]
    assert format_runs_table(runs, 60).splitlines()[0].split() == ["id", "name", "events", "trace"]
    tight = format_runs_table(runs, 40).splitlines()
    assert max(len(x) for x in tight) <= 40 and tight[1].split()[1] == "overlap/…"


def test_ranks_section_stays_within_100_columns_on_a_wide_terminal(tmp_path):
    """Issue 28: on a wide terminal the Ranks section's collectives and stragglers lines were 150-200
    characters. Whatever the terminal, they wrap at 100; the table has a row per rank of the raw files."""
    import gzip
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from multigpu_util import MULTI, run_dir

    ranks = sorted(json.loads(gzip.decompress(f.read_bytes()))["distributedInfo"]["rank"]
                   for f in (MULTI / "ddp2_sleep_torch" / "ranks").glob("*.json.gz"))
    path = run_dir("ddp2_sleep_torch", tmp_path)
    r = CliRunner().invoke(main, ["analyze", str(path)],
                           env={"COLUMNS": "200", "TRACELAB_DB": str(tmp_path / "t.db")})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Ranks"))
    section = lines[start:lines.index("", start)] if "" in lines[start:] else lines[start:]
    assert any(line.startswith("Collectives matched across ranks") for line in section), section
    assert max(len(line) for line in section) <= 100, [line for line in section if len(line) > 100]
    table = [line.split()[0] for line in section[2:] if line.split() and line.split()[0].isdigit()]
    assert [int(x) for x in table] == ranks
