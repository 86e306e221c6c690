"""Typed errors. The CLI turns each into one line on stderr and an exit code.

`BadInput` (exit 2) is for anything the user handed us that we cannot use: a corrupt or truncated
trace, a wrong file type, an unknown schema, an unknown run id, bad options. Its message names the
file (or run) and says what is wrong, in one line. Everything else that escapes is an internal error
(exit 1).
"""

from __future__ import annotations

from pathlib import Path


class TracelabError(Exception):
    """Base class of every error tracelab raises on purpose."""

    exit_code: int = 1


class BadInput(TracelabError):
    """The input (a file, a run id, an option) cannot be used. Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, path: str | Path | None = None) -> None:
        self.path = None if path is None else str(path)
        self.reason = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class TraceFormatError(BadInput):
    """A trace file is corrupt, truncated, empty, of the wrong type or of an unknown schema."""


class UnknownRun(BadInput):
    """A run id or name that is not in the store."""

    def __init__(self, run: str) -> None:
        super().__init__(f"no run with id or name {run!r} in the store (see `tracelab runs`)")


class DuplicateRun(BadInput):
    """The same trace (by content hash) is already in the store."""

    def __init__(self, path: str | Path, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"already imported as run {run_id}", path)


class StoreError(BadInput):
    """The store file cannot be used as asked: read-only media or file, a full disk, an I/O error,
    locked by another writer. Exit code 2, one line naming the store file."""


class StoreInterrupted(KeyboardInterrupt):
    """Ctrl-C arrived while a run was being committed, and the commit had completed: the run IS in
    the store (run_id). The CLI prints the id and says so, then exits 130."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"interrupted after run {run_id} was stored")


class MissingDependency(TracelabError):
    """An optional component (torch, nsys, dash, a GPU) is not available. Exit code 2."""

    exit_code = 2
