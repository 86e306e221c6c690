"""Store commands: import, runs, sql, mcp, delete."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from .. import api
from ..errors import BadInput
from .common import (
    _IMPORTING,
    DEBUG_ENV,
    _db_option,
    _db_path,
    _echo_json,
    _one_line,
    _paths,
    _safe,
    err,
    import_path,
    open_store,
    terminal_width,
)
from .group import main

if TYPE_CHECKING:
    from ..api.types import Store


@main.command("import")
@click.argument("paths", nargs=-1, required=True, type=str, callback=_paths)
@click.option("--name", help="Name for the run (only with a single PATH).")
@click.option(
    "--replace", is_flag=True, help="Re-import traces already in the store (e.g. after an upgrade)."
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Local Dask worker processes that parse the rank files of a multi-rank run (default: one per "
    "core when the files hold ≥ 512 MiB of JSON, else serial; 1 = serial).",
)
@click.option(
    "--scheduler",
    metavar="tcp://HOST:PORT",
    help="Parse the rank files on this existing Dask scheduler (its workers must see the same paths).",
)
@_db_option
@click.pass_context
def import_cmd(
    ctx: click.Context,
    paths: tuple[Path, ...],
    name: str | None,
    replace: bool,
    workers: int | None,
    scheduler: str | None,
) -> None:
    """Import traces into the store and print their run ids.

    PATH is a Kineto JSON trace (.json, .json.gz), an nsys SQLite export (.sqlite), an .nsys-rep
    (exported through nsys when it is installed), a recorded run directory, or a directory or a
    quoted glob ('traces/rank*.json.gz') of per-rank traces: one multi-rank run, whose files are
    parsed in parallel on a local Dask cluster (or on --scheduler). A trace already in the store
    (same content) is not imported again: its existing run id is printed.
    """
    if name and len(paths) > 1:
        raise click.UsageError("--name needs a single PATH")
    store = open_store(ctx)
    ctx.meta[_IMPORTING] = True
    try:
        failed = _import_each(store, paths, name, replace, workers=workers, scheduler=scheduler)
    except BaseException:
        store.discard_if_unused()  # a failed first import into a new --db leaves no empty store
        raise
    store.discard_if_unused()
    if failed:
        if len(paths) > 1:
            err(f"{failed} of {len(paths)} paths not imported")
        ctx.exit(2)


def _import_each(store: Store, paths: tuple[Path, ...], name: str | None, replace: bool, **parallel: Any) -> int:
    """Import each path, printing its run id as it is stored; a bad path is one line on stderr and
    the others still import. Returns how many failed. `parallel`: workers / scheduler for rank sets."""
    failed = 0
    for path in paths:
        try:
            rid, new = import_path(store, path, name, replace, **parallel)
        except BadInput as e:
            if os.environ.get(DEBUG_ENV):
                raise
            err(f"error: {_one_line(e)}")
            failed += 1
            continue
        click.echo(rid)
        if new:
            run = store.get_run(rid)
            err(f"{_safe(path)}: imported as run {rid} ({run.events:,} events)")
        else:
            err(f"{_safe(path)}: already imported as run {rid}")
    return failed


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@_db_option
@click.pass_context
def runs(ctx: click.Context, as_json: bool) -> None:
    """List the runs in the store: id, name, backend, GPU, events, trace length, source (one line
    per run, fitted to the terminal width; --json has every field)."""
    db = _db_path(ctx)
    records = open_store(ctx, create=False, read_only=True).runs() if db.exists() else []
    if as_json:
        _echo_json([r.to_dict() for r in records])
        return
    if not records:
        err(f"no runs in {db} (import a trace with `tracelab import PATH` or run `tracelab demo`)")
        return
    from tracelab.render.text.runs import format_runs_table

    click.echo(format_runs_table(records, terminal_width()))


@main.command("sql")
@click.argument("query")
@click.option("--json", "as_json", is_flag=True, help="Print {columns, rows, views, runs, notes} as JSON.")
@click.option("--csv", "as_csv", is_flag=True, help="Print CSV (a header line, then the rows).")
@click.option("--run", "runs", multiple=True, help="Fill the per-run views for this run only (repeatable; default: all).")
@_db_option
@click.pass_context
def sql_cmd(ctx: click.Context, query: str, as_json: bool, as_csv: bool, runs: tuple[str, ...]) -> None:
    """Run one read-only SELECT over the store's views: runs, events, kernels, gaps, steps, findings,
    ranges, collectives (columns in docs/DESIGN.md, "SQL views"). The store is opened read-only."""
    if as_json and as_csv:
        raise click.UsageError("--json and --csv exclude each other")
    result = api.sql(query, open_store(ctx, create=False, read_only=True), runs or None)
    for note in result.notes:
        err(f"note: {_safe(note)}")
    if as_json:
        _echo_json(result.to_dict())
    elif as_csv:
        from tracelab.render.text.sql import format_csv

        click.echo(format_csv(result.columns, result.rows), nl=False)
    else:
        from tracelab.render.text.sql import format_table

        click.echo(format_table(result.columns, result.rows), nl=False)


@main.command("mcp")
@_db_option
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve the store over the Model Context Protocol on stdin/stdout (tools: list_runs, analyze, compare,
    gaps, findings, sql; results are the CLI's JSON). The store is opened read-only."""
    api.serve_mcp(_db_path(ctx))  # a missing SDK or store is one line, before anything is read


@main.command()
@click.argument("run_ids", nargs=-1, required=True)
@_db_option
@click.pass_context
def delete(ctx: click.Context, run_ids: tuple[str, ...]) -> None:
    """Delete runs (by id, id prefix or name) from the store."""
    store = open_store(ctx, create=False)
    rids = [store.resolve(r) for r in run_ids]  # every id checked before anything is deleted
    for rid in dict.fromkeys(rids):
        store.delete_run(rid)
        click.echo(rid)
        err(f"deleted run {rid}")

