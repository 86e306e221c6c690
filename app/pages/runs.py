"""Runs page (/): the store's runs, and import of a trace file.

An upload is size-checked (its bytes, then what they expand to), written under the app's import
directory (or a private temporary directory, removed afterwards) with a sanitized name, then parsed and
imported into the store in a child process under a time and memory budget (`tracelab.sandbox`). Any
BadInput or budget overrun becomes one clear line on the page, without server paths.
"""

from __future__ import annotations

import base64
import binascii
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dash import dcc, html

from tracelab.api import import_upload as import_upload_limited
from tracelab.api.types import SandboxError
from tracelab.errors import BadInput, DuplicateRun, TracelabError
from tracelab.text_format import fmt_ns

from ..state import AppState, current_state, describe_error
from ..urls import href


def runs_list(state: AppState) -> html.Div:
    records = state.runs()
    if not records:
        return html.Div([html.P("No runs in the store yet. Import a trace below, or run `tracelab demo`.")], id="runs-list")
    head = html.Tr([html.Th(h) for h in ("run", "id", "workload · variant · backend", "GPU", "events", "span", "")])
    body = [
        html.Tr(
            [
                html.Td(html.B(r.name), className="run-name-cell", title=r.source),
                html.Td(html.Code(r.id)),
                html.Td(" · ".join(b for b in (r.workload, r.variant, r.backend) if b) or r.format),
                html.Td(r.gpu or ""),
                html.Td(f"{r.events:,}", className="n"),
                html.Td(fmt_ns(r.span_ns), className="n"),
                html.Td([dcc.Link("timeline", href=href("timeline", run=r.id)), " · ",
                         dcc.Link("gaps & findings", href=href("gaps", run=r.id)), " · ",
                         dcc.Link("overlap", href=href("overlap", run=r.id)), " · ",
                         dcc.Link("kernels", href=href("kernels", run=r.id)), " · ",
                         dcc.Link("compare", href=href("compare", b=r.id))]),
            ],
            className="run-item",
        )
        for r in records
    ]
    return html.Div(html.Table([html.Thead(head), html.Tbody(body)], className="runs-table", id="runs-table"), id="runs-list")


_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_filename(name: str | None) -> str:
    """The upload's base name reduced to [A-Za-z0-9._-] (no directories, no leading dots)."""
    base = re.split(r"[\\/]", str(name or ""))[-1]
    base = _SAFE.sub("_", base).lstrip(".")[:120]
    return base or "upload.trace"


def decode_upload(contents: str | None, filename: str | None, max_bytes: int) -> bytes:
    """The uploaded bytes from a dcc.Upload data URL; BadInput when too big, empty or malformed."""
    if not contents or "," not in contents:
        raise BadInput("the upload is empty or malformed", filename or "upload")
    b64 = contents.split(",", 1)[1]
    if len(b64) * 3 // 4 > max_bytes + 3:
        raise BadInput(f"file too large: {len(b64) * 3 // 4:,} bytes, the limit is {max_bytes:,} bytes", filename or "upload")
    try:
        data = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput("the upload is not valid base64 data", filename or "upload") from None
    if len(data) > max_bytes:
        raise BadInput(f"file too large: {len(data):,} bytes, the limit is {max_bytes:,} bytes", filename or "upload")
    if not data:
        raise BadInput("the file is empty", filename or "upload")
    return data


def import_upload(
    state: AppState, contents: str | None, filename: str | None
) -> tuple[bool, str, str | None]:
    """Write the upload inside the import directory (or a temporary one), then size-check, parse and
    import it in a child process under the app's time and memory budget (tracelab.sandbox), so a
    hostile file cannot pin or exhaust the server. Returns (ok, message, run id). Never raises for
    bad input; never writes outside that directory; messages never show server paths."""
    shown = safe_filename(filename)
    try:
        data = decode_upload(contents, shown, state.max_upload_bytes)
    except BadInput as exc:
        return False, describe_error(exc), None
    if not state.upload_slot.acquire(blocking=False):
        return False, f"{shown}: another upload is being imported; try again when it is done", None
    try:
        return _import_data(state, data, shown)
    finally:
        state.upload_slot.release()


