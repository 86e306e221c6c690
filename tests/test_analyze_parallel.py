"""analyze on several threads (tracelab.analyses.parallel): the same document as on one thread, on real
recordings; run_each's ordering and errors; memo computes a key once when two threads ask together."""

from __future__ import annotations

import importlib
import json
import lzma
import threading
import time
from pathlib import Path

import pytest

from tracelab import api
from tracelab.analyses import parallel
from tracelab.analyses.core.memo import AnalysisContext, memo
from tracelab.io.nsys.load import load_nsys_sqlite
from tracelab.model import EventKind, RunMeta, build_timeline

DATA = Path(__file__).parent / "data"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
analyze_module = importlib.import_module("tracelab.analyses.pipeline")


def _nsys(tmp_path: Path, name: str):
    out = tmp_path / f"{name}.sqlite"
    out.write_bytes(lzma.decompress((DATA / f"{name}.sqlite.xz").read_bytes()))
    return load_nsys_sqlite(out)


def _document(timeline, monkeypatch, threads: int) -> str:
    monkeypatch.setattr(analyze_module, "threads_for", lambda n: threads)
    return json.dumps(api.to_json(api.analyze(timeline)), sort_keys=True)


@pytest.mark.parametrize("name", ["host_blocked_nsys", "train_plain_nsys"])
def test_threads_give_the_same_document_on_recorded_nsys_runs(tmp_path, monkeypatch, name):
    one = _document(_nsys(tmp_path, name), monkeypatch, 1)
    for threads in (2, 3, 8):  # a fresh timeline each time: no memo carried over from the serial run
        assert _document(_nsys(tmp_path, name), monkeypatch, threads) == one
    assert json.loads(one)["findings"]  # the recordings do fire rules: the rule phase is exercised


@pytest.mark.corpus
def test_threads_give_the_same_document_on_a_corpus_kineto_trace(monkeypatch):
    path = CORPUS / "hta" / "negative_queue_length_values_check__rank0.json.gz"  # 6 streams, NCCL, steps
    if not path.exists():
        pytest.skip("no corpus beside the checkout")
    one = _document(api.load(path), monkeypatch, 1)
    assert _document(api.load(path), monkeypatch, 2) == one
    assert json.loads(one)["steps"]


def test_big_timelines_use_the_cores_small_and_huge_ones_one_thread(monkeypatch):
    monkeypatch.delenv(parallel.THREADS_ENV, raising=False)
    monkeypatch.setattr(parallel, "usable_cores", lambda: 2)
    assert parallel.threads_for(parallel.PARALLEL_MIN_EVENTS - 1) == 1
    assert parallel.threads_for(parallel.PARALLEL_MIN_EVENTS) == 2
    assert parallel.threads_for(parallel.PARALLEL_MAX_EVENTS + 1) == 1  # memory first on the biggest
    monkeypatch.setattr(parallel, "usable_cores", lambda: 64)
    assert parallel.threads_for(parallel.PARALLEL_MAX_EVENTS) == 4
    monkeypatch.setenv(parallel.THREADS_ENV, "1")
    assert parallel.threads_for(parallel.PARALLEL_MAX_EVENTS) == 1
    monkeypatch.setenv(parallel.THREADS_ENV, "not a number")
    assert parallel.threads_for(parallel.PARALLEL_MAX_EVENTS) == 4


def test_whole_run_analysis_has_the_warm_up_note_where_the_scoped_path_puts_it(tmp_path, monkeypatch):
    """analyze_scoped without a scope finds the steps among the other analyses; its notes are those of
    the explicit path (steps found first, whole-run note as the scope note)."""
    from tracelab.analyses.pipeline import analyze, analyze_scoped
    from tracelab.analyses.scope import whole_run_note
    from tracelab.analyses.steps.infer import find_steps

    timeline = _nsys(tmp_path, "train_plain_nsys")
    steps = find_steps(timeline)
    assert len(steps.steps) >= 3
    explicit = analyze(timeline, steps=steps, scope_note=whole_run_note(steps))
    for threads in (1, 2):
        monkeypatch.setattr(analyze_module, "threads_for", lambda n, t=threads: t)
        got = analyze_scoped(timeline)
        assert got.notes == explicit.notes and whole_run_note(steps) in got.notes
        assert got.steps == explicit.steps


