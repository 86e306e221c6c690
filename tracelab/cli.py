"""`tracelab` command line: thin wiring of parsers, store, analyses and renderers.

Conventions (DESIGN.md): results on stdout, progress and logs on stderr; exit 0 on success, 2 on bad
input or usage (one line naming the file and what is wrong), 1 on an internal error (one line; set
TRACELAB_DEBUG=1 for the traceback). Heavy or optional modules are imported inside the commands, so
`tracelab --help` is fast and works without dash or torch.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from . import __version__
from .errors import BadInput, MissingDependency, StoreInterrupted, TracelabError

if TYPE_CHECKING:
    from .analyses.results import Analysis, AnalysisOptions
    from .model.timeline import Timeline
    from .store import Store

DEBUG_ENV = "TRACELAB_DEBUG"


def _one_line(text: object) -> str:
    """An error message as one terminal-safe line (file names and run names are untrusted)."""
    from .render.compare_text import term_safe

    return term_safe(" ".join(str(text).split()))


def err(message: str) -> None:
    """A log line on stderr."""
    click.echo(message, err=True)


class TracelabGroup(click.Group):
    """Turns tracelab's typed errors into one line on stderr and the error's exit code."""

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        """A mistyped command is one line (click's suggestion kept), not click's usage block."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            if ctx.resilient_parsing:
                raise
            err(f"error: {_one_line(e.format_message())} (tracelab --help lists the commands)")
            ctx.exit(2)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except TracelabError as e:
            if os.environ.get(DEBUG_ENV):
                raise
            err(f"error: {_one_line(e)}")
            ctx.exit(e.exit_code)
        except StoreInterrupted as e:  # Ctrl-C landed once the run was committed: it IS stored
            click.echo(e.run_id)
            err(f"interrupted, but run {e.run_id} had already been stored (it is complete)")
            ctx.exit(130)
        except KeyboardInterrupt:
            err(
                "interrupted; the import in progress was rolled back"
                if ctx.meta.get(_IMPORTING)
                else "interrupted"
            )
            ctx.exit(130)
        except BrokenPipeError:  # `tracelab runs | head`: the reader left, nothing to report
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
            ctx.exit(0)
        except Exception as e:
            if os.environ.get(DEBUG_ENV):
                raise
            store_error = _store_error(ctx, e)
            if store_error is not None:
                err(f"error: {_one_line(store_error)}")
                ctx.exit(2)
            err(
                f"internal error: {type(e).__name__}: {_one_line(e)} (rerun with {DEBUG_ENV}=1 for the traceback)"
            )
            ctx.exit(1)


_IMPORTING = "tracelab.importing"  # ctx.meta flag: a store write is under way (for the Ctrl-C line)


def _store_error(ctx: click.Context, exc: Exception) -> BadInput | None:
    """A SQLite error from where the store lives (read-only, disk full, I/O, locked) that escaped the
    Store's own translation, as the one line naming the store file; None for anything else (a bug)."""
    import sqlite3

    from .store.schema import describe_sqlite_error, is_environment_error

    if isinstance(exc, sqlite3.OperationalError) and is_environment_error(exc):
        return BadInput(describe_sqlite_error(exc), _db_path(ctx))
    if isinstance(exc, OSError) and exc.errno in (28, 30, 122):  # ENOSPC, EROFS, EDQUOT
        return BadInput(str(exc.strerror or exc), exc.filename)
    return None


# ---- shared plumbing ----------------------------------------------------------------------------


def _db_option(f: Callable) -> Callable:
    def remember(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
        if value is not None:
            ctx.ensure_object(dict)["db"] = value

    return click.option(
        "--db",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=remember,
        help="Store file (default: $TRACELAB_DB or the user data directory).",
    )(f)


def _db_path(ctx: click.Context) -> Path:
    from .settings import default_db_path

    db = ctx.ensure_object(dict).get("db")
    return Path(db) if db else default_db_path()


def open_store(ctx: click.Context, *, create: bool = True, read_only: bool = False) -> Store:
    from .store import Store

    return Store(_db_path(ctx), create=create, read_only=read_only)


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False)


class _Progress:
    """A rich progress bar on stderr when it is a terminal; silent otherwise."""

    def __init__(self, label: str) -> None:
        # rich is imported only for a terminal: a pipe or a file gets no bar, and no import cost
        self.enabled = sys.stderr.isatty() or bool(os.environ.get("FORCE_TERMINAL") or os.environ.get("TTY_COMPATIBLE"))
        self.console = _stderr_console() if self.enabled else None
        self.enabled = self.enabled and self.console.is_terminal
        self.label = label
        self._bar = None
        self._task = None

    def __enter__(self) -> _Progress:  # noqa: PYI034
        if self.enabled:
            from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

            self._bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.label, total=None)
        return self

    def phase(self, description: str) -> Callable[[int, int], None]:
        """A `progress(done, total)` callback for one phase (parse, store)."""
        if self._bar is not None:
            self._bar.update(self._task, description=f"{self.label}: {description}", completed=0, total=None)

        def update(done: int, total: int | None = None) -> None:
            if self._bar is not None:
                self._bar.update(self._task, completed=done, total=total or None)

        return update

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(*exc)


