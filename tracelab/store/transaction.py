"""How the store writes and fails: one transaction per write (`Transaction`), and the SQLite errors of the
store's media or of another process turned into one clear StoreError (`store_errors`)."""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ..errors import StoreError
from .schema import describe_sqlite_error, is_environment_error


def store_errors(method: Callable) -> Callable:
    """SQLite errors of the store's media or of another process (read-only, disk full, I/O, locked)
    become StoreError: one line naming the store file, exit 2."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except sqlite3.OperationalError as e:
            if not is_environment_error(e):
                raise
            raise StoreError(describe_sqlite_error(e), self.path) from None

    return wrapper


class Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (KeyboardInterrupt included).
    `committed`: False until COMMIT is issued, None while it runs (unknown), True once it returned."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path
        self.committed: bool | None = False

    def __enter__(self) -> None:
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:  # read-only file, or another writer held it for 30 s
            raise StoreError(f"cannot write to the store: {describe_sqlite_error(e)}", self.path) from None

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            _test_pause("before-commit")
            self.committed = None
            try:
                self.conn.execute("COMMIT")
            except BaseException:  # COMMIT failed, or Ctrl-C landed as it returned (then it is done)
                if self.conn.in_transaction:
                    self.committed = False
                    self.conn.execute("ROLLBACK")
                raise
            self.committed = True
            _test_pause("after-commit")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")


# Test hook (the SIGINT-at-commit tests): with _TRACELAB_TEST_PAUSE_AT=before-commit|after-commit the
# import writes that word to _TRACELAB_TEST_PAUSE_FILE and sleeps there, so a test can send a real
# signal at that moment. Unset (always, outside those tests), it costs one dict lookup per import.
_PAUSE_AT = "_TRACELAB_TEST_PAUSE_AT"
_PAUSE_FILE = "_TRACELAB_TEST_PAUSE_FILE"


def _test_pause(stage: str) -> None:
    if os.environ.get(_PAUSE_AT) != stage:
        return
    marker = os.environ.get(_PAUSE_FILE)
    if marker:
        Path(marker).write_text(stage)
    time.sleep(30)
