"""Issue 30, class 2: `report X -o X` and `export X -o X` replaced the input trace with the output and
exited 0. An output path that is (or links to) an input, the store, or lies inside an input run
directory is refused with one line before anything is read; the input stays byte-identical."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from hostile_util import DATA, cli, nsys_copy, one_error_line


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def kineto_json(tmp_path) -> Path:
    """The bundled Kineto trace, as a plain .json (report/export only write .json/.html/.md)."""
    import gzip

    p = tmp_path / "trace.json"
    p.write_bytes(gzip.decompress((DATA / "torch_mixed_small" / "trace.json.gz").read_bytes()))
    return p


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_that_is_the_input(tmp_path, kineto_json, command):
    before = _sha(kineto_json)
    res = cli(tmp_path / "s.db", command, str(kineto_json), "-o", str(kineto_json))
    line = one_error_line(res, kineto_json)
    assert "overwrite" in line
    assert _sha(kineto_json) == before


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_through_a_symlink_or_hard_link_to_the_input(tmp_path, kineto_json, command):
    before = _sha(kineto_json)
    out = tmp_path / "out"
    out.mkdir()
    (out / "sym.json").symlink_to(kineto_json)
    os.link(kineto_json, out / "hard.json")
    for link in (out / "sym.json", out / "hard.json"):
        res = cli(tmp_path / "s.db", command, str(kineto_json), "-o", str(link))
        one_error_line(res, link)
        assert _sha(kineto_json) == before
    # and the input named through a symlinked directory
    (tmp_path / "alias").symlink_to(tmp_path)
    res = cli(tmp_path / "s.db", command, str(tmp_path / "alias" / kineto_json.name), "-o", str(kineto_json))
    one_error_line(res, kineto_json)
    assert _sha(kineto_json) == before


def test_report_over_the_baseline_or_the_store(tmp_path, kineto_json):
    base = tmp_path / "base.json"
    shutil.copyfile(kineto_json, base)
    before = _sha(base)
    res = cli(tmp_path / "s.db", "report", str(kineto_json), "--against", str(base), "-o", str(base))
    one_error_line(res, base)
    assert _sha(base) == before
    db = tmp_path / "store.json"  # a store file that happens to be named .json
    imp = cli(db, "import", str(nsys_copy(tmp_path / "n.sqlite")))
    assert imp.exit_code == 0, imp.stderr
    store_before = _sha(db)
    res = cli(db, "report", imp.stdout.split()[0], "-o", str(db))
    one_error_line(res, db)
    assert _sha(db) == store_before


def test_output_inside_an_input_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for r in (0, 1):
        shutil.copyfile(DATA / "ddp" / f"rank{r}.json.gz", run / f"rank{r}.json.gz")
    before = sorted(p.name for p in run.iterdir())
    res = cli(tmp_path / "s.db", "report", str(run), "-o", str(run / "report.json"))
    one_error_line(res, run / "report.json")
    assert sorted(p.name for p in run.iterdir()) == before


def test_a_distinct_output_still_works(tmp_path, kineto_json):
    before = _sha(kineto_json)
    out = tmp_path / "r.json"
    res = cli(tmp_path / "s.db", "report", str(kineto_json), "-o", str(out))
    assert res.exit_code == 0, res.stderr
    assert out.stat().st_size > 0 and _sha(kineto_json) == before