def test_run_each_returns_results_in_task_order_and_starts_long_tasks_first():
    started: list[int] = []
    lock = threading.Lock()

    def task(i: int, seconds: float):
        def run():
            with lock:
                started.append(i)
            time.sleep(seconds)
            return i * 10

        return run

    tasks = [task(i, 0.01) for i in range(6)]
    tasks[5] = task(5, 0.2)
    assert parallel.run_each(tasks, 2, first=[False] * 5 + [True]) == [0, 10, 20, 30, 40, 50]
    assert started[0] == 5 and sorted(started) == list(range(6))
    assert parallel.run_each(tasks, 1) == [0, 10, 20, 30, 40, 50]


def test_run_each_raises_the_first_error_after_the_other_tasks_finish():
    finished = threading.Event()

    def slow():
        time.sleep(0.2)
        finished.set()
        return 1

    def bad():
        raise ValueError("broken analysis")

    with pytest.raises(ValueError, match="broken analysis"):
        parallel.run_each([slow, bad], 2)
    assert finished.is_set()  # no helper still at work once run_each has returned


def test_memo_computes_a_key_once_when_threads_ask_together():
    timeline = build_timeline({"start": [0], "end": [1], "kind": [int(EventKind.RUNTIME)]}, [""], RunMeta(source="m", format="test"))
    calls: list[int] = []
    entered = threading.Event()

    def compute():
        calls.append(1)
        entered.set()
        time.sleep(0.2)
        return "value"

    other: list[str] = []
    ctx = AnalysisContext(timeline)
    t = threading.Thread(target=lambda: other.append(ctx.memo("k", compute)))
    t.start()
    entered.wait(5)
    assert ctx.memo("k", compute) == "value"  # waits for the other thread's result
    t.join(5)
    assert other == ["value"] and len(calls) == 1


def test_memo_without_an_active_context_keeps_nothing():
    """No process-wide cache: outside an active context memo() computes each time; inside one the value
    is kept in that context only, and a second context of the same timeline starts empty."""
    timeline = build_timeline({"start": [0], "end": [1], "kind": [int(EventKind.RUNTIME)]}, [""], RunMeta(source="m", format="test"))
    calls: list[int] = []

    def compute():
        calls.append(1)
        return len(calls)

    assert memo(timeline, "k", compute) == 1 and memo(timeline, "k", compute) == 2
    a, b = AnalysisContext(timeline), AnalysisContext(timeline)
    with a.active():
        assert memo(timeline, "k", compute) == 3 and memo(timeline, "k", compute) == 3
    with b.active():
        assert memo(timeline, "k", compute) == 4
    with a.active():
        assert memo(timeline, "k", compute) == 3


def test_memo_recomputes_when_the_first_thread_fails():
    timeline = build_timeline({"start": [0], "end": [1], "kind": [int(EventKind.RUNTIME)]}, [""], RunMeta(source="m", format="test"))
    entered, release = threading.Event(), threading.Event()

    def failing():
        entered.set()
        release.wait(5)
        raise RuntimeError("first try fails")

    errors: list[BaseException] = []

    ctx = AnalysisContext(timeline)

    def first():
        try:
            ctx.memo("f", failing)
        except RuntimeError as e:
            errors.append(e)

    t = threading.Thread(target=first)
    t.start()
    entered.wait(5)
    threading.Timer(0.1, release.set).start()
    assert ctx.memo("f", lambda: 42) == 42
    t.join(5)
    assert len(errors) == 1
