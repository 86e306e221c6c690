"""Issue 30, class 6: time proportional to the input's size. 100k kernels with distinct 10 KB names took
99.7 s (the communication-name regex); a rank directory beside a 40 GB sparse checkpoint took 93 s (the
content hash read every file); an 8.4 MB `.sqlite.gz` wrote 8 GiB into the temp directory. Each case
must finish within 10 s + 4 s per MB of input, with exit 0 (right numbers) or one line naming the file."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest
from hostile_util import DATA, cli, nsys_copy

ROOT = Path(__file__).resolve().parents[1]
TORCH = DATA / "torch_mixed_small" / "trace.json.gz"
# the regex tracelab used before issue 30: the substring test must find exactly the same names
OLD_COMM = re.compile(
    r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|alltoall|all_to_all|sendrecv|c10d", re.IGNORECASE
)


def _budget(nbytes: int) -> float:
    return 10 + 4 * nbytes / 1e6


def _long_name_trace(path: Path, n: int, length: int) -> int:
    """The bundled Kineto trace's host side plus n kernels, each with a distinct `length`-char name (a
    real templated kernel name repeated, then cut) and its own cudaLaunchKernel. Every 1000th kernel is
    an NCCL kernel. Returns how many kernels are communication kernels (by construction)."""
    doc = json.loads(gzip.decompress(TORCH.read_bytes()))
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") not in ("kernel", "cuda_runtime", "ac2g")]
    real = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<at::native::BinaryFunctor<float> > >"
    pad = (real * (length // len(real) + 2))[: length - 9]
    head = json.dumps(doc).encode()
    cut = head.rindex(b"]")
    comm = 0
    with gzip.open(path, "wb", compresslevel=6) as out:
        out.write(head[:cut])
        for i in range(n):
            name = (f"ncclK{i:07d}" if i % 1000 == 0 else f"k{i:07d}_") + pad
            comm += i % 1000 == 0
            t = 1_000_000 + 10 * i
            out.write(
                b',{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,'
                + f'"ts":{t},"dur":2,"args":{{"correlation":{i + 1}}}}}'.encode()
                + b',{"ph":"X","cat":"kernel","name":"'
                + name.encode()
                + f'","pid":0,"tid":7,"ts":{t + 5},"dur":3,"args":{{"device":0,"stream":7,"correlation":{i + 1}}}}}'.encode()
            )
        out.write(head[cut:])
    return comm


def test_many_distinct_long_kernel_names_take_time_proportional_to_size(tmp_path):
    p = tmp_path / "names.json.gz"
    n = 20_000
    comm = _long_name_trace(p, n, 10_000)
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", "analyze", str(p), "--json")
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.stderr
    assert took < _budget(p.stat().st_size), (took, p.stat().st_size)
    doc = json.loads(res.stdout)
    (dev,) = doc["devices"]
    assert dev["kernels"] == n if "kernels" in dev else True
    # the communication kernels found are exactly those the old regex found (names start with them)
    from tracelab.io import load_trace

    tl = load_trace(p)
    kern = tl.events[tl.events["kind"] == 0]
    assert len(kern) == n
    assert int(((kern["flags"].to_numpy() & 1) != 0).sum()) == comm == n // 1000


def _real_kernel_names() -> list[str]:
    from tracelab.demo import demo_run_paths
    from tracelab.io import load_trace

    names: set[str] = set()
    for p in demo_run_paths():
        tl = load_trace(p)
        names.update(tl.strings)
    for p in (DATA / "ddp" / "rank0.json.gz", TORCH):
        names.update(load_trace(p).strings)
    return sorted(names)


def test_comm_name_test_finds_what_the_regex_found_on_real_names():
    from tracelab.model.api_names import COMM_NAME_CHARS, is_comm_name

    names = _real_kernel_names()
    assert len(names) > 500
    hostile = ["ſendrecv", "ALL_REDUCE", "ncclDevKernel_AllGather_RING_LL", "c10D::x", "All_To_All", "xRCCLx"]
    for name in names + hostile:
        if len(name) <= COMM_NAME_CHARS:
            assert is_comm_name(name) == bool(OLD_COMM.search(name)), name


def test_rank_directory_beside_a_huge_checkpoint_is_hashed_by_its_traces_only(tmp_path):
    d = tmp_path / "run"
    (d / "ckpt").mkdir(parents=True)
    for r in (0, 1):
        shutil.copyfile(DATA / "ddp" / f"rank{r}.json.gz", d / f"rank{r}.json.gz")
    with open(d / "ckpt" / "model.bin", "wb") as f:  # 40 GB, sparse: no disk, but 40 GB to read
        f.truncate(40 * 10**9)
    (d / "train.log").write_text("step 1\n" * 1000)
    traces = sum((d / f"rank{r}.json.gz").stat().st_size for r in (0, 1))
    t0 = time.monotonic()
    res = cli(tmp_path / "s.db", "import", str(d))
    took = time.monotonic() - t0
    assert res.exit_code == 0, res.stderr
    assert took < _budget(traces), took
    from tracelab.io.detect import trace_fingerprint

    expected = hashlib.sha256(
        "\n".join(sorted(hashlib.sha256((d / f"rank{r}.json.gz").read_bytes()).hexdigest() for r in (0, 1))).encode()
    ).hexdigest()
    assert trace_fingerprint(d) == expected  # the traces' hashes only


def test_sqlite_gz_bomb_stops_at_its_ratio_and_leaves_no_temp_file(tmp_path):
    src = nsys_copy(tmp_path / "base.sqlite")
    bomb = tmp_path / "in" / "bomb.sqlite.gz"
    bomb.parent.mkdir()
    c = zlib.compressobj(6, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    with open(bomb, "wb") as f:  # a real export followed by 300 MiB of zeros: ~0.7 MB on disk
        f.write(c.compress(src.read_bytes()))
        f.writelines(c.compress(zeros) for _ in range(300))
        f.write(c.flush())
    size = bomb.stat().st_size
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "tracelab", "--db", str(tmp_path / "s.db"), "analyze", str(bomb)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )
    took = time.monotonic() - t0
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "bomb.sqlite.gz" in lines[0] and "64x" in lines[0]
    assert took < _budget(size), took
    assert list(temp.iterdir()) == []  # the partial private copy is gone
    assert sorted(p.name for p in bomb.parent.iterdir()) == ["bomb.sqlite.gz"]


def test_sqlite_gz_of_a_real_export_still_reads(tmp_path):
    src = nsys_copy(tmp_path / "base.sqlite")
    gz = tmp_path / "t.sqlite.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    res = cli(tmp_path / "s.db", "analyze", str(gz), "--json")
    assert res.exit_code == 0, res.stderr
    import sqlite3

    conn = sqlite3.connect(src)
    n = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    conn.close()
    from tracelab.io import load_trace

    assert int((load_trace(gz).events["kind"] == 0).sum()) == n


@pytest.mark.parametrize("frames", [1, 3])
def test_zstd_with_leading_skippable_frames_is_read(tmp_path, frames):
    import struct

    import zstandard

    raw = gzip.decompress(TORCH.read_bytes())
    skip = b"".join(struct.pack("<II", 0x184D2A50 + i, 8) + b"tracelab" for i in range(frames))
    p = tmp_path / "t.json.zst"
    p.write_bytes(skip + zstandard.ZstdCompressor().compress(raw))
    kernels = sum(1 for e in json.loads(raw)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel")
    res = cli(tmp_path / "s.db", "import", str(p))
    assert res.exit_code == 0, res.stderr
    from tracelab.io import load_trace

    assert int((load_trace(p).events["kind"] == 0).sum()) == kernels


@pytest.mark.parametrize("command", ["analyze", "import", "report", "export"])
def test_empty_argument_names_nothing(tmp_path, command, monkeypatch):
    run = tmp_path / "cwd"
    run.mkdir()
    shutil.copyfile(TORCH, run / "trace.json.gz")  # the current directory holds a trace: it was read
    monkeypatch.chdir(run)
    extra = ["-o", str(tmp_path / ("r.json"))] if command in ("report", "export") else []
    res = cli(tmp_path / "s.db", command, "", *extra)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.exit_code == 2 and len(lines) == 1 and "empty argument" in lines[0], res.stderr
    assert not (tmp_path / "r.json").exists()


def test_compare_of_unrelated_runs_says_so(tmp_path):
    """A Kineto run of one workload on an H100 against an nsys run of another on an H200: the verdict
    carries its caveats (the GPUs and workloads come from the runs' own meta.json)."""
    import tarfile

    runs = ROOT / "tracelab" / "demo_runs"
    dirs = []
    for name in ("fusion-cuda-torch", "overlap-serial-nsys"):
        with tarfile.open(runs / f"{name}.tar.xz") as t:
            t.extractall(tmp_path / name, filter="data")
        (d,) = [p for p in (tmp_path / name).iterdir() if p.is_dir()]
        dirs.append(d)
    metas = [json.loads((d / "meta.json").read_text()) for d in dirs]
    assert metas[0]["workload"] != metas[1]["workload"]
    res = cli(tmp_path / "s.db", "compare", str(dirs[0]), str(dirs[1]), "--json")
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    caveats = doc["comparison"]["verdict"]["caveats"]
    assert any(metas[0]["workload"] in c and metas[1]["workload"] in c for c in caveats), caveats
    gpus = {m.get("gpu", {}).get("name") for m in metas}
    if len(gpus) == 2:
        assert any("different GPUs" in c for c in caveats)
    assert any(n.startswith("caution:") for n in doc["comparison"]["notes"])
    # and a run compared with another variant of its own workload gets none
    same = cli(tmp_path / "s.db", "compare", str(dirs[0]), str(dirs[0]), "--json")
    assert json.loads(same.stdout)["comparison"]["verdict"]["caveats"] == []
