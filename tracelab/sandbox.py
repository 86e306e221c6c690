"""Run untrusted work (parsing and importing a file someone uploaded) in a child process under a
time and memory budget, so that a hostile file cannot pin or exhaust the process that asked.

    result = run_limited("package.module:function", {"arg": 1}, Budget(seconds=60, memory_bytes=2**31))

The child is a fresh `python -m tracelab.sandbox` (no fork of a threaded server): it caps its own
address space (RLIMIT_AS) and CPU time (RLIMIT_CPU), lowers its priority, runs the function with the
JSON keyword arguments and writes a JSON result. The parent waits at most `seconds` of wall-clock
time, then kills the child's whole process group (an `nsys export` it started included). What comes
back is the function's JSON result, or a typed error: BadInput as the child raised it (one line, exit
2), SandboxTimeout, SandboxMemory, or SandboxFailed (the child died or a bug in the function).

`import_upload` is the dashboard's job: bound the expanded size of a compressed file, then parse and
import it into the store through the library facade (`tracelab.api.import_trace`).
"""

from __future__ import annotations

import bz2
import gzip
import importlib
import json
import lzma
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec

from .errors import BadInput, DuplicateRun, TracelabError

_CHUNK = 1 << 20


class Budget(msgspec.Struct, frozen=True):
    """What one child may use. seconds: wall clock; memory_bytes: its address space (RLIMIT_AS:
    virtual, so it includes the ~0.6 GiB that Python, numpy and pandas map at start)."""

    seconds: float = 300.0
    memory_bytes: int = 8 * 2**30


class SandboxError(TracelabError):
    """The child did not deliver a result. Exit code 2: the input is what made it fail."""

    exit_code = 2


class SandboxTimeout(SandboxError):
    """The child ran past its wall-clock (or CPU) budget and was killed."""


class SandboxMemory(SandboxError):
    """The child ran out of its memory budget."""


class SandboxFailed(SandboxError):
    """The child crashed or the function raised something that is not BadInput (a bug)."""


