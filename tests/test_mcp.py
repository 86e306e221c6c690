"""`tracelab mcp` served in a real subprocess and driven by the MCP SDK's own client (stdio_client +
ClientSession): every tool's result is the CLI's `--json` document for the same question, and the numbers
are checked against the raw trace files (tests/sql_oracle.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sql_oracle import raw

from tracelab.demo import demo_run

pytest.importorskip("mcp", reason="the mcp SDK is not installed (pip install 'tracelab[mcp]')")
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = Path(__file__).resolve().parents[1]
A, B = "sync_pitfalls-deferred_sync-nsys", "sync_pitfalls-nonzero_sync-torch"


def env(db: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "TRACELAB_DB": str(db)}


def cli(db: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tracelab", *args], capture_output=True, text=True, env=env(db),
                          timeout=300, check=False)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mcp") / "t.db"
    for name in (A, B):
        r = cli(path, "import", str(demo_run(name)), "--name", name)
        assert r.returncode == 0, r.stderr
    return path


def session_calls(db: Path, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    """Start `tracelab mcp`, list its tools, make the calls; (tool names, results)."""

    async def go(quiet):
        params = StdioServerParameters(command=sys.executable, args=["-m", "tracelab", "mcp"], env=env(db))
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = [t.name for t in (await s.list_tools()).tools]
            out = [await s.call_tool(name, args) for name, args in calls]
        return tools, out

    with open(os.devnull, "w") as quiet:  # the server's log lines
        return asyncio.run(asyncio.wait_for(go(quiet), 300))


def text(result) -> str:
    return result.content[0].text


def is_error(result) -> bool:
    return bool(getattr(result, "is_error", getattr(result, "isError", False)))


def test_tools_return_the_cli_json_and_the_raw_numbers(db):
    tools, res = session_calls(db, [
        ("list_runs", {}),
        ("analyze", {"run": A}),
        ("analyze", {"run": B, "steps": "1:"}),
        ("gaps", {"run": A, "limit": 3}),
        ("findings", {"run": B}),
        ("sql", {"query": "SELECT r.name, count(*) n FROM kernels JOIN runs r USING (run_id) GROUP BY r.name"}),
        ("compare", {"a": A, "b": B, "fail_if_slower": 5}),
        ("sql", {"query": "DROP TABLE runs"}),
        ("analyze", {"run": "no-such-run"}),
    ])
    assert set(tools) == {"list_runs", "analyze", "compare", "gaps", "findings", "sql"}
    assert not any(is_error(r) for r in res[:7])
    # the same documents as the CLI's --json
    assert json.loads(text(res[0])) == json.loads(cli(db, "runs", "--json").stdout)
    assert json.loads(text(res[1])) == json.loads(cli(db, "analyze", A, "--json").stdout)
    assert json.loads(text(res[2])) == json.loads(cli(db, "analyze", B, "--json", "--steps", "1:").stdout)
    # gaps: the total and the longest ones, against the raw GPU work's idle intervals of >= 10 µs
    merged: list[list[int]] = []
    for s, e, _, _ in sorted(raw(demo_run(A))["ops"]):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    idle = sorted((b[0] - a[1] for a, b in itertools.pairwise(merged) if b[0] - a[1] >= 10_000), reverse=True)
    g = json.loads(text(res[3]))
    assert g["total"] == len(idle) and g["total_ns"] == sum(idle)
    assert [x["duration_ns"] for x in g["gaps"]] == idle[:3] and all(x["evidence"] for x in g["gaps"])
    assert json.loads(text(res[4]))["findings"] == json.loads(cli(db, "analyze", B, "--json").stdout)["findings"]
    counts = {row[0]: row[1] for row in json.loads(text(res[5]))["rows"]}
    assert counts == {A: len(raw(demo_run(A))["kernels"]), B: len(raw(demo_run(B))["kernels"])}
    cmp = json.loads(text(res[6]))
    want = cli(db, "compare", A, B, "--json", "--fail-if-slower", "5")
    assert cmp == json.loads(want.stdout) and cmp["gate"]["exit_code"] == want.returncode
    # errors are tool errors with the CLI's line, and the server keeps serving
    assert is_error(res[7]) and "read-only" in text(res[7])
    assert is_error(res[8]) and "no-such-run" in text(res[8])


def test_without_a_store_the_command_says_so(tmp_path):
    r = cli(tmp_path / "none.db", "mcp")
    assert r.returncode == 2 and "no tracelab store" in r.stderr and not (tmp_path / "none.db").exists()
