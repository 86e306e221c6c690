"""The dashboard's attack surface, through the real Flask/Dash app and real child processes:

- Host and Origin headers: a foreign Host (DNS rebinding) or a cross-site Origin gets 403;
- uploads: limited after decompression (a gzip / xz / bzip2 bomb is refused having inflated at most
  the limit), parsed in a child process under a time and memory budget (tracelab.sandbox), real
  traces still import, and no message shows a server path;
- stale or tampered callbacks (a deleted run, a forged window) answer with a message, never HTTP 500.
"""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import lzma
import tempfile
import time
from pathlib import Path

import pytest

from app import create_app
from app.guards import allowed_hosts, host_name, refusal
from tracelab.errors import BadInput
from tracelab.sandbox import Budget, SandboxMemory, SandboxTimeout, check_expanded_size, run_limited

ROOT = Path(__file__).resolve().parents[1]
TRACE_GZ = ROOT / "tests" / "data" / "torch_mixed_small" / "trace.json.gz"
NSYS_REP = ROOT / "tests" / "data" / "nsys_mixed_small.nsys-rep"
HELPERS = Path(__file__).resolve().parent / "sandbox_targets.py"


@pytest.fixture
def env(tmp_path):
    from test_app_callbacks import make_store

    store, a, b = make_store(tmp_path / "store.db")
    return store, a, b


def data_url(data: bytes) -> str:
    return "data:application/octet-stream;base64," + base64.b64encode(data).decode()


def gzip_bomb(expanded: int) -> bytes:
    """`expanded` bytes of JSON-legal leading whitespace, gzip'd (about 1000:1)."""
    z = gzip.compress(b" " * expanded, compresslevel=9)
    assert len(z) < expanded // 500
    return z


# ---- Host / Origin --------------------------------------------------------------------------------


def test_host_names_parse():
    assert host_name("127.0.0.1:8050") == "127.0.0.1"
    assert host_name("[::1]:8050") == "::1"
    assert host_name("LocalHost.") == "localhost"
    assert host_name("evil.example") == "evil.example"
    allowed = allowed_hosts("127.0.0.1")
    assert allowed == {"localhost", "127.0.0.1", "::1"}
    assert "box.lan" in allowed_hosts("127.0.0.1", ["box.lan:8050"])
    assert "10.1.2.3" in allowed_hosts("10.1.2.3")
    assert refusal("evil.example:8050", None, allowed) is not None
    assert refusal("127.0.0.1:8050", "http://127.0.0.1:8050", allowed) is None
    assert refusal("127.0.0.1:8050", "http://evil.example", allowed) is not None
    assert refusal("127.0.0.1:8050", "null", allowed) is not None
    assert refusal("anything", "http://x", frozenset({"*"})) is None


