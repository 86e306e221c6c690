"""The reference decoder of Kineto events: msgspec structs with the fields tracelab reads.

The C scanner (`_kineto_scan.c`) handles strictly valid JSON of the expected types; a piece it declines
is decoded here, strictly first, then loosely (every field typed Any, its values checked one by one by
the parser). Imported only when a piece is declined, so a trace the scanner reads never loads msgspec.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from tracelab.io.kineto.blocks import ChunkError
from tracelab.io.kineto.stream import PieceRejected

# Integer fields take integers only: a float, bool or string sends the piece to the loose decoder,
# whose values are checked one by one (never truncated or cast silently).
_Int = int | None
_Id = int | str | None  # pid / tid: a number, or a label such as "Spans" / "stream 7"
_Triple = tuple[int, int, int] | None


class Args(msgspec.Struct, gc=False):
    device: _Int = -1
    stream: _Int = -1
    correlation: _Int = -1
    context: _Int = -1
    bytes: _Int = -1
    registers: _Int = msgspec.field(default=-1, name="registers per thread")
    shared: _Int = msgspec.field(default=-1, name="shared memory")
    grid: _Triple = None
    block: _Triple = None
    sync: str | None = msgspec.field(default=None, name="cuda_sync_kind")
    # a `[memory]` instant's (profile_memory=True); defaults as the profiler's reader takes them
    mem_device_type: _Int = msgspec.field(default=1, name="Device Type")
    mem_device_id: _Int = msgspec.field(default=-1, name="Device Id")
    mem_bytes: _Int = msgspec.field(default=0, name="Bytes")
    mem_allocated: _Int = msgspec.field(default=-1, name="Total Allocated")
    mem_reserved: _Int = msgspec.field(default=-1, name="Total Reserved")
    mem_addr: _Int = msgspec.field(default=0, name="Addr")


class Event(msgspec.Struct, gc=False):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: _Id = -1
    tid: _Id = -1
    ts: float = math.nan
    dur: float = 0.0
    args: Args | None = None


def _loose(strict: type[msgspec.Struct], name: str, **types: Any) -> type[msgspec.Struct]:
    """The same struct (fields, defaults, JSON names) with every field typed Any (or as in `types`):
    the fallback decoder for files whose fields hold odd values."""
    fields = [
        (f.name, types.get(f.name, Any), msgspec.field(default=f.default, name=f.encode_name))
        for f in msgspec.structs.fields(strict)
    ]
    return msgspec.defstruct(name, fields, gc=False)


_LooseArgs = _loose(Args, "_LooseArgs")
_LooseEvent = _loose(Event, "_LooseEvent", args=_LooseArgs | None)


STRICT = msgspec.json.Decoder(list[Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])
EMPTY_ARGS = Args()


def _rejected(exc: msgspec.DecodeError) -> Exception:
    """msgspec >= 0.23 reports invalid UTF-8 as a DecodeError ("Invalid UTF-8 encoded string"). Cuts fall on
    ASCII structure bytes, so bad UTF-8 is the file's, never a wrong cut's: a ChunkError that says so."""
    if "UTF-8" in str(exc):
        return ChunkError(f"invalid UTF-8 in traceEvents ({exc})")
    return PieceRejected(str(exc))


def decode(piece: bytes) -> list:
    """The events of a piece (a JSON array): strict structs, else loose ones. PieceRejected when the piece
    is not valid JSON (a wrong cut), ChunkError when it is JSON but not a list of events."""
    try:
        try:
            return STRICT.decode(piece)
        except msgspec.ValidationError:
            pass
        except msgspec.DecodeError as exc:
            raise _rejected(exc) from None
        try:
            return _LOOSE.decode(piece)
        except msgspec.ValidationError as exc:  # e.g. an element that is not an object
            raise ChunkError(f"traceEvents holds something that is not an event ({exc})") from None
        except msgspec.DecodeError as exc:
            raise _rejected(exc) from None
    except UnicodeDecodeError as exc:  # msgspec < 0.23 raises this for invalid UTF-8 in a string
        raise ChunkError(f"invalid UTF-8 in traceEvents ({exc.reason})") from None
    except RecursionError:
        raise ChunkError("JSON in traceEvents is nested too deeply (limit about 1000 levels)") from None
