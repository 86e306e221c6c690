"""Reused pages for big numpy arrays (the optional C allocator `tracelab._pages`).

numpy scopes its data allocator to the current context, and every thread starts in a fresh one; so the
`tracelab` command installs the allocator on its main thread (`install`) and tracelab's own threads
take it over from the thread that started them (`inherit`). A library caller opts in with `install()`.

`TRACELAB_REUSE_PAGES=0` turns it off; without the compiled module (no C compiler at install time)
everything works the same with numpy's own allocator. `TRACELAB_REUSE_PAGES_MB` sets how much freed
memory the cache keeps (default 512 MiB; docs/DECISIONS.md, "Reused pages").
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_LIMIT_MB = 512
_local = threading.local()
_ready: bool | None = None
_module: Any = None


def _load() -> bool:
    """Set the C module up once (numpy's C-API table, numpy's huge-page setting, the cache limit)."""
    global _ready, _module
    if _ready is not None:
        return _ready
    _ready = False
    if os.environ.get("TRACELAB_REUSE_PAGES", "1").strip() in ("0", "no", "off", "false"):
        return False
    try:
        from tracelab import _pages  # type: ignore[attr-defined]
    except ImportError:
        return False
    try:
        from numpy._core import _multiarray_umath as umath  # numpy >= 2
        from numpy._core.multiarray import _get_madvise_hugepage
    except ImportError:  # numpy 1.x
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
        from numpy.core.multiarray import _get_madvise_hugepage  # type: ignore[no-redef]
    _pages.setup(umath._ARRAY_API, bool(_get_madvise_hugepage()))
    _pages.set_limit(_limit_bytes())
    _module = _pages
    _ready = True
    return True


def _limit_bytes() -> int:
    raw = os.environ.get("TRACELAB_REUSE_PAGES_MB", "").strip()
    try:
        mb = float(raw) if raw else DEFAULT_LIMIT_MB
    except ValueError:
        mb = DEFAULT_LIMIT_MB
    return max(int(mb * (1 << 20)), 0)


def install() -> bool:
    """Use the reusing allocator for the numpy arrays this thread (this context) makes from now on.
    Returns whether it is in use. Arrays made before keep the allocator they were made with."""
    if getattr(_local, "on", False):
        return True
    if not _load():
        return False
    _module.set_handler(_module.handler())
    _local.on = True
    return True


def uninstall() -> None:
    """This thread goes back to numpy's default allocator (arrays made with the reusing one stay valid)."""
    if getattr(_local, "on", False):
        _module.set_handler(None)
        _local.on = False


def installed() -> bool:
    """Whether this thread's numpy arrays come from the reusing allocator."""
    return bool(getattr(_local, "on", False))


def inherit(fn: Callable[..., T]) -> Callable[..., T]:
    """`fn` for another thread: it runs with the reusing allocator when the thread calling `inherit`
    has it (a thread's target, a pool's task)."""
    if not installed():
        return fn

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> T:
        install()
        return fn(*args, **kwargs)

    return run


def stats() -> dict[str, int]:
    """The allocator's counters (empty when it is not loaded): blocks and bytes reused from the cache,
    grown from a cached block, newly mapped, unmapped; bytes cached and live now; the limit."""
    return dict(_module.stats()) if _ready else {}


def release() -> int:
    """Give every cached page back to the system; the bytes released."""
    return int(_module.release()) if _ready else 0


def pool_initializer() -> Callable[[], Any] | None:
    """A thread pool's `initializer`: its threads take the reusing allocator when this thread has it."""
    return install if installed() else None
