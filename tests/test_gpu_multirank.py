"""On a machine of 2+ GPUs: a rank's probe buffers and tensors live on the rank's own GPU.

Issue 25: the runner allocated the probe recorder's buffers before the workload selected the rank's
device, so rank 1's buffers lived on GPU 0 and its first Triton launch failed. The runner now selects
the device from LOCAL_RANK first (runner.select_rank_device). These tests run a real process per
LOCAL_RANK on the real GPUs (skipped without two)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tracelab.workloads.runner import rank_device_index


def _gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0

CHECK = """
import os, sys
from tracelab.workloads.runner import select_rank_device
from tracelab.workloads.probes import ProbeRecorder
index = select_rank_device()
r = ProbeRecorder(enabled=True, max_rows=16)
r.prepare()
print(index, r._pool.device.index)
"""


def test_rank_device_index_follows_local_rank() -> None:
    assert rank_device_index({"LOCAL_RANK": "1"}, device_count=2) == 1
    assert rank_device_index({"LOCAL_RANK": "3"}, device_count=2) == 1
    assert rank_device_index({}, device_count=4) == 0
    assert rank_device_index({"LOCAL_RANK": "x"}, device_count=2) == 0


@pytest.mark.gpu
@pytest.mark.skipif(_gpus() < 2, reason="needs torch and 2 CUDA GPUs")
@pytest.mark.parametrize("local_rank", [0, 1])
def test_probe_pool_lands_on_the_ranks_gpu(local_rank: int) -> None:
    out = subprocess.run(
        [sys.executable, "-c", CHECK],
        env={**__import__("os").environ, "LOCAL_RANK": str(local_rank)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [str(local_rank), str(local_rank)]