def _parse(path: Path, progress: Callable[[int, int], None] | None = None) -> Timeline:
    from .api import load

    return load(path, progress)


def import_path(
    store: Store, path: Path, name: str | None = None, replace: bool = False, **parallel: Any
) -> tuple[str, bool]:
    """Import one trace (file or directory) through `tracelab.api.import_trace`, or a directory / glob of
    per-rank traces through `tracelab.distributed.import_rank_set` (`parallel`: workers / scheduler);
    returns (run id, newly imported)."""
    from . import distributed
    from .api import import_trace

    with _Progress(path.name) as bar:
        if distributed.is_rank_set(path):
            return distributed.import_rank_set(
                path, store, name, replace=replace, parse_progress=bar.phase("parsing ranks"),
                store_progress=bar.phase("storing"), **parallel,
            )
        done = import_trace(
            path, store, name, replace=replace, parse_progress=bar.phase("parsing"), store_progress=bar.phase("storing")
        )
    return done.run_id, done.new


def _options(gap_threshold_us: float | None, exclude_orphans: bool) -> AnalysisOptions:
    from .analyses.results import AnalysisOptions

    if gap_threshold_us is None:
        return AnalysisOptions(exclude_orphans=exclude_orphans)
    return AnalysisOptions(gap_threshold_ns=round(gap_threshold_us * 1000), exclude_orphans=exclude_orphans)


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """numpy's OpenBLAS starts a thread per core when numpy is first imported (~50 ms of a 0.2 s start-up
    here); tracelab does no linear algebra, so numpy loads with one. The variable is set only for that
    import (and only where the user has not set it): programs tracelab starts later see their own."""
    if "numpy" in sys.modules or _BLAS_THREADS in os.environ:
        yield
        return
    os.environ[_BLAS_THREADS] = "1"
    try:
        yield
    finally:
        os.environ.pop(_BLAS_THREADS, None)


_BLAS_THREADS = "OPENBLAS_NUM_THREADS"


def entry() -> None:
    """The `tracelab` command (and `python -m tracelab`)."""
    main(prog_name="tracelab")


def load_subject(ctx: click.Context, ref: str) -> tuple[Timeline, str]:
    """RUN_OR_PATH: an existing path is parsed directly (the store is not touched); anything else
    is a run id, id prefix or name in the store. Returns the timeline and a title."""
    from .api import resolve

    _not_empty(ref)
    path = Path(ref)
    if path.exists():
        with _one_blas_thread():
            from tracelab.io import detect  # noqa: F401 - numpy loads with one BLAS thread
        with _Progress(path.name) as bar:
            return _parse(path, bar.phase("parsing")), str(path)
    with _one_blas_thread():
        from .store import Store

    db = _db_path(ctx)
    if not db.exists():
        raise BadInput(
            f"no such file, and no run with this id or name (the store {db} does not exist yet)", ref
        )
    return resolve(ref, Store(db, create=False, read_only=True))


