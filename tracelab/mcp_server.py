"""`tracelab mcp`: the store served over the Model Context Protocol (the `mcp` Python SDK, stdio transport).

A front end like cli.py and app/: every tool calls tracelab.api and returns the SAME JSON document as the
matching command's `--json` (as one text content item):

    list_runs()                                   = tracelab runs --json
    analyze(run, steps=, window=)                 = tracelab analyze RUN --json [--steps A:B | --window S:E]
    compare(a, b, steps=, window=, fail_if_slower=) = tracelab compare A B --json [--fail-if-slower PCT]
    gaps(run, limit=, cause=, steps=, window=)    the `gaps` of analyze --json (each with its evidence text),
                                                  longest first, at most `limit`, with their total count
    findings(run, steps=, window=)                the `findings` of analyze --json (message, where, data)
    sql(query, runs=, max_rows=)                  = tracelab sql QUERY --json [--run RUN ...]

Runs are named by id, id prefix or name in the store (never a file path: an agent reads only what was
imported). The store is opened read-only. Bad input (an unknown run, bad SQL, a bad range) is a tool error
with the one line the CLI prints. Analyses are kept for the last few (run, scope) asked for, and the SQL
views of a run once filled (the server is long-lived; a re-imported run has a new import time, so stale
entries are never used).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import MissingDependency, TracelabError

CACHE_SIZE = 8


def _sdk() -> tuple[Any, type[Exception]]:
    """(the server class, the tool-error class) of the installed SDK: mcp 2 (`MCPServer`) or mcp 1 (`FastMCP`)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError

        return MCPServer, ToolError
    except ImportError:
        pass
    try:
        from mcp.server.fastmcp import FastMCP
        from mcp.server.fastmcp.exceptions import ToolError

        return FastMCP, ToolError
    except ImportError as e:
        raise MissingDependency(f"`tracelab mcp` needs the mcp package ({e}); pip install 'tracelab[mcp]'") from None


