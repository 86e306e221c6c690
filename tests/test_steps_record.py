"""`tracelab record --backend nsys -- python ...` asks nsys for PyTorch host ranges
(`--pytorch=autograd-nvtx`) and keeps the program's own meta. nsys is not installed here, so a small
stand-in executable plays it: it answers `profile --help` like the nsys it imitates and runs the
profiled command (the real one ran on the GPU machine: tests/data/README.md, train_plain fixtures)."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from tracelab.record.command import record_command
from tracelab.record.nsys import NSYS_PYTORCH_HOST, is_python_command, pytorch_host_flags

HELP_WITH = "\t--pytorch=\n\n            Possible values are 'autograd-nvtx', 'autograd-shapes-nvtx', 'functions-trace' or 'none'."


def fake_nsys(tmp_path: Path, help_text: str) -> Path:
    """An executable that prints `help_text` for `profile --help`, else logs its flags to flags.txt
    (next to the -o prefix), runs the command after -o PREFIX and writes PREFIX.sqlite."""
    exe = tmp_path / "nsys"
    exe.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        "args = sys.argv[1:]\n"
        "if args[:2] == ['profile', '--help']:\n"
        f"    print({help_text!r}); sys.exit(0)\n"
        "i = args.index('-o')\n"
        "prefix = args[i + 1]\n"
        "open(prefix + '.flags.txt', 'w').write('\\n'.join(args[1:i]))\n"
        "rc = subprocess.call(args[i + 2:])\n"
        "open(prefix + '.sqlite', 'wb').close()\n"
        "sys.exit(rc)\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return exe


PROGRAM = (
    "import json, os, pathlib; "
    "pathlib.Path(os.environ['TRACELAB_RUN_DIR'], 'program_meta.json').write_text(json.dumps({'steps': 7}))"
)


@pytest.fixture
def nsys_with_pytorch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = fake_nsys(tmp_path, HELP_WITH)
    monkeypatch.setenv("TRACELAB_NSYS", str(exe))
    monkeypatch.setattr("tracelab.io.nsys.load.find_nsys", lambda: exe, raising=False)
    return exe


def test_python_program_gets_the_pytorch_host_flag(tmp_path: Path, nsys_with_pytorch: Path) -> None:
    run = record_command([sys.executable, "-c", PROGRAM], "nsys", tmp_path / "runs")
    flags = (run / "trace.flags.txt").read_text().splitlines()
    assert NSYS_PYTORCH_HOST == "--pytorch=autograd-nvtx" and NSYS_PYTORCH_HOST in flags
    assert "--sample=none" in flags
    meta = json.loads((run / "meta.json").read_text())
    assert meta["nsys_host"]["flags"] == [NSYS_PYTORCH_HOST]
    assert meta["program"] == {"steps": 7}  # the program's own meta, kept whole
    assert meta["backend"] == "nsys" and meta["trace_file"] == "trace.sqlite"


def test_host_flag_can_be_turned_off(tmp_path: Path, nsys_with_pytorch: Path) -> None:
    run = record_command([sys.executable, "-c", PROGRAM], "nsys", tmp_path / "runs", pytorch_host=False)
    assert NSYS_PYTORCH_HOST not in (run / "trace.flags.txt").read_text().splitlines()
    assert json.loads((run / "meta.json").read_text())["nsys_host"]["flags"] == []


def test_no_flag_for_other_programs_or_an_older_nsys(tmp_path: Path) -> None:
    with_opt = fake_nsys(tmp_path, HELP_WITH)
    assert pytorch_host_flags(with_opt, ["./a.out"])[0] == ()
    assert pytorch_host_flags(with_opt, ["python3", "train.py"])[0] == (NSYS_PYTORCH_HOST,)
    old_dir = tmp_path / "old"
    old_dir.mkdir()
    old = fake_nsys(old_dir, "  --trace=  cuda, nvtx, osrt")
    flags, note = pytorch_host_flags(old, ["python3", "train.py"])
    assert flags == () and "no --pytorch option" in note
    assert pytorch_host_flags(tmp_path / "missing-nsys", ["python3", "x.py"])[0] == ()


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        (["python3", "t.py"], True),
        (["/usr/bin/python3.12", "-m", "x"], True),
        (["t.py"], True),
        (["./a.out"], False),
        ([], False),
    ],
)
def test_is_python_command(cmd: list[str], expected: bool) -> None:
    assert is_python_command(cmd) is expected


def test_os_runtime_calls_are_traced_by_default(tmp_path: Path, nsys_with_pytorch: Path) -> None:
    """`-t cuda,nvtx,osrt`: OS runtime calls tell a thread blocked in the OS from one busy on the host (gap
    causes); `os_calls=False` leaves them out (to measure what they cost) and meta.json says which."""
    run = record_command([sys.executable, "-c", PROGRAM], "nsys", tmp_path / "runs")
    flags = (run / "trace.flags.txt").read_text().splitlines()
    assert flags[flags.index("-t") + 1] == "cuda,nvtx,osrt"
    assert json.loads((run / "meta.json").read_text())["nsys_host"]["os_calls"] is True
    run = record_command([sys.executable, "-c", PROGRAM], "nsys", tmp_path / "runs", os_calls=False)
    flags = (run / "trace.flags.txt").read_text().splitlines()
    assert flags[flags.index("-t") + 1] == "cuda,nvtx"
    assert json.loads((run / "meta.json").read_text())["nsys_host"]["os_calls"] is False


def test_workloads_get_the_pytorch_host_flag_under_nsys(tmp_path: Path) -> None:
    """A built-in workload runs as a Python program (tracelab.workloads.runner): under nsys it gets the same
    host ranges as any Python program, so its nsys and torch.profiler runs see the same host data."""
    from tracelab.record.nsys import workload_host_flags
    from tracelab.record.workload import build_command

    exe = fake_nsys(tmp_path, HELP_WITH)
    flags, note = workload_host_flags(exe)
    assert flags == (NSYS_PYTORCH_HOST,) and "autograd" in note
    assert workload_host_flags(exe, pytorch_host=False)[0] == ()
    cmd = build_command("sync_pitfalls", "item_every_step", "nsys", True, tmp_path / "run", nsys=exe, nsys_extra=flags)
    assert NSYS_PYTORCH_HOST in cmd and cmd.index(NSYS_PYTORCH_HOST) < cmd.index("-o")
    assert cmd[cmd.index("-t") + 1] == "cuda,nvtx,osrt"
