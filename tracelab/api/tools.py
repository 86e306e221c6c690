"""The rest of what the command line offers: built-in workloads, recording, the MCP server."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def workloads() -> list[Any]:
    """The built-in GPU workloads (name, description, variants; `to_dict()` for JSON)."""
    from ..workloads import WORKLOADS

    return list(WORKLOADS.values())


def check_workload(name: str, variant: str) -> None:
    """BadInput for an unknown workload or variant (before any work)."""
    from ..workloads import get_workload

    get_workload(name).resolve_variants(variant)


def default_backend() -> str:
    """The profiler `record` uses without --backend: nsys when installed, else torch."""
    from ..io.nsys.export import find_nsys

    return "nsys" if find_nsys() else "torch"


def record_workload(name: str, variant: str, backend: str, quick: bool, out: Path) -> list[Path]:
    """Run a built-in workload on the GPU under a profiler: the run directories written."""
    from ..record.workload import record_workload as record

    return [Path(p) for p in record(name, variant, backend, quick, out)]


def record_command(cmd: Sequence[str], backend: str, out: Path) -> Path:
    """Profile any program the same way: the run directory written."""
    from ..record.command import record_command as record

    return Path(record(list(cmd), backend, out))


def serve_mcp(db: Path) -> None:
    """Serve the store over the Model Context Protocol on stdin/stdout (a missing SDK is one line, before
    anything is read; BadInput when there is no store at `db`)."""
    from ..errors import BadInput
    from ..mcp_server import _sdk, serve_stdio

    _sdk()
    if not Path(db).exists():
        raise BadInput("no tracelab store here (import a trace first, or pass --db)", db)
    serve_stdio(db)
