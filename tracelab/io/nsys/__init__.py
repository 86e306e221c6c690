"""Nsight Systems SQLite exports: `load.load_nsys_sqlite`."""
