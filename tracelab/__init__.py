"""tracelab: where is my GPU idle, what overlaps with what, and why."""

__version__ = "0.1.0"