class Service:
    """The tools' logic over one read-only store, independent of the SDK (each returns a JSON-able dict)."""

    def __init__(self, db: Path) -> None:
        from .store import Store

        self.store = Store(db, create=False, read_only=True)
        self._lock = threading.Lock()
        self._docs: OrderedDict[tuple, dict[str, Any]] = OrderedDict()
        self._timelines: OrderedDict[tuple, Any] = OrderedDict()
        from .store.sql import ViewCache

        self._views = ViewCache()

    def _key(self, run: str) -> tuple[str, str]:
        rid = self.store.resolve(run)
        return rid, self.store.get_run(rid).created

    def _remember(self, cache: OrderedDict, key: tuple, make: Callable[[], Any]) -> Any:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        value = make()
        cache[key] = value
        while len(cache) > CACHE_SIZE:
            cache.popitem(last=False)
        return value

    def timeline(self, run: str):
        key = self._key(run)
        return self._remember(self._timelines, key, lambda: self.store.load(key[0]))

    def _analysis(self, run: str, steps: str | None, window: str | None):
        key = (*self._key(run), steps, window)
        from .api.analysis import analyze

        return self._remember(self._docs, ("analysis", *key), lambda: analyze(self.timeline(run), steps=steps, window_us=window))

    def list_runs(self) -> list[dict[str, Any]]:
        """The runs in the store (as `tracelab runs --json`): id, name, format, backend, GPU, events, span."""
        return [r.to_dict() for r in self.store.runs()]

    def analyze(self, run: str, steps: str | None = None, window: str | None = None) -> dict[str, Any]:
        """The analysis of a run (id, id prefix or name), as `tracelab analyze RUN --json`: devices, steps,
        gaps with evidence, findings, notes. steps="A:B" (step indices) or window="START_US:END_US"
        restrict every figure."""
        key = ("doc", *self._key(run), steps, window)

        def make() -> dict[str, Any]:
            from tracelab.render.export.document import to_document

            from .api.analysis import scoped_timeline

            an = self._analysis(run, steps, window)
            doc = to_document(an)
            scoped = scoped_timeline(self.timeline(run), steps, window)
            ranks = None
            if len(an.trace.ranks) > 1:  # the cross-rank part, as `analyze --json` adds it
                from tracelab.analyses.ranks.view import rank_analysis

                ranks = rank_analysis(scoped, an)
            from .api.analysis import document_extras

            doc.update(document_extras(scoped, an, ranks))
            return doc

        return self._remember(self._docs, key, make)

    def compare(self, a: str, b: str, steps: str | None = None, window: str | None = None,
                fail_if_slower: float | None = None) -> dict[str, Any]:
        """Run b against baseline a, as `tracelab compare A B --json`; fail_if_slower=PCT adds the CI gate's
        decision (`gate`: one-sided Mann-Whitney U on the steady-state step times)."""
        from tracelab.analyses.results import SCHEMA_VERSION
        from tracelab.render.export.comparison import comparison_document
        from tracelab.render.export.document import to_document

        from .api.analysis import compare, scoped_timeline

        an_a, an_b = self._analysis(a, steps, window), self._analysis(b, steps, window)
        c = compare(an_a, an_b, scoped_timeline(self.timeline(a), steps, window),
                    scoped_timeline(self.timeline(b), steps, window))
        doc: dict[str, Any] = {
            "schema": SCHEMA_VERSION, "a": to_document(an_a), "b": to_document(an_b), "comparison": comparison_document(c)
        }
        if fail_if_slower is not None:
            from tracelab.analyses.gate import gate

            if fail_if_slower < 0:
                from .errors import BadInput

                raise BadInput("fail_if_slower must be >= 0", "compare")
            v = c.verdict
            doc["gate"] = gate(an_a, an_b, fail_if_slower, v.a_ns if v else 0, v.b_ns if v else 0,
                               v.basis if v else "span").to_dict()
        return doc

    def gaps(self, run: str, limit: int = 50, cause: str | None = None, steps: str | None = None,
             window: str | None = None) -> dict[str, Any]:
        """The run's GPU idle gaps, longest first (at most `limit`), each with its cause and evidence text;
        cause: dependency_wait | host_sync | input_wait | launch_latency | no_work | unknown | profiler."""
        gaps = self.analyze(run, steps, window)["gaps"]
        if cause:
            gaps = [g for g in gaps if g["cause"] == cause]
        longest = sorted(gaps, key=lambda g: -g["duration_ns"])[: max(0, int(limit))]
        return {"run": self._key(run)[0], "total": len(gaps), "total_ns": sum(g["duration_ns"] for g in gaps),
                "gaps": longest}

    def findings(self, run: str, steps: str | None = None, window: str | None = None) -> dict[str, Any]:
        """The run's findings (rule, severity, count, wasted_ns, message, where, data) and the analysis notes."""
        doc = self.analyze(run, steps, window)
        return {"run": self._key(run)[0], "findings": doc["findings"], "notes": doc["notes"]}

    def sql(self, query: str, runs: list[str] | None = None, max_rows: int = 1000) -> dict[str, Any]:
        """One read-only SELECT over the views runs, events, kernels, gaps, steps, findings, ranges,
        collectives (as `tracelab sql QUERY --json`); runs limits the per-run views to those runs."""
        from .api.sql import sql

        with self._lock:  # one in-memory database at a time; the view cache is shared
            return sql(query, self.store, runs or None, cache=self._views, max_rows=max_rows).to_dict()


def build_server(db: Path) -> Any:
    """The MCP server object with the tools registered (not started)."""
    import orjson

    Server, ToolError = _sdk()
    service = Service(db)
    server = Server("tracelab")

    def tool(fn: Callable[..., Any]) -> None:
        def call(*args: Any, **kwargs: Any) -> str:
            try:
                result = fn(*args, **kwargs)
            except TracelabError as e:
                raise ToolError(" ".join(str(e).split())) from None
            return orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS).decode()

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        call.__annotations__ = {**fn.__annotations__, "return": str}
        import inspect

        call.__signature__ = inspect.signature(fn).replace(return_annotation=str)  # type: ignore[attr-defined]
        server.tool(name=fn.__name__, structured_output=False)(call)

    for fn in (service.list_runs, service.analyze, service.compare, service.gaps, service.findings, service.sql):
        tool(fn)
    return server


def serve_stdio(db: Path) -> None:
    """Serve the store on stdin / stdout until the client closes the connection."""
    build_server(db).run("stdio")
