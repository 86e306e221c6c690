"""Shared machinery of the analyses: interval math, distinct values, short names, GPU rows per device, the host view of a rank, and the per-timeline memos."""
