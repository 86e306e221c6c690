"""`python -m tracelab.cli`: the `tracelab` command."""

from tracelab.cli import entry

entry()
