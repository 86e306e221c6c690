"""Command lines of several processes: a torchrun launch taken apart (`torchrun_split`) and put together
again with tracelab's torch.profiler wrapper between torchrun and the program; a plain Python command's
script (`python_script`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import msgspec

from ..errors import BadInput

# torchrun's options that take no value (torch/distributed/run.py); every other option takes one
TORCHRUN_FLAGS = frozenset(
    {
        "--standalone",
        "--module",
        "-m",
        "--no-python",
        "--no_python",
        "--run-path",
        "--run_path",
        "--virtual-local-rank",
        "--virtual_local_rank",
        "--use-env",
        "--use_env",
    }
)
TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


class TorchrunLaunch(msgspec.Struct, frozen=True):
    """A torchrun command line taken apart: the launcher (`torchrun` or `python -m
    torch.distributed.run`), its options, and the program each rank runs (a script, or a module
    when `module`)."""

    launcher: tuple[str, ...]
    options: tuple[str, ...]
    module: bool
    program: tuple[str, ...]

    def wrapped(self, run_dir: Path) -> list[str]:
        """The same launch with tracelab's torch.profiler wrapper between torchrun and the program:
        every rank writes its own trace into run_dir/ranks."""
        wrapper = ["-m", "tracelab.workloads.torchwrap", "--out", str(run_dir)]
        return [
            *self.launcher,
            *self.options,
            *wrapper,
            *(["--module"] if self.module else []),
            "--",
            *self.program,
        ]


def torchrun_split(cmd: Sequence[str]) -> TorchrunLaunch | None:
    """`torchrun [opts] prog [args]` or `python -m torch.distributed.run|launch [opts] prog [args]`
    taken apart (None for any other command). BadInput for `--no-python` (not a Python program) or a
    launch without a program."""
    cmd = list(cmd)
    if not cmd:
        return None
    if Path(cmd[0]).name == "torchrun":
        rest = cmd[1:]
    elif Path(cmd[0]).name.startswith("python") and len(cmd) > 2 and cmd[1] == "-m" and cmd[2] in TORCHRUN_MODULES:
        rest = cmd[3:]
    else:
        return None
    launcher = (sys.executable, "-m", "torch.distributed.run")
    options: list[str] = []
    module = False
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "--":
        opt = rest[i]
        if opt in ("--no-python", "--no_python"):
            raise BadInput("--backend torch profiles Python programs; torchrun --no-python runs something else")
        if opt in ("-m", "--module"):
            module = True
        elif opt in TORCHRUN_FLAGS or "=" in opt:
            options.append(opt)
        else:
            options += rest[i : i + 2]
            i += 1
        i += 1
    if i < len(rest) and rest[i] == "--":
        i += 1
    program = tuple(rest[i:])
    if not program:
        raise BadInput("the torchrun command names no program to run")
    return TorchrunLaunch(launcher, tuple(options), module, program)


def python_script(cmd: list[str]) -> list[str]:
    """`[script.py, args...]` from a python command line (BadInput for anything else)."""
    if Path(cmd[0]).name.startswith("python") and len(cmd) > 1 and cmd[1] != "-c":
        if cmd[1] == "-m":
            raise BadInput(
                "--backend torch profiles a Python script (python script.py ...) or a torchrun launch; "
                "use nsys for -m"
            )
        return cmd[1:]
    if cmd[0].endswith(".py"):
        return cmd
    raise BadInput(f"--backend torch can only profile a Python script, not {cmd[0]!r}; use --backend nsys")

