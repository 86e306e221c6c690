"""The allocator that reuses the pages of freed big numpy arrays (tracelab/_pages.c, tracelab/memory.py).

Each check runs in a child process: the allocator is installed per thread for the rest of a process's
life, and the test process should keep numpy's default."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("tracelab._pages", reason="the optional C allocator was not built (no C compiler)")

MIB = 1 << 20


def child(code: str, env: dict[str, str] | None = None) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON object as its last line."""
    prelude = "import json, threading\nimport numpy as np\nfrom tracelab import memory\n"
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_freed_pages_serve_the_next_big_array_with_its_values_intact():
    out = child(
        """
        assert memory.install()
        name = np._core.multiarray.get_handler_name() if hasattr(np, "_core") else np.core.multiarray.get_handler_name()
        a = np.arange(4_000_000, dtype=np.int64)      # 32 MB: a new mapping
        a[:] = 7
        del a
        before = memory.stats()
        b = np.arange(4_000_000, dtype=np.int64)      # the same pages again
        after = memory.stats()
        ok_b = bool((b == np.arange(4_000_000)).all())
        del b
        z = np.zeros(3_000_000)                        # calloc on pages that held 7s: zeroed
        ok_z = not z.any()
        small = np.ones(1000)                          # numpy's own allocator
        print(json.dumps({"name": name, "before": before, "after": after, "ok_b": ok_b, "ok_z": ok_z,
                          "final": memory.stats(), "small": float(small.sum())}))
        """
    )
    assert out["name"] == "tracelab_reused_pages"
    assert out["ok_b"] and out["ok_z"] and out["small"] == 1000.0
    assert out["before"]["fresh"] >= 1 and out["before"]["cached_bytes"] >= 32_000_000
    assert out["after"]["reused"] == out["before"]["reused"] + 1
    assert out["after"]["fresh"] == out["before"]["fresh"]  # nothing newly mapped for b
    assert out["final"]["reused"] > out["after"]["reused"]  # z too


def test_split_blocks_coalesce_and_small_blocks_grow():
    out = child(
        f"""
        memory.install()
        a = np.empty(32 * {MIB}, np.uint8); a[:] = 1; del a         # one cached block of 32 MiB
        s0 = memory.stats()
        p = np.empty(8 * {MIB}, np.uint8); q = np.empty(8 * {MIB}, np.uint8)  # two pieces of it
        p[:] = 2; q[:] = 3
        s1 = memory.stats()
        ok_pq = bool((p == 2).all() and (q == 3).all())
        del p, q
        s2 = memory.stats()                                            # back together
        big = np.empty(48 * {MIB}, np.uint8); big[:] = 5               # more than cached: grown
        s3 = memory.stats()
        ok_big = bool((big == 5).all())
        r = np.arange(2 * {MIB}, dtype=np.int64)
        r.resize(6 * {MIB}, refcheck=False)                            # realloc: mremap keeps the data
        ok_grow = bool((r[: 2 * {MIB}] == np.arange(2 * {MIB})).all())
        r.resize(1000, refcheck=False)
        ok_shrink = bool((r == np.arange(1000)).all())
        print(json.dumps({{"s0": s0, "s1": s1, "s2": s2, "s3": s3, "ok": [ok_pq, ok_big, ok_grow, ok_shrink]}}))
        """
    )
    assert all(out["ok"])
    s0, s1, s2, s3 = out["s0"], out["s1"], out["s2"], out["s3"]
    assert s0["cached_blocks"] == 1 and s0["cached_bytes"] == 32 * MIB
    assert s1["reused"] == s0["reused"] + 2 and s1["fresh"] == s0["fresh"] and s1["cached_bytes"] == 16 * MIB
    assert s2["cached_blocks"] == 1 and s2["cached_bytes"] == 32 * MIB
    assert s3["grown"] == s2["grown"] + 1 and s3["grown_bytes"] - s2["grown_bytes"] == 16 * MIB
    assert s3["fresh"] == s2["fresh"]


def test_limit_release_and_arrays_from_before():
    out = child(
        f"""
        old = np.ones(3 * {MIB})                    # numpy's default allocator
        memory.install()
        keep = [np.full({MIB} * 2, i, np.int64) for i in range(6)]   # 6 x 16 MiB
        del keep                                   # 96 MiB freed, the cache keeps 40
        s = memory.stats()
        old_sum = float(old.sum()); del old        # freed by the allocator that made it
        released = memory.release()
        print(json.dumps({{"s": s, "released": released, "after": memory.stats(), "old_sum": old_sum}}))
        """,
        env={"TRACELAB_REUSE_PAGES_MB": "40"},
    )
    s = out["s"]
    assert s["limit"] == 40 * MIB
    assert s["cached_bytes"] <= 40 * MIB and s["unmapped_bytes"] >= 56 * MIB
    assert out["released"] == s["cached_bytes"] and out["after"]["cached_bytes"] == 0
    assert out["old_sum"] == 3 * MIB


