"""All of tracelab's native code, built by setup.py from this folder.

Each module here has a pure-Python twin that gives the same result, and a differential test that
holds them equal:

- `_kineto_scan` (`_kineto_scan.c`): the Kineto scanner, which writes the fields the parser reads
  from one piece of `traceEvents` straight into column buffers (350-450 MB/s against ~100 MB/s for
  msgspec). Twin: the msgspec decode of `tracelab.io.kineto.structs`, through the one interface of
  `tracelab.io.kineto.rows`. Differential test: tests/test_kineto_scan.py (plus its fuzzer,
  tests/fuzz/).

setup.py builds every module as required where the platform can build it (CPython on Linux or macOS
with a C compiler), so a broken build fails the install there; tests/test_native_build.py fails when
such a platform runs without one of them.
"""

from __future__ import annotations

MODULES: dict[str, str] = {
    "_kineto_scan": "tracelab.io.kineto.structs",  # native module -> its pure-Python twin
}
