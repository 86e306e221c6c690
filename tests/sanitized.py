"""Build one of tracelab's C extensions with AddressSanitizer + UBSan (halting on the first report) and
run a Python child that loads it: the sanitizer tests of the Kineto scanner and the two SQLite readers."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest


def build(source: Path, out: Path, *extra: str) -> dict[str, str]:
    """Compile `source` into the shared object `out` with ASan + UBSan; returns the environment that
    loads their runtimes into a plain Python. Skips the test when gcc or its runtimes are missing."""
    cc = shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no gcc to build a sanitized {source.name}")
    runtime = [[cc, f"-print-file-name={n}"] for n in ("libasan.so", "libubsan.so")]
    libs = [subprocess.run(c, capture_output=True, text=True, check=True).stdout.strip() for c in runtime]
    if not all(os.path.isabs(p) and os.path.exists(p) for p in libs):
        pytest.skip("gcc has no ASan / UBSan runtime")
    flags = ["-shared", "-fPIC", "-g", "-O1", "-fno-omit-frame-pointer", "-fsanitize=address,undefined"]
    flags += ["-fno-sanitize-recover=all", "-I", sysconfig.get_config_var("INCLUDEPY")]
    subprocess.run([cc, *flags, str(source), "-o", str(out), *extra], check=True)
    return dict(
        os.environ,
        LD_PRELOAD=" ".join(libs),
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1",
        PYTHONMALLOC="malloc",
    )


def run_clean(code: str, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """Run `python -c code *args` under the sanitizers; assert it exited 0 with no report."""
    res = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert res.returncode == 0 and "runtime error" not in res.stderr, res.stderr[-3000:]
    assert "ERROR: AddressSanitizer" not in res.stderr, res.stderr[-3000:]
    return res
