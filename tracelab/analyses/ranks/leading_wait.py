"""The wait of each participant's first matched collective (`LeadingWait`): until it the ranks have not
synchronised once in the recording."""

from __future__ import annotations

import msgspec
import numpy as np

from tracelab.model import Timeline


class LeadingWait(msgspec.Struct, frozen=True):
    """A participant's first matched collective when it arrived before the last rank did. Until that
    collective the ranks have not synchronised once in the recording: how long the early ones wait in
    it depends on when each rank's work (and its profiler) started, not on the workload."""

    rank: int
    device: int
    row: int  # the collective kernel's row in Timeline.events
    name: str  # the operation (AllReduce, ...)
    start_ns: int  # its arrival
    end_ns: int  # the last arrival: the end of the wait
    last_rank: int  # the rank that arrived last
    consistent: bool  # the kernel was still running at the last arrival (else the ranks' clocks disagree)


def leading_waits(timeline: Timeline) -> dict[tuple[int, int], LeadingWait]:
    """Per (rank, device), the wait of its first matched collective (`LeadingWait`), when it waited;
    once per timeline. The first call of each operation on each participant is that operation's
    collective 0, as `match_collectives` matches them (here without matching every call: a few sorts,
    whatever the number of collectives). Empty with fewer than two GPUs or no communication kernel
    matched across them (host-range collectives, gloo, have no GPU wait)."""
    from tracelab.analyses.core.memo import column, memo
    from tracelab.analyses.core.rows import device_rows

    def compute() -> dict[tuple[int, int], LeadingWait]:
        if len(device_rows(timeline)) < 2:  # one GPU: nothing to match
            return {}
        from tracelab.analyses.ranks.collectives import _comm_kernel_rows, _operations

        rows = _comm_kernel_rows(timeline)  # the columns: the SM figures of an `analyze` never load pandas
        if rows.size < 2:
            return {}
        rank = column(timeline, "rank")[rows].astype(np.int64)
        device = column(timeline, "device")[rows].astype(np.int64)
        start = column(timeline, "start")[rows].astype(np.int64)
        end = column(timeline, "end")[rows].astype(np.int64)
        op_labels, op = _operations(timeline, column(timeline, "name")[rows])
        _, part = np.unique((rank << 32) | (device & 0xFFFFFFFF), return_inverse=True)  # (rank, device) order
        part = part.reshape(-1).astype(np.int64)
        # each participant's first call of each operation (collective 0 of that operation)
        order = np.lexsort((start, op, part))
        head = np.ones(order.size, dtype=bool)
        head[1:] = (part[order][1:] != part[order][:-1]) | (op[order][1:] != op[order][:-1])
        first = order[head]
        n_ops = len(op_labels)
        members = np.bincount(op[first], minlength=n_ops)
        last = np.full(n_ops, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(last, op[first], start[first])
        # the last arrival of each operation's collective 0 (ties: the highest participant)
        by_arrival = first[np.lexsort((part[first], start[first], op[first]))]
        tail = np.ones(by_arrival.size, dtype=bool)
        tail[:-1] = op[by_arrival][1:] != op[by_arrival][:-1]
        last_of = np.full(n_ops, -1, dtype=np.int64)
        last_of[op[by_arrival[tail]]] = by_arrival[tail]
        # each participant's first collective: its earliest call, always collective 0 of its operation
        o2 = first[np.lexsort((start[first], part[first]))]
        h2 = np.ones(o2.size, dtype=bool)
        h2[1:] = part[o2][1:] != part[o2][:-1]
        out: dict[tuple[int, int], LeadingWait] = {}
        for i in o2[h2].tolist():  # one per participant
            k = int(op[i])
            if members[k] < 2 or last[k] <= start[i]:
                continue  # not matched on another GPU, or it arrived last: no wait
            out[(int(rank[i]), int(device[i]))] = LeadingWait(
                int(rank[i]), int(device[i]), int(rows[i]), str(op_labels[k]), int(start[i]), int(last[k]),
                int(rank[last_of[k]]), bool(end[i] >= last[k]))
        return out

    return memo(timeline, "leading_waits", compute)
