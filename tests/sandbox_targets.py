"""Functions the sandbox tests run in a child process (tests/test_dashboard_security.py)."""

from __future__ import annotations

from tracelab.errors import BadInput


def add(a: int, b: int) -> int:
    return a + b


def spin() -> None:
    while True:  # pathological work: only the wall-clock budget stops it
        pass


def hog() -> None:
    held = []
    while True:  # unbounded memory: only the address-space budget stops it
        held.append(bytearray(64 * 2**20))


def bad(path: str) -> None:
    raise BadInput("not a trace", path)