def _import_data(state: AppState, data: bytes, shown: str) -> tuple[bool, str, str | None]:
    tmp_dir: Path | None = None
    work: Path | None = None
    path = Path(shown)
    try:
        if state.import_dir is not None:
            target_dir = Path(state.import_dir).resolve()
            target_dir.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="upload-", dir=target_dir))
        else:
            work = tmp_dir = Path(tempfile.mkdtemp(prefix="tracelab-upload-"))
        path = (work / shown).resolve()
        if path.parent != work.resolve():  # belt and braces: the name cannot leave the directory
            return False, f"{shown}: refused file name", None
        path.write_bytes(data)
        # kept uploads are named by their file; a temporary directory's path means nothing later
        source = str(path) if tmp_dir is None else f"upload:{shown}"
        result = import_upload_limited(state.store.path, path, name=shown, source=source,
                                       max_expanded_bytes=state.max_expanded_bytes, budget=state.upload_budget)
        run_id = str(result["run_id"])
        state.forget()
        if not result.get("new", True):
            _discard(work, tmp_dir)
            return False, f"{shown}: already imported as run {run_id}", run_id
        return True, f"imported {shown} as run {run_id} ({int(result['events']):,} events)", run_id
    except DuplicateRun as exc:
        _discard(work, tmp_dir)
        return False, f"{shown}: already imported as run {exc.run_id}", exc.run_id
    except TracelabError as exc:
        _discard(work, tmp_dir)
        text = _upload_error(exc, shown).replace(str(state.store.path), "the store")
        return False, _without_server_paths(text, shown, path, work), None
    except Exception as exc:  # noqa: BLE001 - a bug must not take the page down; say what happened
        _discard(work, tmp_dir)
        text = f"{shown}: could not be read ({type(exc).__name__}: {str(exc)[:200]})"
        return False, _without_server_paths(text, shown, path, work), None
    finally:
        if tmp_dir is not None:
            shutil.rmtree(tmp_dir, ignore_errors=True)


def _upload_error(exc: TracelabError, shown: str) -> str:
    """One line for a failed upload; the sandbox's own errors name the file they were about."""
    if isinstance(exc, SandboxError):
        return f"{shown}: refused: {exc}"
    return describe_error(exc)


def _without_server_paths(text: str, shown: str, path: Path, work: Path | None) -> str:
    """The message with the upload's server-side location replaced by its name (the .nsys-rep advice
    and parser messages name the file by its full path)."""
    for p in (str(path), str(path.resolve())):
        text = text.replace(p, shown)
    if work is not None:
        for w in {str(work), str(work.resolve())}:
            text = text.replace(w + "/", "").replace(w, "")
    for base in {tempfile.gettempdir(), str(Path(tempfile.gettempdir()).resolve())}:
        text = re.sub(re.escape(base) + r"/[^\s'\"]*", "…", text)
    return text


def _discard(work: Path | None, tmp_dir: Path | None) -> None:
    """Remove a failed upload's directory inside the import directory (temp dirs go in `finally`)."""
    if work is not None and tmp_dir is None:
        shutil.rmtree(work, ignore_errors=True)


def on_upload(state: AppState, contents: str | None, filename: str | None) -> tuple[Any, Any]:
    """Callback: (message component, refreshed runs list)."""
    if contents is None:
        return "", runs_list(state)
    ok, message, run_id = import_upload(state, contents, filename)
    children: list[Any] = [message]
    if run_id:
        children += [" — ", dcc.Link("open its timeline", href=href("timeline", run=run_id))]
    return html.Div(children, className="upload-ok" if ok else "upload-error", id="upload-result"), runs_list(state)


def runs_layout(state: AppState) -> html.Div:
    limit = state.max_upload_bytes
    return html.Div(
        [
            html.H2("Runs"),
            runs_list(state),
            html.H3("Import a trace"),
            html.Div(
                dcc.Upload(
                    id="upload",
                    children=html.Div(["Drop a trace here or ", html.A("choose a file"),
                                       f" (Kineto .json / .json.gz, nsys .sqlite; up to {limit // 2**20} MiB)"]),
                    max_size=limit, multiple=False, className="upload-box",
                    style={"border": "2px dashed #999", "borderRadius": "6px", "padding": "18px", "textAlign": "center"},
                    style_reject={"border": "2px dashed #c00", "borderRadius": "6px", "padding": "18px",
                                  "textAlign": "center", "background": "#fee"},
                ),
                id="upload-zone",
                **{"data-max-bytes": str(limit)},
            ),  # assets/upload_guard.js reads the limit
            dcc.Loading(html.Div(id="upload-message"), type="dot"),
        ],
        id="runs-page",
    )


def layout(**_ignored: Any) -> html.Div:
    return runs_layout(current_state())
