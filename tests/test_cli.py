"""The real `tracelab` command line (click's CliRunner and `python -m tracelab` subprocesses) on small
Kineto traces written here: import / runs / analyze / compare, and bad input that must end in exit 2
with one line on stderr, no traceback, the store unchanged and the input file's bytes unchanged."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import click
import orjson
import pytest
from click.testing import CliRunner

from tracelab.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"


def kineto_trace(steps: int = 4, *, sync_every_step: bool = True, stream_b: int = 8) -> dict:
    """A small current-schema Kineto trace: per step a H2D copy on one stream and two kernels on
    another, launched from one host thread, optionally followed by a blocking cudaStreamSynchronize."""
    ev: list[dict] = []
    t = 1000.0
    corr = 1
    for step in range(steps):
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "pid": 10,
                "tid": 11,
                "ts": t,
                "dur": 300.0,
            }
        )
        for i, (cat, name, stream, dur) in enumerate(
            [
                ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 7, 40.0),
                ("kernel", "void gemm_kernel<128>(float*)", stream_b, 60.0),
                ("kernel", "elementwise_add", stream_b, 20.0),
            ]
        ):
            api = "cudaMemcpyAsync" if cat == "gpu_memcpy" else "cudaLaunchKernel"
            launch = t + 5 + 10 * i
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": api,
                    "pid": 10,
                    "tid": 11,
                    "ts": launch,
                    "dur": 4.0,
                    "args": {"correlation": corr},
                }
            )
            gpu_start = launch + 20 + 70 * i
            args = {"device": 0, "stream": stream, "correlation": corr, "context": 1}
            if cat == "kernel":
                args.update(
                    {
                        "grid": [128, 1, 1],
                        "block": [256, 1, 1],
                        "registers per thread": 32,
                        "shared memory": 0,
                    }
                )
            else:
                args.update({"bytes": 1 << 20})
            ev.append(
                {
                    "ph": "X",
                    "cat": cat,
                    "name": name,
                    "pid": 0,
                    "tid": stream,
                    "ts": gpu_start,
                    "dur": dur,
                    "args": args,
                }
            )
            corr += 1
        if sync_every_step:
            ev.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaStreamSynchronize",
                    "pid": 10,
                    "tid": 11,
                    "ts": t + 40,
                    "dur": 230.0,
                    "args": {"correlation": corr},
                }
            )
            corr += 1
        t += 400.0
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H200",
                "numSms": 132,
                "computeMajor": 9,
                "computeMinor": 0,
                "totalGlobalMem": 150000000000,
            }
        ],
        "traceEvents": ev,
    }


def write_trace(path: Path, doc: dict) -> Path:
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.fixture()
def env(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACELAB_DEBUG", raising=False)
    db = tmp_path / "store.db"
    monkeypatch.setenv("TRACELAB_DB", str(db))
    return tmp_path, db


def run(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def runs_table(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as c:
        rows = c.execute("SELECT * FROM runs ORDER BY id").fetchall()
        n = c.execute("SELECT count(*) FROM events").fetchone()[0]
    return rows + [("events", n)]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


# ---- happy paths ------------------------------------------------------------------------------


def test_every_command_has_help():
    from tracelab import __version__

    assert run("--version").stdout.strip() == f"tracelab, version {__version__}"
    r = run("--help")
    assert r.exit_code == 0
    for cmd in ("workloads", "record", "import", "runs", "analyze", "compare", "report", "serve", "demo"):
        assert cmd in r.stdout
        sub = run(cmd, "--help")
        assert sub.exit_code == 0 and "Usage: " in sub.stdout
        assert cmd == "workloads" or "--db" in sub.stdout


def test_help_imports_nothing_heavy():
    code = (
        "import sys; from click.testing import CliRunner; from tracelab.cli import main; "
        "CliRunner().invoke(main, ['--help']); "
        "print(','.join(m for m in ('dash', 'plotly', 'torch', 'pandas', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == ""


def test_import_runs_analyze(env):
    tmp, _ = env
    trace = write_trace(tmp / "train.json", kineto_trace())
    before = sha(trace)
    r = run("import", str(trace))
    assert r.exit_code == 0, r.stderr
    rid = r.stdout.strip()
    assert len(rid) == 8 and "imported as run " + rid in r.stderr
    assert sha(trace) == before

    listed = orjson.loads(run("runs", "--json").stdout)
    assert [x["id"] for x in listed] == [rid]
    assert {"id", "name", "workload", "variant", "backend", "gpu", "source", "events", "created"} <= set(
        listed[0]
    )
    assert listed[0]["name"] == "train.json" and listed[0]["events"] > 0

    human = run("runs")
    assert human.exit_code == 0 and rid in human.stdout and "train.json" in human.stdout

    doc = orjson.loads(run("analyze", rid, "--json").stdout)
    # issue 27 added `health`, `ranges` and `memory`, issue 24 `setup` and the critical path (new fields;
    # schema 2 unchanged)
    assert set(doc) == {"schema", "trace", "devices", "steps", "setup", "gaps", "findings", "notes", "health",
                        "ranges", "memory", "critical_path"}
    assert doc["schema"] == 2
    dev = doc["devices"][0]
    assert {
        "rank",
        "device",
        "name",
        "sm_count",
        "span_ns",
        "busy_ns",
        "idle_ns",
        "kernel_ns",
        "memcpy_ns",
        "memset_ns",
        "comm_ns",
        "overlap",
        "streams",
        "sm",
    } <= set(dev)
    assert dev["busy_ns"] + dev["idle_ns"] == dev["span_ns"] > 0
    assert sorted(s["stream"] for s in dev["streams"]) == [7, 8]
    assert dev["kernel_ns"] == 4 * 80_000  # two kernels of 60 and 20 µs per step, none overlapping

    # the path itself gives the same analysis, without the store
    doc_path = orjson.loads(run("analyze", str(trace), "--json").stdout)
    assert doc_path["devices"] == doc["devices"] and doc_path["gaps"] == doc["gaps"]

    text = run("analyze", rid)
    assert text.exit_code == 0
    assert (
        "rank 0 · GPU 0 · NVIDIA H200" in text.stdout and "busy" in text.stdout and "stream 8" in text.stdout
    )
    assert text.stderr == ""


def test_reimport_says_already_imported(env):
    tmp, _ = env
    trace = write_trace(tmp / "a.json", kineto_trace())
    rid = run("import", str(trace)).stdout.strip()
    copy = write_trace(tmp / "copy.json", kineto_trace())
    r = run("import", str(copy))
    assert r.exit_code == 0
    assert r.stdout.strip() == rid and f"already imported as run {rid}" in r.stderr
    assert len(orjson.loads(run("runs", "--json").stdout)) == 1


def test_analyze_path_does_not_create_a_store(env):
    tmp, db = env
    trace = write_trace(tmp / "a.json.gz", kineto_trace())
    r = run("analyze", str(trace), "--json", "--gap-threshold-us", "1")
    assert r.exit_code == 0 and orjson.loads(r.stdout)["gaps"]
    assert not db.exists()


def test_gap_threshold_changes_the_gaps(env):
    tmp, _ = env
    trace = write_trace(tmp / "a.json", kineto_trace())
    small = orjson.loads(run("analyze", str(trace), "--json", "--gap-threshold-us", "1").stdout)["gaps"]
    large = orjson.loads(run("analyze", str(trace), "--json", "--gap-threshold-us", "1000").stdout)["gaps"]
    assert len(small) > len(large) == 0
    assert all(g["duration_ns"] >= 1000 for g in small)


def test_compare_two_runs(env):
    tmp, _ = env
    a = run("import", str(write_trace(tmp / "a.json", kineto_trace()))).stdout.strip()
    b = run(
        "import", str(write_trace(tmp / "b.json", kineto_trace(sync_every_step=False, stream_b=7)))
    ).stdout.strip()
    r = run("compare", a, b, "--json")
    assert r.exit_code == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert set(doc) >= {"a", "b", "comparison"} and doc["a"]["schema"] == 2
    text = run("compare", a, b)
    assert text.exit_code == 0 and text.stdout.strip()


def test_report_markdown(env):
    tmp, _ = env
    trace = write_trace(tmp / "a.json", kineto_trace())
    out = tmp / "r.md"
    r = run("report", str(trace), "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert out.read_text().strip() and r.stdout.strip() == str(out)
    bad = run("report", str(trace), "-o", str(tmp / "r.docx"))
    assert bad.exit_code == 2 and "r.docx" in bad.stderr


def test_workloads_json():
    r = run("workloads", "--json")
    assert r.exit_code == 0
    names = {w["name"] for w in orjson.loads(r.stdout)}
    assert {"overlap", "sync_pitfalls", "pdl", "graphs", "green_contexts"} <= names


def test_workloads_text_wraps_descriptions_under_the_description():
    """A wrapped workload description continues under itself, never at the variants' indent, where it
    would read as a variant with no description (issue 28)."""
    from tracelab.workloads import WORKLOADS

    r = CliRunner().invoke(main, ["workloads"], env={"COLUMNS": "100"})
    assert r.exit_code == 0
    current = None
    for line in r.stdout.splitlines():
        if not line.strip():
            continue
        name = line.split(":", 1)[0]
        if not line.startswith(" ") and name in WORKLOADS:
            current = WORKLOADS[name]
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 2:  # a variant line names a variant of the workload above
            assert line.split()[0] in {v.name for v in current.variants}, line
        else:  # a continuation: under the workload's description or under the variant's
            assert indent in (len(current.name) + 2, 23), line
    assert current is not None


def test_a_mistyped_command_is_one_line():
    r = subprocess.run([sys.executable, "-m", "tracelab", "analyz", "x.json"], capture_output=True, text=True,
                       check=False)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "error: No such command 'analyz'. Did you mean 'analyze'? (tracelab --help lists the commands)"
    ]


def test_hostile_run_name_is_defused(env):
    tmp, _ = env
    trace = write_trace(tmp / "a.json", kineto_trace())
    r = run("import", str(trace), "--name", "[bold red]x[/] \x1b[2J evil")
    assert r.exit_code == 0
    out = run("runs").stdout
    assert "\x1b" not in out and "[bold red]x[/]" in out


# ---- bad input ----------------------------------------------------------------------------------

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200)


def _bad_inputs(tmp: Path) -> dict[str, Path]:
    full = json.dumps(kineto_trace()).encode()
    no_stream = kineto_trace()
    for e in no_stream["traceEvents"]:
        if e["cat"] == "kernel":
            e["args"].pop("stream")
            e["args"].pop("device")
            e.pop("tid")
            e.pop("pid")
    (tmp / "empty_dir").mkdir()
    (tmp / "dir_without_traces").mkdir()
    (tmp / "dir_without_traces" / "notes.txt").write_text("nothing here")
    files = {
        "truncated.json": full[: len(full) // 2],
        "empty.json": b"",
        "garbage.json.gz": gzip.compress(b"\x00\x01garbage" * 50)[:-9] + b"\xff" * 9,
        "picture.json": PNG,
        "no_events.json": json.dumps({"schemaVersion": 1, "deviceProperties": []}).encode(),
        "no_stream.json": json.dumps(no_stream).encode(),
    }
    out = {}
    for name, data in files.items():
        (tmp / name).write_bytes(data)
        out[name] = tmp / name
    out["dir_without_traces"] = tmp / "dir_without_traces"
    out["empty_dir"] = tmp / "empty_dir"
    out["missing.json"] = tmp / "missing.json"
    return out


BAD = [
    "truncated.json",
    "empty.json",
    "garbage.json.gz",
    "picture.json",
    "no_events.json",
    "no_stream.json",
    "dir_without_traces",
    "empty_dir",
    "missing.json",
]


def _assert_one_line_error(result, must_name: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and must_name in lines[0]
    assert "Traceback" not in result.stderr and result.stdout == ""


@pytest.mark.parametrize("name", BAD)
def test_bad_input_import(env, name):
    tmp, db = env
    run("import", str(write_trace(tmp / "good.json", kineto_trace())))
    bad = _bad_inputs(tmp)[name]
    store_before, bytes_before = runs_table(db), sha(bad)
    r = run("import", str(bad))
    _assert_one_line_error(r, bad.name)
    assert runs_table(db) == store_before
    assert sha(bad) == bytes_before


@pytest.mark.parametrize("name", ["truncated.json", "picture.json", "no_stream.json", "empty_dir"])
def test_bad_input_analyze(env, name):
    tmp, db = env
    bad = _bad_inputs(tmp)[name]
    r = run("analyze", str(bad), "--json")
    _assert_one_line_error(r, bad.name)
    assert not db.exists()


def test_import_continues_past_a_bad_file_and_exits_2(env):
    tmp, db = env
    bad = _bad_inputs(tmp)["truncated.json"]
    good = write_trace(tmp / "good.json", kineto_trace())
    r = run("import", str(bad), str(good))
    assert r.exit_code == 2
    assert (
        len(r.stdout.split()) == 1
        and "truncated.json" in r.stderr
        and "1 of 2 paths not imported" in r.stderr
    )
    assert len(runs_table(db)) == 2  # the good run + the events count row


def test_unknown_run_id(env):
    tmp, db = env
    run("import", str(write_trace(tmp / "a.json", kineto_trace())))
    before = runs_table(db)
    for args in (
        ("analyze", "deadbeef"),
        ("compare", "deadbeef", "x"),
        ("report", "nope", "-o", str(tmp / "r.md")),
    ):
        r = run(*args)
        _assert_one_line_error(r, args[1])
        assert "no run with this id or name" in r.stderr
    assert runs_table(db) == before and not (tmp / "r.md").exists()


def test_unknown_run_without_a_store(env):
    _, db = env
    r = run("analyze", "abc123")
    _assert_one_line_error(r, "abc123")
    assert not db.exists()


def test_db_that_is_not_a_store(env):
    tmp, _ = env
    fake = tmp / "fake.db"
    fake.write_bytes(PNG)
    r = run("--db", str(fake), "import", str(write_trace(tmp / "a.json", kineto_trace())))
    _assert_one_line_error(r, "fake.db")
    assert "not a tracelab store" in r.stderr and fake.read_bytes() == PNG
    r = run("runs", "--db", str(fake))
    _assert_one_line_error(r, "fake.db")


def test_usage_errors_exit_2(env):
    assert run("analyze").exit_code == 2
    assert run("import").exit_code == 2
    assert run("analyze", "x", "--gap-threshold-us", "-5").exit_code == 2
    assert run("nonsense").exit_code == 2


def test_record_rejects_unknown_workload(env):
    r = run("record", "no_such_workload", "--backend", "torch")
    _assert_one_line_error(r, "no_such_workload")


# ---- real subprocesses --------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tracelab", *args],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )


def test_subprocess_roundtrip(env):
    tmp, db = env
    e = {**os.environ, "TRACELAB_DB": str(db), "PYTHONPATH": str(ROOT)}
    e.pop("TRACELAB_DEBUG", None)
    h = _cli("--help", env=e)
    assert h.returncode == 0 and "analyze" in h.stdout
    trace = write_trace(tmp / "t.json.gz", kineto_trace())
    imp = _cli("import", str(trace), env=e)
    assert imp.returncode == 0, imp.stderr
    rid = imp.stdout.strip()
    doc = json.loads(_cli("analyze", rid, "--json", env=e).stdout)
    assert doc["schema"] == 2 and doc["trace"]["format"] == "kineto"
    again = _cli("import", str(trace), env=e)
    assert again.returncode == 0 and again.stdout.strip() == rid and "already imported" in again.stderr


def test_subprocess_bad_input(env):
    tmp, db = env
    e = {**os.environ, "TRACELAB_DB": str(db), "PYTHONPATH": str(ROOT)}
    e.pop("TRACELAB_DEBUG", None)
    bad = _bad_inputs(tmp)
    for name in ("truncated.json", "picture.json", "garbage.json.gz"):
        p = _cli("import", str(bad[name]), env=e)
        assert p.returncode == 2
        assert len(p.stderr.strip().splitlines()) == 1 and name in p.stderr and "Traceback" not in p.stderr
    p = _cli("analyze", "nope123", env=e)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


@pytest.mark.corpus
@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not present at {CORPUS}")
def test_corpus_kineto_file_imports(env):
    files = sorted(CORPUS.rglob("*.json.gz"), key=lambda p: p.stat().st_size)
    if not files:
        pytest.skip("no Kineto file in the corpus")
    small = files[0]
    before = sha(small)
    r = run("import", str(small))
    assert r.exit_code in (0, 2)
    if r.exit_code == 0:
        doc = orjson.loads(run("analyze", r.stdout.strip(), "--json").stdout)
        assert doc["schema"] == 2
    else:
        assert len(r.stderr.strip().splitlines()) == 1
    assert sha(small) == before


def test_record_rejects_unknown_variant(env):
    r = run("record", "overlap", "--variant", "nope", "--backend", "torch")
    _assert_one_line_error(r, "nope")
    assert "streams_pinned" in r.stderr


def test_internal_errors_are_one_line_with_a_hint(monkeypatch):
    from tracelab.cli import TracelabGroup

    @click.group(cls=TracelabGroup)
    def grp() -> None:
        pass

    @grp.command()
    def boom() -> None:
        raise RuntimeError("something\nbroke")

    monkeypatch.delenv("TRACELAB_DEBUG", raising=False)
    r = CliRunner().invoke(grp, ["boom"])
    assert r.exit_code == 1
    assert r.stderr.strip() == (
        "internal error: RuntimeError: something broke (rerun with TRACELAB_DEBUG=1 for the traceback)"
    )
    monkeypatch.setenv("TRACELAB_DEBUG", "1")
    r = CliRunner().invoke(grp, ["boom"])
    assert isinstance(r.exception, RuntimeError)  # the real traceback, for the bug report


def test_corrupt_store_row_is_bad_input(env):
    tmp, db = env
    rid = run("import", str(write_trace(tmp / "a.json", kineto_trace()))).stdout.strip()
    with sqlite3.connect(db) as c:
        c.execute("UPDATE events SET data = x'00ff00ff'")  # every event chunk unreadable
    r = run("analyze", rid)
    _assert_one_line_error(r, "corrupt store")


@pytest.mark.needs_gpu_tools
def test_record_without_a_gpu_says_so(env):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = run("record", "overlap", "--variant", "serial", "--backend", "torch", "--quick", "--out", str(env[0]))
    assert r.exit_code == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "GPU" in r.stderr


def test_demo_imports_once(env):
    from tracelab import demo

    assert demo.demo_run_paths()  # the demo runs are bundled in tracelab/demo_runs
    first = run("demo", "--no-serve")
    assert first.exit_code == 0, first.stderr
    ids = first.stdout.split()
    assert len(ids) == len(demo.demo_run_paths())
    again = run("demo", "--no-serve")
    assert again.exit_code == 0 and again.stdout.split() == ids and "already in the store" in again.stderr
    listed = orjson.loads(run("runs", "--json").stdout)
    assert sorted(x["id"] for x in listed) == sorted(ids) and all(x["workload"] for x in listed)


def test_serve_answers_http(env):
    pytest.importorskip("dash")
    import socket
    import time
    import urllib.request

    tmp, db = env
    run("import", str(write_trace(tmp / "a.json", kineto_trace())))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = {**os.environ, "TRACELAB_DB": str(db), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracelab", "serve", "--port", str(port)],
        cwd=ROOT,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = ""
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as resp:
                    body = resp.read().decode()
                    break
            except OSError:
                if proc.poll() is not None:
                    break
                time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        assert "<html" in body.lower() or "_dash" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_delete(env):
    tmp, db = env
    a = run("import", str(write_trace(tmp / "a.json", kineto_trace()))).stdout.strip()
    b = run("import", str(write_trace(tmp / "b.json", kineto_trace(steps=2)))).stdout.strip()
    before = runs_table(db)
    bad = run("delete", a, "nope")
    _assert_one_line_error(bad, "nope")
    assert runs_table(db) == before  # nothing deleted when one id is wrong
    ok = run("delete", a)
    assert ok.exit_code == 0 and ok.stdout.strip() == a
    assert [x["id"] for x in orjson.loads(run("runs", "--json").stdout)] == [b]


def test_hostile_file_name_in_an_error_is_defused(env):
    tmp, _ = env
    bad = tmp / "evil\x1b[31mred\x07.json"
    bad.write_bytes(b"{not json")
    r = run("import", str(bad))
    _assert_one_line_error(r, "evil")
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr


def test_import_replace_keeps_the_id(env):
    tmp, db = env
    trace = write_trace(tmp / "a.json", kineto_trace())
    rid = run("import", str(trace)).stdout.strip()
    before = runs_table(db)
    r = run("import", "--replace", str(trace))
    assert r.exit_code == 0 and r.stdout.strip() == rid and "imported as run" in r.stderr
    after = runs_table(db)
    assert len(after) == len(before) and after[0][8] != before[0][8]  # same run, new `created`
