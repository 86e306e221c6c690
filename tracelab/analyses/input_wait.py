"""What counts as the host waiting for input data (gap cause `input_wait`, rule `input_bound`).

A launching thread waits for input while it is inside a data-loading range or blocked in an OS wait for
another process's data:

- PyTorch's DataLoader iterator ops (torch.profiler records them as `enumerate(DataLoader)#
  _MultiProcessingDataLoaderIter.__next__`, `..._SingleProcessDataLoaderIter.__next__`; nsys with
  `--pytorch=autograd-nvtx` as NVTX ranges of the same names; DataPipes as `enumerate(DataPipe)#...`),
  as CPU ops or NVTX ranges: `DATALOADER`;
- user ranges (NVTX ranges, torch `record_function` / Kineto `user_annotation`) whose name has a word
  that starts with one of `DEFAULT_INPUT_WORDS` ("data", "batch", "load": `load_batch`, "next batch",
  "DataLoading"; not "upload", not operator ranges such as `aten::batch_norm`, whose names hold "::").
  The list is configurable: `AnalysisOptions(input_words=(...))`, `tracelab analyze --input-word W`;
- OS runtime calls recorded by nsys (`--trace=osrt`) that wait for data from other processes or
  threads: `INPUT_OS_CALLS` (poll, epoll_wait, select, sem_wait, futex, pthread_cond_*wait, read,
  recvmsg, ...), counted as blocked time the way `no_work` counts it (outside the thread's CUDA calls; a
  wait for another thread of the same process ends at the last wake-up call made in it while it waited).
"""

from __future__ import annotations

import re

__all__ = ["DATALOADER", "DEFAULT_INPUT_WORDS", "INPUT_FRACTION", "INPUT_OS_CALLS", "words_pattern"]

INPUT_FRACTION = 0.5  # the launching thread waited for input for at least this share of the gap

DATALOADER = re.compile(r"enumerate\((DataLoader|DataPipe|IterDataPipe|MapDataPipe)\)|DataLoaderIter|DataLoader\.__next__")

DEFAULT_INPUT_WORDS: tuple[str, ...] = ("data", "batch", "load")

INPUT_OS_CALLS = frozenset({
    "poll", "ppoll", "epoll_wait", "epoll_pwait", "epoll_pwait2", "select", "pselect", "pselect6",
    "sem_wait", "sem_timedwait", "sem_clockwait", "futex",
    "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
    "read", "readv", "pread", "pread64", "recv", "recvfrom", "recvmsg", "recvmmsg",
})


def words_pattern(words: tuple[str, ...]) -> re.Pattern[str] | None:
    """The user-range pattern for `words`: a word of the name starts with one of them (case-insensitive;
    a name with '::', an operator's, never matches). None for an empty list."""
    ws = [re.escape(w.strip()) for w in words if w and w.strip()]
    if not ws:
        return None
    return re.compile(r"^(?!.*::)(?:.*?[^a-z])?(?:" + "|".join(ws) + ")", re.IGNORECASE)
