"""The run store: every imported run in one SQLite file (sqlite-utils), by short run id."""

from .records import RunRecord
from .schema import STORE_SCHEMA_VERSION
from .store import Store

__all__ = ["STORE_SCHEMA_VERSION", "RunRecord", "Store"]
