"""What the commands share: the store option, progress bars, loading a run or a trace, the analysis
options, and writing to the terminal. Everything reaches the library through `tracelab.api`."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from .. import api
from ..errors import BadInput
from .startup import _one_blas_thread

if TYPE_CHECKING:
    from ..api.types import Analysis, Store, Timeline

DEBUG_ENV = "TRACELAB_DEBUG"
_IMPORTING = "tracelab.importing"  # ctx.meta flag: a store write is under way (for the Ctrl-C line)


def _one_line(text: object) -> str:
    """An error message as one terminal-safe line (file names and run names are untrusted)."""
    from tracelab.render.text.compare import term_safe

    return term_safe(" ".join(str(text).split()))


def err(message: str) -> None:
    """A log line on stderr."""
    click.echo(message, err=True)



def _store_error(ctx: click.Context, exc: Exception) -> BadInput | None:
    """A SQLite error from where the store lives (read-only, disk full, I/O, locked) that escaped the
    Store's own translation, as the one line naming the store file; None for anything else (a bug)."""
    return api.store_error(exc, _db_path(ctx))


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
    db = ctx.ensure_object(dict).get("db")
    return Path(db) if db else api.default_db_path()


def open_store(ctx: click.Context, *, create: bool = True, read_only: bool = False) -> Store:
    return api.open_store(_db_path(ctx), create=create, read_only=read_only)


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


def import_path(
    store: Store, path: Path, name: str | None = None, replace: bool = False, **parallel: Any
) -> tuple[str, bool]:
    """Import one trace (file or directory), or a directory / glob of per-rank traces as one multi-rank
    run, through `tracelab.api.import_path` (`parallel`: workers / scheduler); returns (run id, newly
    imported)."""
    with _Progress(path.name) as bar:
        done = api.import_path(store, path, name, replace=replace, phase=bar.phase, **parallel)
    return done.run_id, done.new


def load_subject(ctx: click.Context, ref: str) -> tuple[Timeline, str]:
    """RUN_OR_PATH: an existing path is parsed directly (the store is not touched); anything else
    is a run id, id prefix or name in the store. Returns the timeline and a title."""
    _not_empty(ref)
    path = Path(ref)
    if path.exists():
        with _one_blas_thread(), _Progress(path.name) as bar:
            return api.load(path, bar.phase("parsing")), str(path)
    db = _db_path(ctx)
    if not db.exists():
        raise BadInput(
            f"no such file, and no run with this id or name (the store {db} does not exist yet)", ref
        )
    with _one_blas_thread():
        return api.resolve(ref, api.open_store(db, create=False, read_only=True))


def load_named_subject(ctx: click.Context, ref: str) -> tuple[Timeline, str, str]:
    """`load_subject` plus a short label for tables and verdicts: the run's name, or the file name."""
    timeline, title = load_subject(ctx, ref)
    if not Path(ref).exists() and title.startswith("run ") and " · " in title:
        return timeline, title, title.split(" · ", 1)[1]
    return timeline, title, Path(title).name or title



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

    from tracelab.render.text.analysis import analysis_renderables, format_analysis

    console = Console(highlight=False, soft_wrap=False)
    if console.is_terminal:
        console.print(Group(*analysis_renderables(analysis, title=title, top_gaps=top_gaps)))
    else:  # a pipe or a file: plain text, no colour, no trailing blanks
        click.echo(format_analysis(analysis, title=title, top_gaps=top_gaps, width=terminal_width()), nl=False)



def terminal_width() -> int:
    """Columns for human output: $COLUMNS, else the terminal's width, else 100 (a pipe)."""
    import shutil

    return max(shutil.get_terminal_size((100, 24)).columns, 40)


def _safe(text: object, limit: int | None = None) -> str:
    from tracelab.render.text.compare import term_safe

    return term_safe(text, limit)


def _paths(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> tuple[Path, ...]:
    for v in values:
        _not_empty(v)
    return tuple(Path(v) for v in values)


def _not_empty(ref: str) -> None:
    """An empty argument names no trace: Path("") is the current directory, which was then read."""
    if not ref.strip():
        raise BadInput(f"an empty argument ({ref!r}) names no trace file, directory or run")


def _gap_threshold(_ctx: click.Context, _param: click.Parameter, value: str | None) -> float | None:
    return None if value is None else api.check_gap_threshold_us(value)


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


