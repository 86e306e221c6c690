"""What an nsys export says about its own completeness (the trace health section, tracelab/analyses/health.py):
the profiler's diagnostics (DIAGNOSTIC_EVENT: warnings and errors, and any message about events lost,
dropped or not all collected, with the CUPTI event / buffer counts) and the time the profiler itself took
on the application's threads (PROFILER_OVERHEAD: buffer flushes, CUPTI initialisation, ...). Kept in the
run's metadata (`RunMeta.extra["health"]`), so a stored run has them too."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tracelab.io.nsys.db import NsysDb
from tracelab.io.nsys.host import pid_of, tid_of

DROPPED = re.compile(r"lost|dropp|overflow|buffer.{0,20}full", re.IGNORECASE)
INCOMPLETE = re.compile(r"not all .* collected", re.IGNORECASE)
_SEVERITY = {1: "info", 2: "warning", 3: "error", 4: "verbose"}
MAX_MESSAGES = 200
MAX_OVERHEAD = 100_000


def read_health(db: NsysDb) -> dict[str, Any]:
    out: dict[str, Any] = {"tables": [t for t in ("DIAGNOSTIC_EVENT", "PROFILER_OVERHEAD") if t in db.tables]}
    if db.has("DIAGNOSTIC_EVENT", "severity", "text"):
        rows = db.rows("SELECT severity, text FROM DIAGNOSTIC_EVENT")
        msgs, seen = [], set()
        for sev, text in rows:
            text = " ".join(str(text if text is not None else "").split())
            sev = int(sev) if isinstance(sev, int) else 0
            if (sev in (2, 3) or DROPPED.search(text) or "CUPTI events" in text) and (sev, text) not in seen:
                seen.add((sev, text))
                msgs.append({"severity": _SEVERITY.get(sev, "unknown"), "text": text[:500],
                             "dropped": bool(DROPPED.search(text)), "incomplete": bool(INCOMPLETE.search(text))})
        out["diagnostics"] = msgs[:MAX_MESSAGES]
    if db.has("PROFILER_OVERHEAD", "start", "end", "globalTid"):
        name = "nameId" if db.has("PROFILER_OVERHEAD", "nameId") else None
        sql = (
            "SELECT p.start, p.end, p.globalTid, " + ("COALESCE(s.value, '')" if name and "StringIds" in db.tables else "''")
            + " FROM PROFILER_OVERHEAD p"
            + (" LEFT JOIN StringIds s ON s.id = p.nameId" if name and "StringIds" in db.tables else "")
            + f" WHERE p.start IS NOT NULL AND p.end IS NOT NULL ORDER BY p.start LIMIT {MAX_OVERHEAD}"
        )
        rows = db.rows(sql)
        if rows:
            s = np.array([r[0] for r in rows], dtype=np.int64)
            e = np.array([r[1] for r in rows], dtype=np.int64)
            g = np.array([r[2] if r[2] is not None else -1 for r in rows], dtype=np.int64)
            names = [str(r[3]) for r in rows]
            out["overhead"] = {
                "start": s.tolist(), "end": np.maximum(e, s).tolist(),
                "pid": np.where(g >= 0, pid_of(g), -1).tolist(), "tid": np.where(g >= 0, tid_of(g), -1).tolist(),
                "name": names,
            }
    return out
