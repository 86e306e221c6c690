"""The collective metadata torch.profiler writes in the args of NCCL kernels (PyTorch ≥ 2.1:
`Collective name`, `In msg nelems`, `Out msg nelems`, `Group size`, `dtype`, `Process Group Name`,
`Process Group Description`, beside the kernel's `correlation` and `device`).

The C scanner reads a fixed set of fields, so these are found in the raw text instead: each block the
reader inflates is searched for `"Collective name"` (one `bytes.find` pass: a few ms per 4 MiB block);
around each hit the enclosing `args` object (flat: numbers and strings) is decoded with orjson. Only
events that carry a `correlation` (the kernels, not the `record_param_comms` CPU op) are kept. The end
of a block is carried into the next one, so an object cut by a block boundary is read whole.

`CommArgs.result()` is a small columnar dict for `RunMeta.extra["collective_args"]` (JSON in the
store): one entry per kernel, matched to the timeline's kernels by (rank, correlation).
"""

from __future__ import annotations

from typing import Any

KEY = b'"Collective name"'
_ARGS = b'"args"'
CARRY = 1 << 16  # bytes of a block's end kept for the next one (an args object is far shorter)
FIELDS = ("correlation", "device", "name", "in_nelems", "out_nelems", "group_size", "dtype", "group", "group_desc")
_SOURCE = {
    "name": "Collective name",
    "in_nelems": "In msg nelems",
    "out_nelems": "Out msg nelems",
    "group_size": "Group size",
    "dtype": "dtype",
    "group": "Process Group Name",
    "group_desc": "Process Group Description",
}
MAX_ENTRIES = 1_000_000  # bound on what is kept (metadata of a million kernels)


def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return None


def _str_or_none(v: Any) -> str | None:
    return str(v)[:200] if isinstance(v, (str, int)) and not isinstance(v, bool) else None


def _object_end(buf: bytes | bytearray | memoryview, open_at: int, limit: int) -> int:
    """Index just past the '}' closing the object opened at `open_at`, or -1 if not within `limit`."""
    depth = 0
    i = open_at
    in_str = False
    n = min(len(buf), limit)
    while i < n:
        c = buf[i]
        if in_str:
            if c == 0x5C:  # backslash: skip the escaped byte
                i += 2
                continue
            if c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
        elif c == 0x7B or c == 0x5B:
            depth += 1
        elif c == 0x7D or c == 0x5D:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


_memmem: Any = None


def _holds_key(data: bytes | bytearray, head: int) -> bool:
    """Whether KEY occurs in data[head:]: glibc's memmem through ctypes, which runs without the GIL (this is
    the reading thread: bytes.find of a 4 MiB block held the GIL ~1 ms, time the parser's threads wait
    for), else bytes.find."""
    global _memmem
    if _memmem is None:
        try:
            import ctypes

            fn = ctypes.CDLL("libc.so.6").memmem
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
            _memmem = fn
        except (OSError, AttributeError):
            _memmem = False
    size = len(data) - head
    if not _memmem or size < len(KEY):
        return data.find(KEY, head) >= 0
    import numpy as np

    arr = np.frombuffer(data, dtype=np.uint8)  # its address (a bytearray's export ends with `arr`)
    try:
        return bool(_memmem(arr.ctypes.data + head, size, KEY, len(KEY)))
    finally:
        del arr


class CommArgs:
    """Fed every inflated block in file order (`feed`); `result()` when the file is read."""

    def __init__(self) -> None:
        self._tail = b""
        self._pending = False  # the tail holds an args object cut by the end of the last block
        self.cols: dict[str, list] = {f: [] for f in FIELDS}
        self.seen = 0

    def feed(self, data: bytes | bytearray, head: int = 0) -> None:
        view = memoryview(data)[head:]
        k = len(KEY)
        if (
            not self._pending and not _holds_key(data, head) and (self._tail[-k:] + bytes(view[:k])).find(KEY) < 0
        ):  # the common case: no key here, no object cut at the end of the previous block
            if len(view) >= CARRY:
                self._tail = bytes(view[-CARRY:])
            else:
                self._tail = (self._tail + bytes(view))[-CARRY:]
            return
        buf = self._tail + bytes(view)
        self._pending = False
        done = 0  # hits before this position were read
        at = buf.find(KEY)
        while at >= 0:
            args_at = buf.rfind(_ARGS, max(done, at - CARRY), at)
            if args_at < 0:
                at = buf.find(KEY, at + 1)
                continue
            open_at = buf.find(b"{", args_at, at)
            if open_at < 0:
                at = buf.find(KEY, at + 1)
                continue
            # args objects are flat: the first '}' ends it unless a string holds one (then the slow scan)
            end = buf.find(b"}", open_at, open_at + CARRY) + 1
            if 0 < end <= at:  # that "args" object ends before the key: the key is not in an args object
                at = buf.find(KEY, at + 1)
                continue
            if end <= 0 or not self._add(buf[open_at:end]):
                end = _object_end(buf, open_at, open_at + CARRY)
                if end > 0:
                    self._add(buf[open_at:end])
            if end <= 0:  # cut by the block's end: read it with the next block
                self._tail = buf[args_at:]
                self._pending = len(self._tail) <= CARRY
                if not self._pending:
                    self._tail = b""
                return
            done = end
            at = buf.find(KEY, end)
        self._tail = buf[max(done, len(buf) - CARRY) :]

    def _add(self, raw: bytes) -> bool:
        """Keep one args object's metadata; False when `raw` is not a JSON object."""
        import orjson

        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(obj, dict):
            return False
        corr = _int_or_none(obj.get("correlation"))
        if corr is None or "Collective name" not in obj or self.seen >= MAX_ENTRIES:
            return True
        self.seen += 1
        c = self.cols
        c["correlation"].append(corr)
        dev = _int_or_none(obj.get("device"))
        c["device"].append(-1 if dev is None else dev)
        for f in ("in_nelems", "out_nelems", "group_size"):
            c[f].append(_int_or_none(obj.get(_SOURCE[f])))
        for f in ("name", "dtype", "group", "group_desc"):
            c[f].append(_str_or_none(obj.get(_SOURCE[f])))
        return True

    def result(self) -> dict[str, list] | None:
        return self.cols if self.cols["correlation"] else None
