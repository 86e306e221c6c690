"""The dashboard under attack, served for real (threaded werkzeug on 127.0.0.1) and driven by a real
headless Chromium:

- a decompression bomb (256 MiB of whitespace in ~250 KB of gzip) uploaded through the page is
  refused with one line, and afterwards the server process is idle (its CPU time is measured over a
  few seconds) and no parsing child is left running;
- a request with a foreign Host header (DNS rebinding) is refused with 403 (a plain HTTP request
  against the same served app), while the real address is served.
"""

from __future__ import annotations

import gzip
import http.client
import logging
import threading
import time

import psutil
import pytest
from test_pages import HAVE_BROWSER, css, open_page, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.skipif(not HAVE_BROWSER, reason="chromium not installed")]

EXPANDED_LIMIT = 16 * 2**20
BOMB_EXPANDED = 256 * 2**20


@pytest.fixture(scope="module")
def guarded_server(tmp_path_factory):
    from test_app_callbacks import make_store
    from werkzeug.serving import make_server

    from app import create_app
    from tracelab.sandbox import Budget

    root = tmp_path_factory.mktemp("security")
    store, a, _b = make_store(root / "store.db")
    app = create_app(
        store,
        import_dir=None,
        max_upload_bytes=8 * 2**20,
        max_expanded_bytes=EXPANDED_LIMIT,
        upload_budget=Budget(seconds=60, memory_bytes=4 * 2**30),
    )
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    srv = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield {"url": f"http://127.0.0.1:{srv.server_port}", "port": srv.server_port, "store": store, "a": a}
    srv.shutdown()


def _sandbox_children() -> list[psutil.Process]:
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "tracelab.sandbox" in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def test_decompression_bomb_upload_is_refused_and_server_goes_idle(browser, guarded_server, tmp_path):
    bomb = tmp_path / "bomb.json.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        block = b" " * 2**20
        for _ in range(BOMB_EXPANDED // len(block)):
            f.write(block)
    assert bomb.stat().st_size < 400_000  # well under the 8 MiB upload limit: only the expansion tells
    runs_before = [r.id for r in guarded_server["store"].runs()]

    open_page(browser, guarded_server, "/", "#upload-zone input[type=file]")
    t0 = time.monotonic()
    css(browser, "#upload-zone input[type=file]")[0].send_keys(str(bomb))
    wait_for(browser, lambda: css(browser, "#upload-result.upload-error"), what="the refusal")
    answered = time.monotonic() - t0
    text = css(browser, "#upload-result")[0].text
    assert text.startswith(f"bomb.json.gz: expands to more than {EXPANDED_LIMIT:,} bytes"), text
    assert "/tmp" not in text
    assert answered < 30, answered  # refused at the limit (measured ~2 s), not after inflating 256 MiB

    # after the refusal nothing keeps working on it: no child, and the server process is idle
    wait_for(browser, lambda: not _sandbox_children(), timeout=10, what="the parsing child to end")
    me = psutil.Process()
    cpu0, wall0 = sum(me.cpu_times()[:2]), time.monotonic()
    time.sleep(3.0)
    busy = (sum(me.cpu_times()[:2]) - cpu0) / (time.monotonic() - wall0)
    print(f"bomb refused in {answered:.2f} s; server process CPU after it: {busy:.1%} of a core")
    assert busy < 0.25, f"server process used {busy:.0%} of a core after the refusal"
    assert [r.id for r in guarded_server["store"].runs()] == runs_before

    # and it still answers at once
    t1 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", guarded_server["port"], timeout=10)
    conn.request("GET", "/_dash-layout")
    assert conn.getresponse().status == 200
    assert time.monotonic() - t1 < 2


def test_foreign_host_header_is_refused(guarded_server):
    port = guarded_server["port"]
    for host, expected in (
        ("evil.example", 403),
        (f"attacker.test:{port}", 403),
        (f"127.0.0.1:{port}", 200),
        (f"localhost:{port}", 200),
    ):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.putrequest("GET", "/_dash-layout", skip_host=True)
        conn.putheader("Host", host)
        conn.endheaders()
        resp = conn.getresponse()
        body = resp.read().decode()
        assert resp.status == expected, (host, resp.status, body[:200])
        if expected == 403:
            assert "does not answer to the host name" in body and "props" not in body  # no layout
        conn.close()


def test_cross_site_upload_is_refused(guarded_server):
    port = guarded_server["port"]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(
        "POST",
        "/_dash-update-component",
        body=b"{}",
        headers={"Content-Type": "application/json", "Origin": "http://attacker.test"},
    )
    resp = conn.getresponse()
    assert resp.status == 403 and "cross-site" in resp.read().decode()
