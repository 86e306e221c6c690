"""Hot rollback journals: `X-journal` beside an SQLite file, left by a writer that was killed (or that
still holds its transaction) after it had written uncommitted pages into X itself.

SQLite rolls such a journal back into X the next time X is opened for writing; a reader that opens X
`immutable=1` (how tracelab opens nsys exports, and stores on read-only media) ignores the journal and
reads the uncommitted pages as if they were data. tracelab never writes beside an input, so a file
with a hot journal is read from a private copy of the file and its journal, rolled back there
(`recovered_copy`), or refused.

A journal is hot (SQLite's own rule, pager.c hasHotJournal) when it exists, is not empty and does not
begin with a zero byte (journal_mode=PERSIST zeroes the header of a finished transaction). Whether a
live writer holds the file's RESERVED lock is not asked: tracelab never takes a lock on an input, and
a private copy read while the writer is still at work is the committed state either way.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

JOURNAL_SUFFIX = "-journal"


def journal_of(path: Path) -> Path:
    return path.with_name(path.name + JOURNAL_SUFFIX)


def hot_journal(path: Path) -> Path | None:
    """The hot journal beside `path`, or None."""
    journal = journal_of(path)
    try:
        if not journal.is_file():
            return None
        with journal.open("rb") as fh:
            first = fh.read(1)
    except OSError:
        return None
    return journal if first not in (b"", b"\x00") else None


class RecoveryFailed(Exception):
    """The private copy could not be made or rolled back (the message says why)."""


def recovered_copy(path: Path, max_bytes: int) -> tuple[Path, str]:
    """A private copy of `path` and its hot journal, rolled back there (the state a reader sees after
    SQLite's recovery), and the private directory holding it (the caller removes it). Neither input
    file is opened for writing. Raises RecoveryFailed."""
    journal = journal_of(path)
    try:
        size = path.stat().st_size + journal.stat().st_size
    except OSError as exc:
        raise RecoveryFailed(f"cannot read ({exc.strerror or exc})") from None
    if size > max_bytes:
        raise RecoveryFailed(f"a private copy would take {size >> 20} MiB, more than {max_bytes >> 20} MiB")
    tmp = tempfile.mkdtemp(prefix="tracelab-recover-")
    out = Path(tmp) / "recovered.sqlite"
    try:
        shutil.copyfile(path, out)
        shutil.copyfile(journal, journal_of(out))
        conn = sqlite3.connect(out.as_uri() + "?mode=rw", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the first read lock rolls back
            conn.execute("PRAGMA query_only = ON")
        finally:
            conn.close()
        if hot_journal(out) is not None:
            raise RecoveryFailed("SQLite did not roll the journal back")
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RecoveryFailed(f"cannot make a private copy to recover ({exc.strerror or exc})") from None
    except sqlite3.Error as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RecoveryFailed(f"cannot roll the journal back in a private copy ({exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, tmp
