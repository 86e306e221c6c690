"""Read-only SQL over the store (`tracelab sql`): the documented views and the query engine.

The store keeps events as compressed columnar chunks (schema.py), and gaps, steps, findings, projected
ranges and matched collectives are results of the analysis, not stored rows. So a query runs in a private
in-memory SQLite database holding the VIEWS below as tables, filled for each query from the store:

1. the store is opened read-only (`Store(read_only=True)`: `PRAGMA query_only`, or a `mode=ro` /
   `immutable=1` URI on read-only media); nothing is ever written to it;
2. every view is created empty, and the query is compiled once (`EXPLAIN`) under an authorizer that records
   which views it reads: only those are filled (a query on `runs` loads no events, one on `kernels` runs
   no analysis), and only for the runs asked for (`--run`, default every run);
3. the query runs under an authorizer that allows only reading (SELECT, READ, functions, recursive CTEs):
   INSERT / UPDATE / DELETE / CREATE / DROP / ATTACH / PRAGMA / transactions are refused with "not
   authorized", which `query` reports as BadInput (exit 2). One statement per query.

Filling a run's analysis views (gaps, steps, findings, ranges, collectives) costs one `analyze` of it
(default options); callers that query repeatedly (the MCP server) keep a `ViewCache`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..errors import BadInput

# view -> ((column, SQL type, meaning), ...): the contract DESIGN.md documents ("SQL views")
VIEWS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "runs": (
        ("run_id", "TEXT", "run id"),
        ("name", "TEXT", "run name"),
        ("source", "TEXT", "the imported path"),
        ("format", "TEXT", "nsys | kineto"),
        ("backend", "TEXT", "recording backend (bundled runs)"),
        ("workload", "TEXT", "workload (bundled runs)"),
        ("variant", "TEXT", "variant (bundled runs)"),
        ("gpu", "TEXT", "GPU name"),
        ("created", "TEXT", "import time, ISO 8601 UTC"),
        ("events", "INTEGER", "events in the run"),
        ("start_ns", "INTEGER", "first event (trace clock, ns)"),
        ("end_ns", "INTEGER", "last event end (ns)"),
        ("ranks", "INTEGER", "ranks in the run"),
    ),
    "events": (
        ("run_id", "TEXT", ""),
        ("seq", "INTEGER", "row of the event in the run's timeline (start order)"),
        ("kind", "TEXT", "kernel | memcpy | memset | sync | runtime | driver | nvtx_range | nvtx_mark | cpu_op | gpu_annotation | other"),
        ("name", "TEXT", ""),
        ("category", "TEXT", "NVTX domain / Kineto category"),
        ("start_ns", "INTEGER", ""),
        ("end_ns", "INTEGER", ""),
        ("duration_ns", "INTEGER", ""),
        ("rank", "INTEGER", ""),
        ("device", "INTEGER", "-1 on the host"),
        ("stream", "INTEGER", "-1 on the host"),
        ("pid", "INTEGER", "-1 on the GPU"),
        ("tid", "INTEGER", "-1 on the GPU"),
        ("correlation", "INTEGER", "launch correlation id, -1 none"),
        ("bytes", "INTEGER", "memcpy / memset size, -1 unknown"),
        ("flags", "INTEGER", "bits: 1 comm, 2 orphan, 4 PDL, 8 graph, 16 blocking, 32 launch"),
    ),
    "kernels": (
        ("run_id", "TEXT", ""),
        ("seq", "INTEGER", "timeline row (joins events.seq)"),
        ("name", "TEXT", ""),
        ("start_ns", "INTEGER", ""),
        ("end_ns", "INTEGER", ""),
        ("duration_ns", "INTEGER", ""),
        ("rank", "INTEGER", ""),
        ("device", "INTEGER", ""),
        ("context", "INTEGER", ""),
        ("green_context", "INTEGER", "-1 none"),
        ("stream", "INTEGER", ""),
        ("correlation", "INTEGER", ""),
        ("grid_x", "INTEGER", ""), ("grid_y", "INTEGER", ""), ("grid_z", "INTEGER", ""),
        ("block_x", "INTEGER", ""), ("block_y", "INTEGER", ""), ("block_z", "INTEGER", ""),
        ("registers", "INTEGER", "per thread, -1 unknown"),
        ("shared_mem", "INTEGER", "bytes per block, -1 unknown"),
        ("graph_id", "INTEGER", "-1 not in a graph"),
        ("comm", "INTEGER", "1 for a communication (NCCL/RCCL) kernel"),
    ),
    "gaps": (
        ("run_id", "TEXT", ""),
        ("rank", "INTEGER", ""),
        ("device", "INTEGER", ""),
        ("start_ns", "INTEGER", ""),
        ("end_ns", "INTEGER", ""),
        ("duration_ns", "INTEGER", ""),
        ("cause", "TEXT", "dependency_wait | host_sync | input_wait | launch_latency | no_work | unknown | profiler"),
        ("evidence", "TEXT", "the evidence text of `analyze`"),
        ("host_data", "TEXT", "host data the rank's trace had"),
        ("launch_start_ns", "INTEGER", "start of the next op's launch call, NULL unknown"),
        ("host_active_fraction", "REAL", ""),
    ),
    "steps": (
        ("run_id", "TEXT", ""),
        ("rank", "INTEGER", ""),
        ("step", "INTEGER", "step index on its rank"),
        ("source", "TEXT", "marked | inferred"),
        ("start_ns", "INTEGER", ""),
        ("end_ns", "INTEGER", ""),
        ("duration_ns", "INTEGER", ""),
        ("gpu_busy_ns", "INTEGER", ""),
        ("gpu_idle_ns", "INTEGER", ""),
        ("kernels", "INTEGER", ""),
        ("blocking_syncs", "INTEGER", ""),
        ("warmup", "INTEGER", "1: a warm-up step"),
        ("outlier", "INTEGER", "1: an outlier step"),
    ),
    "findings": (
        ("run_id", "TEXT", ""),
        ("rule", "TEXT", ""),
        ("severity", "TEXT", ""),
        ("count", "INTEGER", ""),
        ("wasted_ns", "INTEGER", ""),
        ("message", "TEXT", ""),
        ("location", "TEXT", "the finding's `where` prose"),
        ("data", "TEXT", "the finding's structured data, JSON (json_extract works)"),
    ),
    "ranges": (
        ("run_id", "TEXT", ""),
        ("seq", "INTEGER", "timeline row of the host range"),
        ("kind", "TEXT", "nvtx (NVTX / record_function / user_annotation) | cpu_op"),
        ("name", "TEXT", ""),
        ("rank", "INTEGER", ""),
        ("pid", "INTEGER", ""),
        ("tid", "INTEGER", ""),
        ("depth", "INTEGER", "nesting depth on its thread (0 = outermost)"),
        ("start_ns", "INTEGER", "host range"),
        ("end_ns", "INTEGER", ""),
        ("gpu_ops", "INTEGER", "GPU ops whose launch call starts inside the range on its thread"),
        ("gpu_start_ns", "INTEGER", "projected range: first enclosed op's start (NULL: none)"),
        ("gpu_end_ns", "INTEGER", "last enclosed op's end (NULL: none)"),
        ("gpu_ns", "INTEGER", "union of the enclosed ops' GPU time"),
        ("kernel_ns", "INTEGER", "summed kernel time of the enclosed ops"),
    ),
    "collectives": (
        ("run_id", "TEXT", ""),
        ("name", "TEXT", "operation (AllReduce, ...)"),
        ("seq", "INTEGER", "position among this operation's calls"),
        ("participants", "INTEGER", ""),
        ("ranks", "TEXT", "comma-separated ranks"),
        ("start_ns", "INTEGER", "first arrival"),
        ("last_start_ns", "INTEGER", "last arrival"),
        ("end_ns", "INTEGER", "last participant's end"),
        ("skew_ns", "INTEGER", ""),
        ("last_rank", "INTEGER", "the rank that arrived last"),
        ("wait_ns", "INTEGER", "others' wait for the last arrival"),
    ),
}

Rows = Mapping[str, Sequence[Any]]  # column -> values (one view's rows for one run)
# fills the views `names` for run `run_id`: {view: columns}
Filler = Callable[[str, frozenset[str]], Mapping[str, Rows]]


class SqlResult(msgspec.Struct, frozen=True):
    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    views: tuple[str, ...]  # the views the query read
    runs: tuple[str, ...]  # the runs they were filled for
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "rows": [list(r) for r in self.rows],
            "views": list(self.views),
            "runs": list(self.runs),
            "notes": list(self.notes),
        }


class ViewCache(msgspec.Struct):
    """Filled views kept between queries of one process: (run id, import time, view) -> rows."""

    rows: dict[tuple[str, str, str], Rows] = msgspec.field(default_factory=dict)


_READ_ACTIONS = frozenset(
    {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, getattr(sqlite3, "SQLITE_RECURSIVE", 33)}
)


def _read_only(action: int, *_args: Any) -> int:
    return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY


def _create_views(conn: sqlite3.Connection) -> None:
    for view, cols in VIEWS.items():
        conn.execute(f'CREATE TABLE "{view}" ({", ".join(f"{c} {t}" for c, t, _ in cols)})')


def views_read(conn: sqlite3.Connection, query: str) -> frozenset[str]:
    """The views `query` reads (compiled, not run, under an authorizer that records table reads and
    refuses anything else). BadInput for SQL that does not compile or would write."""
    seen: set[str] = set()

    def record(action: int, arg1: Any, *_rest: Any) -> int:
        if action == sqlite3.SQLITE_READ and arg1 in VIEWS:
            seen.add(arg1)
        return _read_only(action)

    conn.set_authorizer(record)
    try:
        program = conn.execute("EXPLAIN " + query).fetchall()
    except sqlite3.Warning as e:  # more than one statement
        raise BadInput(f"one SQL statement per query ({e})", "sql") from None
    except (sqlite3.DatabaseError, sqlite3.ProgrammingError) as e:
        raise BadInput(_sql_error(e), "sql") from None
    finally:
        conn.set_authorizer(None)
    # a table whose columns the query does not read (`a JOIN b USING (x)` may read x from one side only)
    # still has a cursor opened on it: its root page in an OpenRead of the program
    roots = {int(r[3]) for r in program if r[1] == "OpenRead"}  # (addr, opcode, p1, p2 = root page, ...)
    by_root = dict(conn.execute("SELECT rootpage, name FROM sqlite_master WHERE type = 'table'").fetchall())
    seen.update(by_root[p] for p in roots if by_root.get(p) in VIEWS)
    return frozenset(seen)


def _sql_error(e: BaseException) -> str:
    text = str(e)
    if "not authorized" in text:
        return f"read-only: only SELECT queries over the views are allowed ({text})"
    return f"SQL error: {text}"


def query(
    sql: str,
    run_ids: Sequence[tuple[str, str]],
    runs_rows: Rows,
    fill: Filler,
    *,
    cache: ViewCache | None = None,
    max_rows: int | None = None,
) -> SqlResult:
    """Run one read-only SELECT over the views. `run_ids`: (run id, created) of the runs whose event and
    analysis views are filled; `runs_rows`: the `runs` view; `fill(run_id, views)` computes a run's
    rows of the named views. `max_rows` cuts the result (said in notes)."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise BadInput("empty SQL query", "sql")
    conn = sqlite3.connect(":memory:")
    try:
        _create_views(conn)
        needed = views_read(conn, text)
        _insert(conn, "runs", runs_rows)
        per_run = needed - {"runs"}
        notes: list[str] = []
        for rid, created in run_ids if per_run else ():
            todo = frozenset(v for v in per_run if cache is None or (rid, created, v) not in cache.rows)
            got = dict(fill(rid, todo)) if todo else {}
            for v in sorted(per_run):
                rows = got[v] if v in got else cache.rows[(rid, created, v)]  # type: ignore[union-attr]
                if cache is not None:
                    cache.rows[(rid, created, v)] = rows
                _insert(conn, v, rows)
        conn.execute("PRAGMA query_only=1")
        conn.set_authorizer(_read_only)
        try:
            cur = conn.execute(text)
            columns = tuple(d[0] for d in cur.description or ())
            rows = cur.fetchmany(max_rows + 1) if max_rows is not None else cur.fetchall()
        except sqlite3.Warning as e:
            raise BadInput(f"one SQL statement per query ({e})", "sql") from None
        except (sqlite3.DatabaseError, sqlite3.ProgrammingError) as e:
            raise BadInput(_sql_error(e), "sql") from None
        if max_rows is not None and len(rows) > max_rows:
            rows = rows[:max_rows]
            notes.append(f"result cut to the first {max_rows} rows")
        return SqlResult(
            columns=columns,
            rows=tuple(tuple(r) for r in rows),
            views=tuple(sorted(needed)),
            runs=tuple(r for r, _ in run_ids) if per_run else (),
            notes=tuple(notes),
        )
    finally:
        conn.close()


def _insert(conn: sqlite3.Connection, view: str, rows: Rows) -> None:
    cols = [c for c, _, _ in VIEWS[view]]
    missing = [c for c in cols if c not in rows]
    if missing:
        raise KeyError(f"view {view}: columns {missing} not filled")
    data: Iterable[tuple] = zip(*(rows[c] for c in cols), strict=True)
    conn.executemany(f'INSERT INTO "{view}" VALUES ({", ".join("?" * len(cols))})', data)