def load_named_subject(ctx: click.Context, ref: str) -> tuple[Timeline, str, str]:
    """`load_subject` plus a short label for tables and verdicts: the run's name, or the file name."""
    timeline, title = load_subject(ctx, ref)
    if not Path(ref).exists() and title.startswith("run ") and " · " in title:
        return timeline, title, title.split(" · ", 1)[1]
    return timeline, title, Path(title).name or title


def _analyze(
    timeline: Timeline, options: AnalysisOptions, steps: str | None = None, window: str | None = None
) -> Analysis:
    from .api import analyze

    return analyze(timeline, options, steps=steps, window_us=window)


def _scoped(timeline: Timeline, steps: str | None, window: str | None) -> Timeline:
    from .api import scoped_timeline

    return scoped_timeline(timeline, steps, window)


def _check_scope(steps: str | None, window: str | None) -> None:
    """Bad --steps / --window syntax is a usage error before any file is read."""
    if steps is not None or window is not None:
        from .analyses.scope import parse_scope

        parse_scope(steps, window)


def _echo_json(doc: Any) -> None:
    """The document as indented JSON, written as bytes straight to stdout (no decode, no copy)."""
    import orjson

    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE)
    out = _stdout_bytes()
    out.write(data)
    out.flush()


def _stdout_bytes() -> BinaryIO:
    """stdout as bytes (after whatever text was written to it), for JSON written by orjson."""
    sys.stdout.flush()
    return sys.stdout.buffer


def _print_analysis(analysis: Analysis, title: str, top_gaps: int = 10) -> None:
    from rich.console import Console, Group

    from .render.text import analysis_renderables, format_analysis

    console = Console(highlight=False, soft_wrap=False)
    if console.is_terminal:
        console.print(Group(*analysis_renderables(analysis, title=title, top_gaps=top_gaps)))
    else:  # a pipe or a file: plain text, no colour, no trailing blanks
        click.echo(format_analysis(analysis, title=title, top_gaps=top_gaps, width=terminal_width()), nl=False)


def _human_ns(ns: int) -> str:
    from .render.format import fmt_ns

    return fmt_ns(ns)


def terminal_width() -> int:
    """Columns for human output: $COLUMNS, else the terminal's width, else 100 (a pipe)."""
    import shutil

    return max(shutil.get_terminal_size((100, 24)).columns, 40)


def _safe(text: object, limit: int | None = None) -> str:
    from .render.compare_text import term_safe

    return term_safe(text, limit)


# ---- commands -----------------------------------------------------------------------------------


