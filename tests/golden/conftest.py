"""Golden tests: small hand-made programs written as Kineto JSON and nsys SQLite, analysed through the
CLI (`tracelab analyze --json`), answers computed by hand in each test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rule_contract import check_findings
from trace_builder import Program

from tracelab.cli import main


def analyze_cli(path: Path, *args: str) -> dict:
    r = CliRunner().invoke(main, ["analyze", str(path), "--json", *args], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    check_findings(doc["findings"])  # every finding keeps its rule's data contract and prose
    return doc


@pytest.fixture(params=["kineto", "nsys"])
def fmt(request) -> str:
    return request.param


@pytest.fixture()
def run(tmp_path, fmt, monkeypatch):
    """run(program, *cli_args) -> the analyze --json document of the program written in `fmt`."""
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "t.db"))

    written = iter(range(1_000_000))

    def _run(p: Program, *args: str, cpu_ops: bool = True) -> dict:
        n = next(written)
        if fmt == "kineto":
            path = p.kineto(tmp_path / f"trace{n}.json", cpu_ops=cpu_ops)
        else:
            path = p.nsys(tmp_path / f"trace{n}.sqlite")
        return analyze_cli(path, *args)

    return _run
