"""A client that walks the dashboard of a running `tracelab serve` the way the canvas does: for every
run, its pages, the timeline meta, every tile of the first levels, hover on events and gaps, and a
search; several such clients at once (tests/test_hostile_dashboard_memory.py, issue 30)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Sequence

PAGES = ("/", "/timeline", "/gaps", "/kernels", "/overlap", "/ranks")
TILE_LEVELS = 2  # levels 0..1: 3 tiles per run and lane set
HOVER_EVENTS = 4
HOVER_GAPS = 2


def _get(base: str, path: str, status: dict[int, int], lock: threading.Lock) -> bytes:
    req = urllib.request.Request(base + path, headers={"Host": base.split("//", 1)[1]})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            body = resp.read()
            code = resp.status
    except urllib.error.HTTPError as exc:
        body, code = exc.read(), exc.code
    with lock:
        status[code] = status.get(code, 0) + 1
    return body if code == 200 else b""


def walk_run(base: str, run: str, status: dict[int, int], lock: threading.Lock) -> None:
    for page in PAGES:
        _get(base, f"{page}?run={run}", status, lock)
    raw = _get(base, f"/api/timeline/meta?run={run}&drawn=1", status, lock)
    if not raw:
        return
    meta = json.loads(raw)
    show = ",".join(meta["show"]) if isinstance(meta["show"], list) else str(meta["show"])
    for level in range(min(TILE_LEVELS, int(meta["max_level"]) + 1)):
        for index in range(1 << level):
            _get(base, f"/api/timeline/tile?run={run}&show={show}&level={level}&index={index}", status, lock)
    for event in range(HOVER_EVENTS):
        _get(base, f"/api/timeline/hover?run={run}&event={event * 7}", status, lock)
    for gap in range(HOVER_GAPS):
        _get(base, f"/api/timeline/hover?run={run}&gap={gap}", status, lock)
    span = int(meta["span"]) or 1
    _get(base, f"/api/timeline/matches?run={run}&show={show}&q=kernel&t0=0&t1={span}", status, lock)


def walk(
    base: str, runs: Sequence[str], clients: int = 4, rounds: int = 3, stagger: bool = False
) -> dict[int, int]:
    """`clients` threads, each walking every run `rounds` times (all in one order, so they ask for the
    same run at the same time; with `stagger`, each from its own place in the list); returns how many
    answers had each HTTP status."""
    status: dict[int, int] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def client(k: int) -> None:
        order = list(runs[k:]) + list(runs[:k])
        try:
            for _ in range(rounds):
                for run in order:
                    walk_run(base, run, status, lock)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [
        threading.Thread(target=client, args=(k * len(runs) // clients if stagger else 0,)) for k in range(clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return status
