"""Recorded run directories (`tracelab record`): `load.load_run_dir`."""