def test_threads_take_it_over_only_through_inherit():
    out = child(
        """
        from concurrent.futures import ThreadPoolExecutor
        from tracelab.analyses.parallel import run_each
        get = np._core.multiarray.get_handler_name if hasattr(np, "_core") else np.core.multiarray.get_handler_name
        memory.install()
        seen = {}
        def plain(): seen["plain"] = get()
        def wrapped(): seen["inherit"] = get()
        for name, fn in (("plain", plain), ("inherit", memory.inherit(wrapped))):
            t = threading.Thread(target=fn); t.start(); t.join()
        with ThreadPoolExecutor(2, initializer=memory.pool_initializer()) as pool:
            seen["pool"] = pool.submit(get).result()
        seen["run_each"] = sorted(set(run_each([get] * 8, threads=3)))
        memory.uninstall()
        seen["after_uninstall"] = get()
        print(json.dumps(seen))
        """
    )
    assert out["plain"] == "default_allocator"
    assert out["inherit"] == out["pool"] == "tracelab_reused_pages"
    assert out["run_each"] == ["tracelab_reused_pages"]
    assert out["after_uninstall"] == "default_allocator"


STRESS = """
        import os
        memory.install()
        errors = []
        def worker(seed):
            rng = np.random.default_rng(seed)
            live = []
            for i in range(750):
                n = int(rng.integers(128, 3 << 20))
                if rng.random() < 0.5:
                    a = np.full(n, seed * 1000 + i, np.int64)
                else:
                    a = np.zeros(n, np.int64)
                    a += seed * 1000 + i
                if rng.random() < 0.1:
                    a.resize(int(rng.integers(128, 3 << 20)), refcheck=False)
                    m = min(n, len(a))
                    a = a[:m].copy()
                live.append((a, seed * 1000 + i))
                if len(live) > 12 or rng.random() < 0.3:
                    b, v = live.pop(int(rng.integers(len(live))))
                    if not (b == v).all():
                        errors.append((seed, v))
            for b, v in live:
                if not (b == v).all():
                    errors.append((seed, v))
        threads = [threading.Thread(target=memory.inherit(worker), args=(s,)) for s in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        pid = os.fork()
        if pid == 0:
            x = np.arange(5_000_000); ok = int(x[-1]) == 4_999_999; del x
            os._exit(0 if ok else 3)
        _, status = os.waitpid(pid, 0)
        s = memory.stats()
        print(json.dumps({"errors": errors, "child": os.waitstatus_to_exitcode(status), "s": s}))
        """


def test_many_threads_allocating_and_freeing_keep_every_value():
    """4 threads, 3,000 arrays of random sizes (1 KiB to 24 MiB, so both allocators), each filled with
    its own value and checked before it is freed, some grown or shrunk in place; then a fork."""
    out = child(STRESS)
    assert out["errors"] == []
    assert out["child"] == 0
    s = out["s"]
    assert s["reused"] > 100 and s["live_blocks"] == 0 and s["live_bytes"] == 0


def test_switched_off_by_the_environment():
    out = child(
        "print(json.dumps({'on': memory.install(), 'stats': memory.stats()}))",
        env={"TRACELAB_REUSE_PAGES": "0"},
    )
    assert out == {"on": False, "stats": {}}


def test_allocator_under_address_and_undefined_sanitizers(tmp_path):
    """The same stress, and the nsys b-tree reader filling its columns through the capsule API, with
    _pages.c built with ASan + UBSan (its tables, splits and coalescing: any overflow halts the child)."""
    import sanitized

    so = tmp_path / "_pages.so"
    env = sanitized.build(Path(__file__).resolve().parents[1] / "tracelab" / "_pages.c", so, "-Wall")
    prelude = textwrap.dedent(
        """
        import importlib.util, json, sys, threading
        spec = importlib.util.spec_from_file_location("tracelab._pages", sys.argv[1])
        mod = importlib.util.module_from_spec(spec)
        sys.modules["tracelab._pages"] = mod
        spec.loader.exec_module(mod)
        import numpy as np
        from tracelab import memory
        """
    )
    btree = textwrap.dedent(
        """
        import sqlite3, time
        from tracelab.parsers import _sqlite_btree as bt
        from tracelab.parsers.nsys_btree import page_plan, read_pages
        db = sys.argv[2]
        con = sqlite3.connect(db)
        con.execute("CREATE TABLE t (a INTEGER, b INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?)", [(i, -i) for i in range(300_000)])
        con.commit()
        plan = page_plan(con, db, "t", ['"a"', '"b"'], None)
        before = memory.stats()["reused"] + memory.stats()["fresh"]
        for _ in range(3):
            n, cols = read_pages(plan, 1, 300_000, time.monotonic() + 60, 300_000)
            assert n == 300_000 and (cols[0] == np.arange(300_000)).all() and (cols[1] == -cols[0]).all()
            del cols
        assert memory.stats()["reused"] + memory.stats()["fresh"] > before  # its blocks came from the cache
        print(json.dumps({"btree": "ok"}))
        """
    )
    res = sanitized.run_clean(prelude + textwrap.dedent(STRESS), [str(so)], env)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["errors"] == [] and out["child"] == 0
    if importlib.util.find_spec("tracelab.parsers._sqlite_btree") is not None:
        res = sanitized.run_clean(prelude + "memory.install()\n" + btree, [str(so), str(tmp_path / "t.sqlite")], env)
        assert json.loads(res.stdout.strip().splitlines()[-1]) == {"btree": "ok"}
