"""RunRecord: one row of the store's `runs` table, as the CLI and the dashboard list it."""

from __future__ import annotations

from typing import Any

import msgspec


class RunRecord(msgspec.Struct, frozen=True):
    id: str
    name: str
    source: str
    format: str
    backend: str
    workload: str
    variant: str
    gpu: str
    created: str  # ISO 8601, UTC
    fingerprint: str
    events: int
    start_ns: int | None
    end_ns: int | None
    ranks: tuple[int, ...] = (0,)
    devices: int = 0
    notes: tuple[str, ...] = ()

    @property
    def span_ns(self) -> int:
        return 0 if self.start_ns is None or self.end_ns is None else self.end_ns - self.start_ns

    def to_dict(self) -> dict[str, Any]:
        d = msgspec.structs.asdict(self)
        d["ranks"] = list(self.ranks)
        d["notes"] = list(self.notes)
        return d
