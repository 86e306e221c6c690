"""What counts as the host waiting for input data (gap cause `input_wait`, rule `input_bound`).

A launching thread waits for input while it is inside a data-loading range or blocked in an OS wait for
another process's data:

- PyTorch's DataLoader iterator ops (torch.profiler records them as `enumerate(DataLoader)#
  _MultiProcessingDataLoaderIter.__next__`, `..._SingleProcessDataLoaderIter.__next__`; nsys with
  `--pytorch=autograd-nvtx` as NVTX ranges of the same names; DataPipes as `enumerate(DataPipe)#...`),
  as CPU ops or NVTX ranges: `DATALOADER`;
- user ranges (NVTX ranges, torch `record_function` / Kineto `user_annotation`) whose name has one of
  `DEFAULT_INPUT_WORDS` as a word of its own (split at anything but letters and digits, any case: "## load_batch
  ##", "copy_batch_to_gpu", "data_load", "get_data", "next batch"; not "upload", not "BatchNorm"), unless
  the name is an operator's (holds "::", e.g. `aten::batch_norm` under nsys --pytorch=autograd-nvtx) or
  says communication (`COMM_WORDS`: TorchRec's "## sparse_data_dist ##", "## all2all_data:kjt lengths ##"
  move input features between ranks: collectives, not loading). The list is configurable:
  `AnalysisOptions(input_words=(...))`, `tracelab analyze --input-word W` (replaces it);
- OS runtime calls recorded by nsys (`--trace=osrt`) that wait for data from other processes or
  threads: `INPUT_OS_CALLS` (poll, epoll_wait, select, sem_wait, futex, pthread_cond_*wait, read,
  recvmsg, ...), counted as blocked time the way `no_work` counts it (outside the thread's CUDA calls; a
  wait for another thread of the same process ends at the last wake-up call made in it while it waited).
"""

from __future__ import annotations

import re

__all__ = ["COMM_WORDS", "DATALOADER", "DEFAULT_INPUT_WORDS", "INPUT_FRACTION", "INPUT_OS_CALLS", "words_pattern"]

INPUT_FRACTION = 0.5  # the launching thread waited for input for at least this share of the gap

DATALOADER = re.compile(r"enumerate\((DataLoader|DataPipe|IterDataPipe|MapDataPipe)\)|DataLoaderIter|DataLoader\.__next__")

DEFAULT_INPUT_WORDS: tuple[str, ...] = ("data", "batch", "load", "loader", "loading", "dataloader", "dataloading",
                                         "batches", "prefetch")
COMM_WORDS = ("dist", "all2all", "alltoall", "allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter",
              "nccl", "comm", "comms", "send", "recv", "broadcast")

INPUT_OS_CALLS = frozenset({
    "poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect", "pselect6",
    "sem_wait", "sem_timedwait", "sem_clockwait", "futex",
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
    "read", "readv", "pread", "pread64", "recv", "recvfrom", "recvmsg", "recvmmsg",
})


def words_pattern(words: tuple[str, ...]) -> re.Pattern[str] | None:
    """The user-range pattern for `words`: one of them is a word of the name (bounded by anything but
    letters and digits; case-insensitive); a name with '::' (an operator's) or a communication word
    (COMM_WORDS) never matches. None for an empty list."""
    ws = [re.escape(w.strip()) for w in words if w and w.strip()]
    if not ws:
        return None
    edge_l, edge_r = r"(?:^|[^a-z0-9])", r"(?:[^a-z0-9]|$)"
    comm = edge_l + "(?:" + "|".join(re.escape(w) for w in COMM_WORDS) + ")" + edge_r
    return re.compile(r"^(?!.*::)(?!.*" + comm + r").*" + edge_l + "(?:" + "|".join(ws) + ")" + edge_r, re.IGNORECASE)
