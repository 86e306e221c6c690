"""`python -m tracelab` = the `tracelab` command."""

from .cli import entry

if __name__ == "__main__":
    entry()
