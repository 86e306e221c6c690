"""Errors that must cost nothing: a busy port for `serve`, an output path that cannot be written for
`report` / `export` (checked before any parsing or analysis: the subject named here does not even
exist, and the error is about the output)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracelab.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACELAB_DEBUG", raising=False)
    monkeypatch.setenv("TRACELAB_DB", str(tmp_path / "store.db"))
    return tmp_path


def _one_line(result, *needles: str) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["report", "export"])
def test_missing_output_directory_fails_before_any_work(env, command):
    out = "/missing_dir_tracelab/x.html" if command == "report" else "/missing_dir_tracelab/x.perfetto.json"
    r = CliRunner().invoke(main, [command, "no-such-run-or-file", "-o", out])
    line = _one_line(r, "/missing_dir_tracelab", "does not exist")
    assert "no-such-run" not in line  # the subject was never looked at
    assert not (env / "store.db").exists()


@pytest.mark.parametrize("command", ["report", "export"])
def test_output_that_is_a_directory(env, command):
    target = env / ("d.html" if command == "report" else "d.json")
    target.mkdir()
    _one_line(CliRunner().invoke(main, [command, "no-such-run", "-o", str(target)]), str(target), "directory")


def test_export_wants_json(env):
    _one_line(CliRunner().invoke(main, ["export", "no-such-run", "-o", str(env / "x.perfetto")]), ".json")


def test_unwritable_directory(env):
    if os.geteuid() == 0:
        pytest.skip("root writes everywhere")
    ro = env / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        _one_line(CliRunner().invoke(main, ["report", "x", "-o", str(ro / "r.md")]), "not writable")
    finally:
        ro.chmod(0o700)


def test_serve_on_a_busy_port_is_one_line_exit_2(env):
    pytest.importorskip("dash")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "tracelab", "serve", "--port", str(port)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        f"error: port {port} on 127.0.0.1 is already in use (another server? pick one with --port)"
    ]


def test_serve_on_an_address_not_of_this_machine(env):
    pytest.importorskip("dash")
    r = CliRunner().invoke(main, ["serve", "--host", "192.0.2.1", "--port", "8050"])  # TEST-NET-1
    _one_line(r, "cannot listen on 192.0.2.1:8050")