@click.group(cls=TracelabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracelab")
@_db_option
def main() -> None:
    """tracelab: where is my GPU idle, what overlaps with what, and why.

    Import nsys SQLite and Kineto (torch.profiler) traces, analyse busy/idle time, overlap, idle
    gaps and their causes, and explore them in a dashboard or in reports.
    """


def _paths(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[Path, ...]:
    for v in values:
        _not_empty(v)
    return tuple(Path(v) for v in values)


def _not_empty(ref: str) -> None:
    """An empty argument names no trace: Path("") is the current directory, which was then read."""
    if not ref.strip():
        raise BadInput(f"an empty argument ({ref!r}) names no trace file, directory or run")


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
    from .render.runs_text import format_runs_table

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
    from .api import sql

    result = sql(query, open_store(ctx, create=False, read_only=True), runs or None)
    for note in result.notes:
        err(f"note: {_safe(note)}")
    if as_json:
        _echo_json(result.to_dict())
    elif as_csv:
        from .render.sql_text import format_csv

        click.echo(format_csv(result.columns, result.rows), nl=False)
    else:
        from .render.sql_text import format_table

        click.echo(format_table(result.columns, result.rows), nl=False)


@main.command("mcp")
@_db_option
@click.pass_context
def mcp_cmd(ctx: click.Context) -> None:
    """Serve the store over the Model Context Protocol on stdin/stdout (tools: list_runs, analyze, compare,
    gaps, findings, sql; results are the CLI's JSON). The store is opened read-only."""
    from .mcp_server import _sdk, serve_stdio

    _sdk()  # a missing SDK is one line, before anything is read
    db = _db_path(ctx)
    if not db.exists():
        raise BadInput("no tracelab store here (import a trace first, or pass --db)", db)
    serve_stdio(db)


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


def _gap_threshold(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    from .analyses.scope import check_gap_threshold_us

    return None if value is None else check_gap_threshold_us(value)


_gap_option = click.option(
    "--gap-threshold-us",
    type=str,  # checked by _gap_threshold: one line for nan, inf, 1e308 or -5 (click's usage is 3)
    callback=_gap_threshold,
    default=None,
    help="Shortest idle interval reported as a gap, in µs (default 10).",
)
_orphan_option = click.option(
    "--exclude-orphans",
    is_flag=True,
    help="Leave out GPU events whose correlation id matches no host launch (as TraceLens does).",
)


def _scope_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--steps A:B / --window START_US:END_US: restrict every figure to those steps or that window."""
    f = click.option(
        "--window",
        metavar="START_US:END_US",
        help="Restrict every figure to this window, in µs from the run start (either side may be left out).",
    )(f)
    return click.option(
        "--steps",
        metavar="A:B",
        help="Restrict every figure to steps A..B-1 of each rank (e.g. 1: drops the warm-up step; 4 = step 4).",
    )(f)


@main.command()
@click.argument("run_or_path")
@click.option("--json", "as_json", is_flag=True, help="Print the analysis document (schema 2, docs/DESIGN.md).")
@_gap_option
@_orphan_option
@_scope_options
@click.option(
    "--input-word",
    "input_words",
    multiple=True,
    help="A word that marks a user range as data loading (gap cause input_wait); repeat it; replaces the "
    "default data, batch, load.",
)
@click.option(
    "--top",
    "top_gaps",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Gaps listed in the human output.",
)
@click.option("--ranges", "all_ranges", is_flag=True, help="List every range of the GPU-time-by-range table (default: top 10).")
@_db_option
@click.pass_context
def analyze(
    ctx: click.Context,
    run_or_path: str,
    as_json: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    top_gaps: int,
    steps: str | None,
    window: str | None,
    input_words: tuple[str, ...] = (),
    all_ranges: bool = False,
) -> None:
    """Analyse a run (id, id prefix or name) or a trace file (parsed directly, not stored):
    busy/idle per device, overlap, idle gaps with their causes, steps, findings."""
    _check_scope(steps, window)
    timeline, title = load_subject(ctx, run_or_path)
    options = _options(gap_threshold_us, exclude_orphans)
    if input_words:
        from dataclasses import replace

        options = replace(options, input_words=tuple(input_words))
    analysis = _analyze(timeline, options, steps, window)
    ranks = None
    if len(analysis.trace.ranks) > 1:  # cross-rank part (tracelab/analyses/ranks.py), same range
        from .analyses.ranks import rank_analysis

        ranks = rank_analysis(_scoped(timeline, steps, window), analysis)
    if as_json:
        from .api import document_extras
        from .render.document import write_document

        out = _stdout_bytes()
        write_document(analysis, out.write, document_extras(_scoped(timeline, steps, window), analysis, ranks))
        out.flush()
    else:
        from .analyses.critical_path import critical_path_for  # issue 24: the critical path of each step
        from .api import health as trace_health
        from .api import ranges as range_projection
        from .render.health_text import health_lines

        health = trace_health(_scoped(timeline, steps, window), analysis)
        projection = range_projection(_scoped(timeline, steps, window), analysis)
        cpath = critical_path_for(_scoped(timeline, steps, window), analysis, ranks.collectives if ranks else None)

        click.echo("\n".join(health_lines(health, terminal_width())) + "\n")
        _print_analysis(analysis, title, top_gaps)
        from .render.workload_text import workload_lines

        lines = workload_lines(_scoped(timeline, steps, window))
        if lines:
            click.echo("\nWorkload figures")
            from .render.compare_text import term_safe

            click.echo("\n".join(term_safe(x) for x in lines))
        from .render.ranges_text import ranges_lines

        range_table = ranges_lines(projection, None if all_ranges else 10, terminal_width())
        if range_table:
            click.echo("\n" + "\n".join(range_table))
        from .api import memory

        mem = memory(_scoped(timeline, steps, window), analysis)
        if mem is not None:
            from .render.memory_text import memory_lines

            click.echo("\n" + "\n".join(memory_lines(mem, analysis.trace.start_ns, terminal_width())))
        if ranks:
            from .render.ranks_text import format_ranks

            click.echo(format_ranks(ranks, width=terminal_width()), nl=False)
        from .render.critical_path_text import format_critical_path

        click.echo(format_critical_path(cpath), nl=False)


@main.command()
@click.argument("a")
@click.argument("b")
@click.option("--json", "as_json", is_flag=True, help="Print both analyses and the comparison as JSON.")
@click.option(
    "--fail-if-slower",
    "fail_pct",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="CI gate: exit 3 when B's steady-state step time is slower than A's by more than PCT %% "
    "(one-sided Mann-Whitney U on the per-step times, p < 0.05), else 0.",
)
@_gap_option
@_orphan_option
@_scope_options
@_db_option
@click.pass_context
def compare(
    ctx: click.Context,
    a: str,
    b: str,
    as_json: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    steps: str | None,
    window: str | None,
    fail_pct: float | None = None,
) -> None:
    """Compare run/trace B (variant) against A (baseline): deltas of span, busy, idle, overlap,
    gaps by cause, findings and top kernels."""
    from .api import compare as compare_analyses

    _check_scope(steps, window)
    options = _options(gap_threshold_us, exclude_orphans)
    tl_a, _, label_a = load_named_subject(ctx, a)
    tl_b, _, label_b = load_named_subject(ctx, b)
    an_a, an_b = _analyze(tl_a, options, steps, window), _analyze(tl_b, options, steps, window)
    comparison = compare_analyses(an_a, an_b, _scoped(tl_a, steps, window), _scoped(tl_b, steps, window))
    decision = None
    if fail_pct is not None:
        from .analyses.gate import gate

        v = comparison.verdict
        decision = gate(an_a, an_b, fail_pct, v.a_ns if v else 0, v.b_ns if v else 0, v.basis if v else "span")
    if as_json:
        from .analyses.results import SCHEMA_VERSION
        from .render.compare_text import comparison_document
        from .render.document import to_document

        doc = {
            "schema": SCHEMA_VERSION,
            "a": to_document(an_a),
            "b": to_document(an_b),
            "comparison": comparison_document(comparison),
        }
        if decision is not None:
            doc["gate"] = decision.to_dict()
        _echo_json(doc)
    else:
        from .render.compare_text import format_comparison

        click.echo(format_comparison(comparison, labels=(label_a, label_b), width=terminal_width()))
        if decision is not None:
            verdict = "FAIL (B is slower)" if decision.slower else "pass"
            click.echo(f"\nGate --fail-if-slower {fail_pct:g}%: {verdict}: {_safe(decision.reason)}")
    if decision is not None and decision.slower:
        ctx.exit(decision.exit_code)


@main.command()
@click.argument("run_or_path")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(path_type=Path),  # checked by check_output_path: one line
    help="Report file: .html (self-contained), .md or .json.",
)
@click.option("--against", help="Baseline run or trace to compare with.")
@_gap_option
@_orphan_option
@_scope_options
@_db_option
@click.pass_context
def report(
    ctx: click.Context,
    run_or_path: str,
    output: Path,
    against: str | None,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
    steps: str | None,
    window: str | None,
) -> None:
    """Write a report of a run or trace: .html (works offline), .md or .json, by extension."""
    if output.suffix.lower() not in (".html", ".htm", ".md", ".json"):
        raise BadInput("unknown report format (use a .html, .md or .json file name)", output)
    from .api import report as write_report
    from .render.reports import check_output_path

    check_output_path(output, (run_or_path, against, _db_path(ctx)))  # before any parsing or analysis

    _check_scope(steps, window)
    options = _options(gap_threshold_us, exclude_orphans)
    timeline, _ = load_subject(ctx, run_or_path)
    analysis = _analyze(timeline, options, steps, window)
    base = None
    if against:
        tl_b, _ = load_subject(ctx, against)
        base = (_analyze(tl_b, options, steps, window), _scoped(tl_b, steps, window))
    write_report(output, analysis, _scoped(timeline, steps, window), against=base)
    click.echo(str(output))


@main.command()
@click.argument("run_or_path")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(path_type=Path),  # checked by check_output_path: one line
    help="Trace-event JSON file, e.g. run.perfetto.json (opens in Perfetto and chrome://tracing).",
)
@click.option(
    "--sm-lanes/--no-sm-lanes",
    default=False,
    help="Add one lane per SM (measured / estimated); off by default: they are most of a big export.",
)
@_gap_option
@_orphan_option
@_db_option
@click.pass_context
def export(
    ctx: click.Context,
    run_or_path: str,
    output: Path,
    sm_lanes: bool,
    gap_threshold_us: float | None,
    exclude_orphans: bool,
) -> None:
    """Export a run or trace for Perfetto / chrome://tracing (Chrome trace-event JSON), with
    tracelab's idle gaps and their causes, findings, steps (and with --sm-lanes per-SM lanes) as extra
    tracks."""
    if output.suffix.lower() != ".json":
        raise BadInput("the export is JSON: use a .json file name (e.g. run.perfetto.json)", output)
    from .render.perfetto import write_perfetto
    from .render.reports import check_output_path

    check_output_path(output, (run_or_path, _db_path(ctx)))  # before any parsing or analysis
    timeline, _ = load_subject(ctx, run_or_path)
    analysis = _analyze(timeline, _options(gap_threshold_us, exclude_orphans))
    summary = write_perfetto(output, timeline, analysis, sm_lanes=sm_lanes)
    for note in summary.notes:
        err(f"note: {_safe(note)}")
    err(f"{_safe(output.name, 40)}: {summary.events:,} events on {len(summary.tracks)} tracks "
        "(open it in ui.perfetto.dev or chrome://tracing)")
    click.echo(str(output))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def workloads(as_json: bool) -> None:
    """List the built-in GPU workloads, their variants and what each demonstrates."""
    from .workloads import WORKLOADS

    if as_json:
        _echo_json([w.to_dict() for w in WORKLOADS.values()])
        return
    import textwrap

    width = terminal_width()
    for w in WORKLOADS.values():
        # continuation lines under the description, not at the variants' indent (where they read as variants)
        lead = " " * (len(w.name) + 2)
        click.echo("\n".join(textwrap.wrap(f"{w.name}: {w.description}", width, subsequent_indent=lead)))
        for v in w.variants:
            text = f"  {v.name:20} {v.description}"
            click.echo("\n".join(textwrap.wrap(text, width, subsequent_indent=" " * 23)))
        click.echo("")


class _RecordCommand(click.Command):
    """Remembers whether the arguments used `--` (profile a command) or not (a workload)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["tracelab.dashdash"] = "--" in args
        return super().parse_args(ctx, args)


@main.command(cls=_RecordCommand)
@click.argument("target", nargs=-1, required=True)
@click.option("--variant", default="all", show_default=True, help="Variant to record, or 'all'.")
@click.option(
    "--backend",
    type=click.Choice(["nsys", "torch"]),
    default=None,
    help="Profiler (default: nsys when installed, else torch).",
)
@click.option("--quick", is_flag=True, help="Small sizes: a fast smoke run.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where run directories go (default: $TRACELAB_RUNS or the user data directory).",
)
@_db_option
@click.pass_context
def record(
    ctx: click.Context,
    target: tuple[str, ...],
    variant: str,
    backend: str | None,
    quick: bool,
    out_dir: Path | None,
) -> None:
    """Record a built-in workload on the GPU, or any program, then import and analyse it.

    \b
    tracelab record WORKLOAD [--variant V|all] [--backend nsys|torch] [--quick]
    tracelab record [--backend nsys|torch] -- CMD [ARGS...]
    """
    from .settings import runs_dir

    out = out_dir or runs_dir()
    command = bool(ctx.meta.get("tracelab.dashdash"))
    if not command:
        if len(target) != 1:
            raise click.UsageError("give one WORKLOAD, or a command after `--` (tracelab record -- CMD ...)")
        from .workloads import get_workload

        get_workload(target[0]).resolve_variants(variant)  # unknown names: one line, before any work
    backend = backend or _default_backend()
    err(f"recording with the {backend} backend into {out}")
    if command:
        from .record import record_command

        paths = [record_command(list(target), backend, out)]
    else:
        from .record import record_workload

        paths = list(record_workload(target[0], variant, backend, quick, out))
    store = open_store(ctx)
    for p in paths:
        rid, _ = import_path(store, Path(p))
        click.echo(rid)
        err(f"{_safe(p)}: run {rid}")
        run = store.get_run(rid)
        _print_analysis(_analyze(store.load(rid), _options(None, False)), f"run {rid} · {run.name}")


def _default_backend() -> str:
    try:
        from tracelab.io.nsys.load import find_nsys
    except ImportError:
        return "torch"
    return "nsys" if find_nsys() else "torch"


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests addressed to this host name (repeatable; '*' for any). Loopback names "
    "and the --host address are always allowed; other Host or Origin headers get 403 (DNS rebinding).",
)
@_db_option
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, allow_hosts: tuple[str, ...]) -> None:
    """Serve the dashboard over the store (http://HOST:PORT)."""
    check_port(host, port)  # before the store is opened: a busy port costs nothing
    _serve(open_store(ctx), host, port, allow_hosts)


def check_port(host: str, port: int) -> None:
    """Fail in one line (BadInput, exit 2) when HOST:PORT cannot be listened on (in use, not an address
    of this machine, a privileged port): checked before the app is built, so no server output appears."""
    import errno
    import socket

    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        raise BadInput(f"cannot listen on {_safe(where)}: unknown host ({_one_line(e)})") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server does: TIME_WAIT is fine
        try:
            sock.bind(address)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise BadInput(
                    f"port {port} on {_safe(host)} is already in use (another server? pick one with --port)"
                ) from None
            raise BadInput(f"cannot listen on {_safe(where)}: {e.strerror or e}") from None


def _serve(store: Store, host: str, port: int, allow_hosts: tuple[str, ...] = ()) -> None:
    try:
        import dash  # noqa: F401
        import plotly  # noqa: F401
    except ImportError as e:
        raise MissingDependency(
            f"the dashboard needs dash and plotly ({e}); pip install 'tracelab[app]'"
        ) from None
    check_port(host, port)
    from app import create_app

    dash_app = create_app(store, bind_host=host, allow_hosts=allow_hosts)
    err(f"tracelab dashboard on http://{host}:{port}/ (store {store.path}); Ctrl-C to stop")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no per-request lines
    try:
        dash_app.run(host=host, port=port, debug=False)
    except SystemExit as e:  # werkzeug exits 1 when the port was taken between the check and the bind
        if e.code not in (0, None):
            raise BadInput(f"port {port} on {_safe(host)} could not be listened on (in use?)") from None
        raise


@main.command()
@click.option("--no-serve", is_flag=True, help="Import the example runs, print their ids and exit.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8050, show_default=True, type=click.IntRange(1, 65535))
@_db_option
@click.pass_context
def demo(ctx: click.Context, no_serve: bool, host: str, port: int) -> None:
    """Import the bundled example runs (recorded on a real GPU) and open the dashboard."""
    from .demo import demo_run_paths

    paths = list(demo_run_paths())
    if not paths:
        raise TracelabError("this installation has no bundled demo runs")
    store = open_store(ctx)
    for p in paths:
        rid, new = import_path(store, Path(p))
        click.echo(rid)
        run = store.get_run(rid)
        err(f"{'imported' if new else 'already in the store:'} run {rid} · {_safe(run.name)}")
    if not no_serve:
        _serve(store, host, port)


if __name__ == "__main__":  # pragma: no cover
    main()
