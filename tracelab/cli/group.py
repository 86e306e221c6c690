"""The `tracelab` command group: typed errors become one line on stderr and the error's exit code."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from .. import __version__
from ..errors import StoreInterrupted, TracelabError
from .common import _IMPORTING, DEBUG_ENV, _db_option, _one_line, _store_error, err


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



@click.group(cls=TracelabGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracelab")
@_db_option
def main() -> None:
    """tracelab: where is my GPU idle, what overlaps with what, and why.

    Import nsys SQLite and Kineto (torch.profiler) traces, analyse busy/idle time, overlap, idle
    gaps and their causes, and explore them in a dashboard or in reports.
    """