def run_limited(target: str, kwargs: dict[str, Any], budget: Budget = Budget()) -> Any:
    """Call `module:function(**kwargs)` in a child process under `budget`; its JSON result, or the
    typed error (see the module docstring). kwargs and the result must be JSON values."""
    request = json.dumps({"target": target, "kwargs": kwargs, "memory_bytes": int(budget.memory_bytes),
                          "seconds": budget.seconds})
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # start_new_session: its own process group, so a timeout kills its children too
    proc = subprocess.Popen([sys.executable, "-m", "tracelab.sandbox"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(request.encode(), timeout=budget.seconds)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        proc.communicate()
        raise SandboxTimeout(f"took longer than its budget of {budget.seconds:g} s and was stopped") from None
    except BaseException:
        _kill_group(proc)
        proc.communicate()
        raise
    return _result(proc.returncode, out, err, budget)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _result(returncode: int, out: bytes, err: bytes, budget: Budget) -> Any:
    try:
        reply = json.loads(out.decode("utf-8")) if out.strip() else None
    except (UnicodeDecodeError, json.JSONDecodeError):
        reply = None
    if isinstance(reply, dict) and "ok" in reply:
        return reply["ok"]
    if isinstance(reply, dict) and isinstance(reply.get("error"), dict):
        e = reply["error"]
        kind, message = e.get("kind"), str(e.get("message", ""))
        if kind == "duplicate":
            raise DuplicateRun(e.get("path") or "", str(e.get("run_id", "?")))
        if kind == "bad_input":
            raise BadInput(message, e.get("path"))
        if kind == "memory":
            raise SandboxMemory(f"needed more than its memory budget of {budget.memory_bytes / 2**30:g} GiB")
        raise SandboxFailed(f"failed: {message}")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise SandboxTimeout(f"used more than its CPU budget of {budget.seconds:g} s and was stopped")
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
    if "MemoryError" in tail[0] or "Cannot allocate memory" in tail[0]:
        raise SandboxMemory(f"needed more than its memory budget of {budget.memory_bytes / 2**30:g} GiB")
    raise SandboxFailed(f"the worker process ended without a result (exit {returncode}) {tail[0][:200]}".rstrip())


# ---- the child ------------------------------------------------------------------------------------


def _child_main() -> int:
    import resource

    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything the job prints goes to stderr; stdout carries the one JSON reply
    sys.stdout = sys.stderr
    memory = int(request["memory_bytes"])
    cpu = max(1, int(float(request["seconds"])) + 1)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    try:
        os.nice(10)  # a server's own threads come first
    except OSError:
        pass
    try:
        module, _, name = str(request["target"]).partition(":")
        result = getattr(importlib.import_module(module), name)(**request["kwargs"])
        reply: dict[str, Any] = {"ok": result}
    except DuplicateRun as e:
        reply = {"error": {"kind": "duplicate", "run_id": e.run_id, "path": e.path}}
    except BadInput as e:
        reply = {"error": {"kind": "bad_input", "message": e.reason, "path": e.path}}
    except TracelabError as e:  # MissingDependency (e.g. no nsys for an .nsys-rep): the user's to fix
        reply = {"error": {"kind": "bad_input", "message": str(e), "path": None}}
    except MemoryError:
        reply = {"error": {"kind": "memory", "message": "out of memory"}}
    except RecursionError:
        reply = {"error": {"kind": "bad_input", "message": "nested too deeply to read", "path": None}}
    except Exception as e:  # noqa: BLE001 - a bug: say what it was, the parent maps it to SandboxFailed
        reply = {"error": {"kind": "bug", "message": f"{type(e).__name__}: {str(e)[:300]}"}}
    try:
        out.write(json.dumps(reply))
    except (TypeError, ValueError) as e:
        out.write(json.dumps({"error": {"kind": "bug", "message": f"result is not JSON: {e}"}}))
    out.flush()
    return 0


# ---- the dashboard's upload job -------------------------------------------------------------------

_OPENERS = ((b"\x1f\x8b", gzip.open, "gzip"), (b"\xfd7zXZ\x00", lzma.open, "xz"), (b"BZh", bz2.open, "bzip2"))


def check_expanded_size(path: str | Path, limit_bytes: int, shown: str | None = None) -> int:
    """The size of `path` once decompressed (gzip, xz, bzip2; else its size), read in 1 MiB steps
    and abandoned at limit_bytes: BadInput past it. A decompression bomb costs at most limit_bytes of
    inflation and 1 MiB of memory here."""
    path = Path(path)
    label = shown or path.name
    with open(path, "rb") as f:
        magic = f.read(6)
    for prefix, opener, kind in _OPENERS:
        if magic.startswith(prefix):
            total = 0
            try:
                with opener(path, "rb") as z:
                    while block := z.read(_CHUNK):
                        total += len(block)
                        if total > limit_bytes:
                            raise BadInput(f"expands to more than {limit_bytes:,} bytes ({kind}); the limit for an "
                                           f"upload after decompression is {limit_bytes:,} bytes: import it with "
                                           "`tracelab import` instead", label)
            except (OSError, EOFError, lzma.LZMAError, ValueError) as e:
                raise BadInput(f"corrupt {kind} data ({e})", label) from None
            return total
    size = path.stat().st_size
    if size > limit_bytes:
        raise BadInput(f"{size:,} bytes, the limit is {limit_bytes:,} bytes", label)
    return size


def _import_upload_job(db: str, path: str, name: str, source: str, max_expanded_bytes: int) -> dict[str, Any]:
    """Size-check one trace, parse it and import it into the store at `db` through the library facade
    (`tracelab.api.import_trace`, the one import workflow). {"run_id", "new", "events"}."""
    from .api.runs import import_trace
    from .store import Store

    check_expanded_size(path, max_expanded_bytes, name)
    store = Store(db)
    try:
        done = import_trace(path, store, name, source_path=source)
        return {"run_id": done.run_id, "new": done.new, "events": store.get_run(done.run_id).events}
    finally:
        store.close()


def import_upload(
    db: str | Path, path: str | Path, *, name: str, source: str, max_expanded_bytes: int, budget: Budget
) -> dict[str, Any]:
    """Size-check, parse and import an uploaded file in a child under `budget`; see _import_upload_job."""
    return run_limited("tracelab.sandbox:_import_upload_job", {"db": str(db), "path": str(path), "name": name,
                       "source": source, "max_expanded_bytes": int(max_expanded_bytes)}, budget)


if __name__ == "__main__":
    sys.exit(_child_main())
