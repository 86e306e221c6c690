"""`tracelab` command line: thin wiring of `tracelab.api` (the library facade) and `tracelab.render`.

Conventions (DESIGN.md): results on stdout, progress and logs on stderr; exit 0 on success, 2 on bad
input or usage (one line naming the file and what is wrong), 1 on an internal error (one line; set
TRACELAB_DEBUG=1 for the traceback). Heavy or optional modules are imported inside the commands, so
`tracelab --help` is fast and works without dash or torch.

The commands live in small modules (store_cmds: import, runs, sql, mcp, delete; analysis_cmds: analyze,
compare, report, export; run_cmds: workloads, record, serve, demo); `common` holds what they share,
`group` the command group and its error handling, `startup` the `tracelab` command's start-up.
"""

from __future__ import annotations

from . import analysis_cmds, run_cmds, store_cmds  # noqa: F401 - each registers its commands on `main`
from .common import _store_error
from .group import TracelabGroup, main
from .startup import _one_blas_thread

__all__ = ["TracelabGroup", "_one_blas_thread", "_store_error", "entry", "main"]


def entry() -> None:
    """The `tracelab` command (and `python -m tracelab`)."""
    main(prog_name="tracelab")