def test_foreign_host_and_origin_are_refused(env):
    store, a, _ = env
    client = create_app(store).server.test_client()
    assert client.get("/_dash-layout", headers={"Host": "127.0.0.1:8050"}).status_code == 200
    assert client.get(f"/timeline?run={a}", headers={"Host": "127.0.0.1:8050"}).status_code == 200
    for path in ("/", "/_dash-layout", f"/timeline?run={a}", "/_dash-dependencies"):
        bad = client.get(path, headers={"Host": "evil.example:8050"})
        assert bad.status_code == 403, path
        body = bad.get_data(as_text=True)
        assert a not in body and "--allow-host evil.example" in body
    post = client.post("/_dash-update-component", json={}, headers={"Host": "attacker.test"})
    assert post.status_code == 403
    cross = client.post(
        "/_dash-update-component",
        json={},
        headers={"Host": "127.0.0.1:8050", "Origin": "http://attacker.test"},
    )
    assert cross.status_code == 403 and "cross-site" in cross.get_data(as_text=True)
    assert client.get("/", headers={"Host": "localhost:8050"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8050"}).status_code == 200


def test_allow_host_list(env):
    store, _, _ = env
    client = create_app(store, allow_hosts=["box.lan"]).server.test_client()
    assert client.get("/", headers={"Host": "box.lan:8050"}).status_code == 200
    assert client.get("/", headers={"Host": "other.lan:8050"}).status_code == 403
    open_client = create_app(store, allow_hosts=["*"]).server.test_client()
    assert open_client.get("/", headers={"Host": "other.lan:8050"}).status_code == 200


# ---- stale / tampered callbacks -------------------------------------------------------------------


def _timeline_request(view: dict, window: object = None) -> dict:
    """The callback the canvas triggers when it moves (tl-window), as the browser posts it."""
    names = ("tl-view.data", "tl-info.children")
    return {
        "output": ".." + "...".join(names) + "..",
        "outputs": [{"id": n.split(".")[0], "property": n.split(".")[1]} for n in names],
        "inputs": [{"id": "tl-window", "property": "data", "value": window if window is not None else {"t0": 0, "t1": 5000}}],
        "changedPropIds": ["tl-window.data"],
        "state": [{"id": "tl-view", "property": "data", "value": view}],
    }


def _search_requests(view: dict, find: object) -> list[dict]:
    """The callbacks a step of the search state (tl-find) triggers: the window to go to, and the
    permalink with the match count."""
    links = ("tl-permalink.href", "tl-match.children")
    return [
        {
            "output": "tl-goto.data",
            "outputs": {"id": "tl-goto", "property": "data"},
            "inputs": [{"id": "tl-find", "property": "data", "value": find}],
            "changedPropIds": ["tl-find.data"],
            "state": [{"id": "tl-view", "property": "data", "value": view}],
        },
        {
            "output": ".." + "...".join(links) + "..",
            "outputs": [{"id": n.split(".")[0], "property": n.split(".")[1]} for n in links],
            "inputs": [
                {"id": "tl-view", "property": "data", "value": view},
                {"id": "tl-find", "property": "data", "value": find},
                {"id": "tl-show", "property": "value", "value": ["stream", "host"]},
                {"id": "tl-open", "property": "data", "value": None},  # the ranks unfolded (issue 28)
            ],
            "changedPropIds": ["tl-find.data"],
        },
    ]


def test_stale_and_tampered_timeline_callbacks_never_500(env):
    store, a, _ = env
    run = store.get_run(a)
    client = create_app(store).server.test_client()
    good = {"run": a, "t0": run.start_ns, "t1": run.end_ns, "lo": run.start_ns, "hi": run.end_ns, "origin": run.start_ns}
    r = client.post("/_dash-update-component", json=_timeline_request(good))
    assert r.status_code == 200, r.get_data(as_text=True)[:300]
    assert r.get_json()["response"]["tl-info"]["children"].startswith("window 5.0 µs at +0 ns")

    good_find = {"query": "gemm", "match": 1, "count": 39}
    goto, links = (client.post("/_dash-update-component", json=r) for r in _search_requests(good, good_find))
    assert goto.status_code == links.status_code == 200
    assert "2 / " in links.get_json()["response"]["tl-match"]["children"]
    for find in ({"query": "gemm", "match": "abc"}, {"query": ["x"], "match": 10**30}, "nonsense", None,
                 {"query": "x" * 10**5, "match": -7, "count": -1}):
        for req in _search_requests(good, find):
            r = client.post("/_dash-update-component", json=req)
            assert r.status_code in (200, 204), (find, r.get_data(as_text=True)[:300])
    for unfolded in ("<script>", ["1"], 10**30, "1,x"):  # a tampered list of ranks unfolded: a message, no 500
        req = _search_requests(good, good_find)[1]
        req["inputs"][-1]["value"] = unfolded
        r = client.post("/_dash-update-component", json=req)
        assert r.status_code == 200, (unfolded, r.get_data(as_text=True)[:300])
        assert "open must name ranks" in r.get_json()["response"]["tl-match"]["children"], unfolded

    store.delete_run(a)  # the page still shows run a: its next callback is stale
    stale = client.post("/_dash-update-component", json=_timeline_request(good))
    assert stale.status_code == 200
    info = stale.get_json()["response"]["tl-info"]["children"]
    assert repr(a) in info and "reload the page" in info

    forged = dict(good, run="ffffffff", t0=10**30, t1=-(10**30))
    r = client.post("/_dash-update-component", json=_timeline_request(forged))
    assert r.status_code in (200, 204)
    for window in ({"t0": "abc", "t1": 5}, {"t0": 10**30, "t1": 2**80}, ["x"], "nonsense"):
        r = client.post("/_dash-update-component", json=_timeline_request(dict(good, run="b"), window))
        assert r.status_code in (200, 204), window
    overflow = {"run": "b", "t0": 0, "t1": 2**80, "lo": 0, "hi": 2**80}
    r = client.post("/_dash-update-component", json=_timeline_request(overflow))
    assert r.status_code in (200, 204)

    broken = client.post("/_dash-update-component", json={"output": "tl-info.children", "inputs": "x"})
    assert broken.status_code == 400 and "stale or malformed" in broken.get_data(as_text=True)


def test_timeline_data_routes_refuse_bad_requests_with_400(env):
    """The canvas's data routes: guarded like every page (403 for a foreign Host or Origin), runs
    named from the store only, and every bad parameter a 400 with one line, never a 500."""
    store, a, _ = env
    client = create_app(store).server.test_client()
    ok = {"Host": "127.0.0.1:8050"}
    assert client.get(f"/api/timeline/meta?run={a}", headers=ok).status_code == 200
    assert client.get(f"/api/timeline/tile?run={a}&level=0&index=0", headers=ok).status_code == 200
    for path in (f"/api/timeline/meta?run={a}", f"/api/timeline/tile?run={a}&level=0&index=0"):
        assert client.get(path, headers={"Host": "evil.example:8050"}).status_code == 403
        assert client.get(path, headers={**ok, "Origin": "http://attacker.test"}).status_code == 403
    bad = [
        "/api/timeline/meta",  # no run
        "/api/timeline/meta?run=/etc/passwd",  # a path is no run
        f"/api/timeline/meta?run={TRACE_GZ}",
        f"/api/timeline/meta?run={a}&show=stream,evil",
        f"/api/timeline/meta?run={a}&t0=abc",
        f"/api/timeline/meta?run={a}&t0=5&t1=1",
        f"/api/timeline/tile?run={a}&level=99&index=0",
        f"/api/timeline/tile?run={a}&level=0&index=1",
        f"/api/timeline/tile?run={a}&level=-1&index=0",
        f"/api/timeline/tile?run={a}&level=1e300&index=0",
        f"/api/timeline/tile?run={a}&level=0",
        f"/api/timeline/matches?run={a}&q=gemm&t0=10&t1=5",
        f"/api/timeline/matches?run={a}&q=gemm&t0=0&t1={10**40}",
        f"/api/timeline/matches?run={a}&t0=0&t1=5",
        f"/api/timeline/hover?run={a}&event=999999999",
        f"/api/timeline/hover?run={a}&event=-1",
        f"/api/timeline/hover?run={a}&gap=x",
        f"/api/timeline/hover?run={a}&gap=1000",
        f"/api/timeline/hover?run={a}",
        f"/api/timeline/tile?run={'x' * 5000}&level=0&index=0",
    ]
    for path in bad:
        r = client.get(path, headers=ok)
        body = r.get_data(as_text=True)
        assert r.status_code == 400, (path, r.status_code, body[:200])
        assert body.count("\n") == 1, (path, body)
        if "run=/" in path:  # a trace file on the server is never opened: only runs of the store
            assert body.startswith("no run with id or name"), body
    store.delete_run(a)  # a page open on a deleted run
    r = client.get(f"/api/timeline/tile?run={a}&level=0&index=0", headers=ok)
    assert r.status_code == 400 and repr(a) in r.get_data(as_text=True)


# ---- uploads: size after decompression, child process, budgets --------------------------------------


def test_expanded_size_limits_every_compression(tmp_path):
    payload = b" " * (3 * 2**20)
    for name, data in (
        ("a.json.gz", gzip.compress(payload)),
        ("a.json.xz", lzma.compress(payload)),
        ("a.json.bz2", bz2.compress(payload)),
    ):
        p = tmp_path / name
        p.write_bytes(data)
        assert check_expanded_size(p, 4 * 2**20) == 3 * 2**20
        with pytest.raises(BadInput) as info:
            check_expanded_size(p, 2**20, shown=name)
        assert str(info.value).startswith(f"{name}: expands to more than 1,048,576 bytes")
    plain = tmp_path / "plain.json"
    plain.write_bytes(b"{}" * 1000)
    assert check_expanded_size(plain, 2000) == 2000
    with pytest.raises(BadInput):
        check_expanded_size(plain, 1999)


def test_sandbox_budgets(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{HELPERS.parent}")
    assert run_limited("sandbox_targets:add", {"a": 2, "b": 3}, Budget(60, 2**31)) == 5
    t0 = time.monotonic()
    with pytest.raises(SandboxTimeout):
        run_limited("sandbox_targets:spin", {}, Budget(2, 2**31))
    assert time.monotonic() - t0 < 10  # stopped at the 2 s budget, not left running
    with pytest.raises(SandboxMemory):
        run_limited("sandbox_targets:hog", {}, Budget(60, 2**30))
    with pytest.raises(BadInput) as info:
        run_limited("sandbox_targets:bad", {"path": "x.json"}, Budget(60, 2**31))
    assert str(info.value) == "x.json: not a trace"


def test_gzip_bomb_upload_is_refused_after_the_limit(env, tmp_path):
    from app.pages import runs
    from app.state import AppState

    store, _, _ = env
    state = AppState(store=store, import_dir=None, max_upload_bytes=2**20, max_expanded_bytes=8 * 2**20)
    before = [r.id for r in store.runs()]
    bomb = gzip_bomb(256 * 2**20)  # 256 MiB of whitespace in ~250 KB: under the upload limit
    assert len(bomb) < state.max_upload_bytes
    t0 = time.monotonic()
    ok, msg, rid = runs.import_upload(state, data_url(bomb), "bomb.json.gz")
    took = time.monotonic() - t0
    assert not ok and rid is None
    assert msg.startswith("bomb.json.gz: expands to more than 8,388,608 bytes")
    assert tempfile.gettempdir() not in msg
    assert took < 30  # it inflated 8 MiB, not 256 MiB (measured ~1.5 s, mostly the child's start)
    assert [r.id for r in store.runs()] == before


def test_real_upload_imports_in_the_child(env, tmp_path):
    from app.pages import runs
    from app.state import AppState
    from tracelab.io import load_trace

    store, _, _ = env
    state = AppState(store=store, import_dir=None, max_upload_bytes=2**20)
    ok, msg, rid = runs.import_upload(state, data_url(TRACE_GZ.read_bytes()), "trace.json.gz")
    assert ok, msg
    expected = len(load_trace(TRACE_GZ).events)  # parsed here, in this process, without the store
    assert msg == f"imported trace.json.gz as run {rid} ({expected:,} events)"
    record = store.get_run(rid)
    assert record.events == expected and record.source == "upload:trace.json.gz"
    again = runs.import_upload(state, data_url(TRACE_GZ.read_bytes()), "copy.json.gz")
    assert again == (False, f"copy.json.gz: already imported as run {rid}", rid)


def test_upload_over_its_time_budget_is_stopped(env):
    from app.pages import runs
    from app.state import AppState

    store, _, _ = env
    state = AppState(
        # 0.05 s: less than the child's own start (python and numpy) takes, whatever the machine
        store=store, max_upload_bytes=2**20, upload_budget=Budget(seconds=0.05, memory_bytes=2**32)
    )
    ok, msg, rid = runs.import_upload(state, data_url(TRACE_GZ.read_bytes()), "slow.json.gz")
    assert not ok and rid is None
    assert msg == "slow.json.gz: refused: took longer than its budget of 0.05 s and was stopped"
    assert len(store.runs()) == 2


def test_upload_messages_hold_no_server_paths(env, tmp_path):
    from app.pages import runs
    from app.state import AppState

    store, _, _ = env
    imports = tmp_path / "imports"
    for import_dir in (None, imports):
        state = AppState(store=store, import_dir=import_dir, max_upload_bytes=8 * 2**20)
        for name, data in (
            ("report.nsys-rep", NSYS_REP.read_bytes()),
            ("broken.json", b'{"traceEvents": [ {"ph": "X", '),
            ("empty.sqlite", b"SQLite format 3\x00" + b"\x00" * 100),
        ):
            ok, msg, _ = runs.import_upload(state, data_url(data), name)
            assert "\n" not in msg and name in msg, msg
            assert tempfile.gettempdir() not in msg and str(tmp_path) not in msg, msg
            if not ok:
                assert "upload-" not in msg


def test_upload_through_the_server_is_refused_when_foreign(env):
    store, _, _ = env
    client = create_app(store, max_upload_bytes=2**20).server.test_client()
    body = {
        "output": "..upload-message.children...runs-list.children..",
        "outputs": [
            {"id": "upload-message", "property": "children"},
            {"id": "runs-list", "property": "children"},
        ],
        "inputs": [{"id": "upload", "property": "contents", "value": data_url(TRACE_GZ.read_bytes())}],
        "changedPropIds": ["upload.contents"],
        "state": [{"id": "upload", "property": "filename", "value": "t.json.gz"}],
    }
    refused = client.post("/_dash-update-component", json=body, headers={"Host": "rebound.example:8050"})
    assert refused.status_code == 403 and len(store.runs()) == 2
    accepted = client.post("/_dash-update-component", json=body, headers={"Host": "127.0.0.1:8050"})
    assert accepted.status_code == 200
    assert "imported t.json.gz as run" in json.dumps(accepted.get_json())
    assert len(store.runs()) == 3


def test_one_upload_child_at_a_time(env):
    from app.pages import runs
    from app.state import AppState

    store, _, _ = env
    state = AppState(store=store, max_upload_bytes=2**20)
    assert state.upload_slot.acquire(blocking=False)  # an upload is being imported
    try:
        ok, msg, rid = runs.import_upload(state, data_url(TRACE_GZ.read_bytes()), "second.json.gz")
    finally:
        state.upload_slot.release()
    assert (ok, rid) == (False, None)
    assert msg == "second.json.gz: another upload is being imported; try again when it is done"
    ok, msg, rid = runs.import_upload(state, data_url(TRACE_GZ.read_bytes()), "second.json.gz")
    assert ok and rid is not None, msg
