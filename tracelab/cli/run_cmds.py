"""Commands around the GPU and the dashboard: workloads, record, serve, demo."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .. import api
from ..errors import BadInput, MissingDependency, TracelabError
from .common import (
    _db_option,
    _echo_json,
    _one_line,
    _print_analysis,
    _safe,
    err,
    import_path,
    open_store,
    terminal_width,
)
from .group import main

if TYPE_CHECKING:
    from ..api.types import Store


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
def workloads(as_json: bool) -> None:
    """List the built-in GPU workloads, their variants and what each demonstrates."""
    if as_json:
        _echo_json([w.to_dict() for w in api.workloads()])
        return
    import textwrap

    width = terminal_width()
    for w in api.workloads():
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
    out = out_dir or api.runs_dir()
    command = bool(ctx.meta.get("tracelab.dashdash"))
    if not command:
        if len(target) != 1:
            raise click.UsageError("give one WORKLOAD, or a command after `--` (tracelab record -- CMD ...)")
        api.check_workload(target[0], variant)  # unknown names: one line, before any work
    backend = backend or api.default_backend()
    err(f"recording with the {backend} backend into {out}")
    if command:
        paths = [api.record_command(target, backend, out)]
    else:
        paths = api.record_workload(target[0], variant, backend, quick, out)
    store = open_store(ctx)
    for p in paths:
        rid, _ = import_path(store, Path(p))
        click.echo(rid)
        err(f"{_safe(p)}: run {rid}")
        run = store.get_run(rid)
        _print_analysis(api.analyze(store.load(rid), api.options(None, False)), f"run {rid} · {run.name}")


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
    paths = api.demo_run_paths()
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
