"""`tracelab record --backend torch -- torchrun ...` (issue 24): the torchrun command line taken apart
and rebuilt with tracelab's profiler wrapper between torchrun and the program, one trace per rank.
The real recordings (tests/data/multigpu/ddp2_*_torch, 2 and 4 ranks on H200s) were made this way; the
rebuilt command is checked here against torch.distributed.run's own parser where torch is installed."""

from __future__ import annotations

import sys

import pytest

from tracelab.errors import BadInput
from tracelab.record.torchrun import torchrun_split


def test_torchrun_with_options_and_script_args():
    t = torchrun_split(["torchrun", "--standalone", "--nproc-per-node", "2", "train.py", "--lr", "1"])
    assert t is not None and not t.module
    assert t.options == ("--standalone", "--nproc-per-node", "2")
    assert t.program == ("train.py", "--lr", "1")
    cmd = t.wrapped("/runs/r")
    assert cmd[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert cmd[3:] == [
        "--standalone", "--nproc-per-node", "2",
        "-m", "tracelab.workloads.torchwrap", "--out", "/runs/r", "--", "train.py", "--lr", "1",
    ]


def test_python_m_torch_distributed_run_with_a_module():
    t = torchrun_split(["python3", "-m", "torch.distributed.run", "--nproc_per_node=4", "-m", "pkg.train", "x"])
    assert t is not None and t.module and t.options == ("--nproc_per_node=4",)
    assert t.wrapped("/r")[-5:] == ["/r", "--module", "--", "pkg.train", "x"]


def test_not_torchrun_and_bad_launches():
    assert torchrun_split(["python", "train.py"]) is None
    assert torchrun_split(["nsys", "profile", "torchrun", "x.py"]) is None
    with pytest.raises(BadInput):
        torchrun_split(["torchrun", "--nproc-per-node", "2"])
    with pytest.raises(BadInput):
        torchrun_split(["torchrun", "--no-python", "bash", "x.sh"])


def test_rebuilt_command_parses_like_torchrun():
    run = pytest.importorskip("torch.distributed.run", reason="torch is not installed (the record extra)")
    t = torchrun_split(["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node=2", "train.py", "-x"])
    args = run.get_args_parser().parse_args(t.wrapped("/r")[3:])
    assert args.module and args.training_script == "tracelab.workloads.torchwrap"
    assert args.training_script_args == ["--out", "/r", "--", "train.py", "-x"]
    assert args.standalone and args.nnodes == "1" and args.nproc_per_node == "2"
