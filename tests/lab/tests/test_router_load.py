"""tests/lab/router_load.py, the load generator of the router proof, against a local fake server.

The fake server answers each request the way its ``X-Request-Id`` asks (a complete stream, a stream cut
after some events, a reset, a 503, an error event, a stream without [DONE] or without its finish reason),
so every classification is driven by bytes the test chose, never by timing. The workers watch and the
removal-window check run on answers the test switches by an event.
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

LAB_DIR = Path(__file__).resolve().parents[1]
if str(LAB_DIR) not in sys.path:
    sys.path.insert(0, str(LAB_DIR))

import ready  # noqa: E402
import router_load  # noqa: E402

KEY = "test-router-key-3f1a"


def _chat_event(delta, finish=None):
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _generate_event(tokens, finish=None):
    return {"text": "w" * tokens, "meta_info": {"completion_tokens": tokens, "finish_reason": finish}}


class FakeRouter(http.server.BaseHTTPRequestHandler):
    """Streams as SGLang (through the router) does; the X-Request-Id picks the fault."""

    protocol_version = "HTTP/1.1"
    workers = []  # what GET /workers lists (the test swaps it)
    served = {}  # how many GET /workers answered each list
    seen = []

    def log_message(self, *args):
        pass

    def _json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunk(self, text):
        data = text.encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def do_GET(self):  # noqa: N802
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self._json(401, {"error": "unauthorized"})
            return
        if self.path == "/workers":
            FakeRouter.served[tuple(self.workers)] = FakeRouter.served.get(tuple(self.workers), 0) + 1
            self._json(200, {"workers": [{"id": str(i), "url": u, "is_healthy": True} for i, u in enumerate(self.workers)]})
            return
        self._json(404, {})

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        rid = self.headers.get("X-Request-Id", "")
        FakeRouter.seen.append({"path": self.path, "body": body, "rid": rid, "auth": self.headers.get("Authorization")})
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self._json(401, {"error": "unauthorized"})
            return
        if "http503" in rid:
            self._json(503, {"error": "no healthy worker"})
            return
        chat = self.path == "/v1/chat/completions"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("x-request-id", rid)
        self.end_headers()
        for n in range(1, 4):
            self._chunk("data: %s\n\n" % json.dumps(_chat_event({"content": "w"}) if chat else _generate_event(n)))
        if "reset" in rid:  # the worker died mid-stream: the router aborts the chunked body
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.connection.close()
            self.close_connection = True
            return
        if "cut" in rid:  # the body ends (terminal chunk) without the end of the stream
            self.wfile.write(b"0\r\n\r\n")
            return
        if "errevent" in rid:
            self._chunk("data: %s\n\n" % json.dumps({"error": {"message": "scheduler died"}}))
        elif "nofinish" in rid:
            self._chunk("data: %s\n\n" % json.dumps(_chat_event({"content": "w"}) if chat else _generate_event(4)))
        else:
            finish = {"type": "length", "length": 4}
            self._chunk("data: %s\n\n" % json.dumps(_chat_event({}, "length") if chat else _generate_event(4, finish)))
        if "nodone" not in rid:
            self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")


class QuietServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the resets the tests make on purpose


@pytest.fixture()
def fake():
    server = QuietServer(("127.0.0.1", 0), FakeRouter)
    FakeRouter.workers = []
    FakeRouter.served = {}
    FakeRouter.seen = []
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("api", router_load.APIS)
@pytest.mark.parametrize("rid, outcome, error", [
    ("r-ok", "ok", None),
    ("r-reset", "truncated", "stream broke after 3 events"),
    ("r-cut", "truncated", "without data: [DONE]"),
    ("r-nodone", "truncated", "without data: [DONE]"),
    ("r-nofinish", "truncated", "without its finish_reason"),
    ("r-errevent", "failed", "error event"),
    ("r-http503", "failed", "HTTP 503"),
])
def test_classification(fake, api, rid, outcome, error):
    rec = router_load.one_request(router_load.Target(fake), api, 4, rid, KEY, timeout=10)
    assert rec["outcome"] == outcome, rec
    if error:
        assert error in rec["error"], rec
    else:
        assert rec["error"] is None and rec["done"] and rec["finish_reason"] == "length"
    if outcome != "failed" or "http" in rid or "errevent" in rid:
        assert rec["status"] in (200, 503)
    if rec["status"] == 200:
        assert rec["x_request_id"] == rid  # the router's echo of the id sent
    assert rec["start"] <= rec["end"]
    sent = FakeRouter.seen[-1]
    assert sent["rid"] == rid and sent["auth"] == "Bearer " + KEY
    assert sent["path"] == ("/v1/chat/completions" if api == "chat" else "/generate")
    assert sent["body"]["stream"] is True


def test_connection_refused_is_failed():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    rec = router_load.one_request(router_load.Target("http://127.0.0.1:%d" % port), "chat", 4, "r-x", KEY, timeout=5)
    assert rec["outcome"] == "failed" and rec["status"] is None
    assert rec["error"].startswith("connection error")


def test_wrong_key_is_failed_and_never_echoed(fake):
    rec = router_load.one_request(router_load.Target(fake), "generate", 4, "r-ok", "not-the-key", timeout=5)
    assert rec["outcome"] == "failed" and rec["status"] == 401
    assert "not-the-key" not in json.dumps(rec)


def test_summary_counts_and_percentiles():
    def rec(api, outcome, latency):
        return {"api": api, "outcome": outcome, "start": 100.0, "end": 100.0 + latency, "error": None if outcome == "ok" else outcome}
    records = [rec("chat", "ok", n) for n in range(1, 101)] + [rec("generate", "truncated", 1), rec("generate", "failed", 1)]
    out = router_load.summarize(records)
    assert (out["sent"], out["ok"], out["failed"], out["truncated"], out["failures"]) == (102, 100, 1, 1, 2)
    assert out["latency_p50"] == 50 and out["latency_p99"] == 99
    assert out["by_api"]["generate"] == {"sent": 2, "ok": 0, "failed": 1, "truncated": 1, "failures": 2,
                                         "latency_p50": None, "latency_p99": None}
    assert {e["error"] for e in out["errors"]} == {"truncated", "failed"}


def _run(workers, t0, t1):
    return {"workers": {u: True for u in workers}, "first": [t0, t0 + 0.1], "last": [t1, t1 + 0.1], "polls": 2}


def test_removal_windows_and_sent_after_removal():
    a, b = "http://a:1", "http://b:1"
    runs = [_run([a, b], 0, 10), _run([b], 11, 20), _run([], 21, 22), _run([a, b], 23, 30), _run([a], 31, 40)]
    windows = router_load.removal_windows(runs)
    # a: absent from the end of the poll at 11 to the start of the last absent poll (22); b: open at the end
    assert windows == {a: [[11.1, 22]], b: [[21.1, 22], [31.1, 40]]}
    logs = {a: [{"t": 5, "request_id": "p-0-0"}, {"t": 11.05, "request_id": "p-0-1"},  # before the window: fine
                {"t": 15, "request_id": "probe"},  # not the load's: the role's own probe
                {"t": 16, "request_id": "p-1-1"},  # a violation
                {"t": 25, "request_id": "p-1-2"}],
            b: [{"t": 5, "request_id": "p-2-0"}]}
    violations, per_url = router_load.sent_after_removal(windows, logs, "p-")
    assert violations == [{"url": a, "t": 16, "window": [11.1, 22]}]
    assert per_url[a]["windows"] == [{"from": 11.1, "to": 22, "seconds": 10.9, "load_before": 2, "load_inside": 1,
                                      "load_after": 1}]
    assert per_url[b]["load_requests"] == 1 and len(per_url[b]["windows"]) == 2


def test_run_until_the_stop_file_with_the_watch(fake, tmp_path):
    """The CLI end to end: 8 clients until the stop file, the watch sees a worker leave and come back."""
    FakeRouter.workers = ["http://w1:1", "http://w2:1"]
    out, progress, stop, records = (tmp_path / n for n in ("summary.json", "progress.json", "stop", "records.jsonl"))
    env = dict(os.environ, ROUTER_LOAD_API_KEY=KEY)
    proc = subprocess.Popen([sys.executable, str(LAB_DIR / "router_load.py"), "run", "--router", fake,
                             "--out", str(out), "--progress", str(progress), "--records", str(records),
                             "--stop-file", str(stop), "--clients", "8", "--max-tokens", "4",
                             "--watch-workers", "--watch-interval", "0.02", "--prefix", "t-"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def progressed(n):
            try:
                return json.loads(progress.read_text())["clients_with_ok"] >= n
            except (OSError, ValueError):
                return False
        ready.wait_until(lambda: progressed(8), alive=proc, timeout=60, what="8 clients with an ok request")
        seen = len(FakeRouter.seen)
        FakeRouter.workers = ["http://w1:1"]
        # the watch saw w2 absent at least 3 times (a window needs two polls) while the load went on
        ready.wait_until(lambda: len(FakeRouter.seen) > seen + 50 and FakeRouter.served.get(("http://w1:1",), 0) >= 3,
                         alive=proc, timeout=60, what="50 more requests and 3 polls without w2")
        FakeRouter.workers = ["http://w1:1", "http://w2:1"]
        seen = len(FakeRouter.seen)
        ready.wait_until(lambda: len(FakeRouter.seen) > seen + 50, alive=proc, timeout=60, what="50 more requests")
        stop.write_text("")
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    summary = json.loads(out.read_text())
    assert summary["ok"] == summary["sent"] > 100 and summary["failures"] == 0 and summary["unfinished"] == 0
    assert summary["by_api"]["chat"]["ok"] > 0 and summary["by_api"]["generate"]["ok"] > 0
    assert json.loads(stdout)["sent"] == summary["sent"]
    lines = records.read_text().splitlines()
    assert len(lines) == summary["sent"] and {json.loads(x)["client"] for x in lines} == set(range(8))
    windows = summary["workers_watch"]["windows"]
    assert windows["http://w1:1"] == [] and len(windows["http://w2:1"]) == 1
    assert KEY not in out.read_text() + records.read_text() + stdout + stderr


def test_workers_expect(fake, monkeypatch, capsys):
    monkeypatch.setenv("ROUTER_LOAD_API_KEY", KEY)
    FakeRouter.workers = ["http://w1:1", "http://w2:1"]
    assert router_load.main(["workers", "--router", fake, "--expect", "http://w2:1", "http://w1:1/"]) == 0
    assert json.loads(capsys.readouterr().out)["workers"] == {"http://w1:1": True, "http://w2:1": True}
    assert router_load.main(["workers", "--router", fake, "--expect", "http://w1:1"]) == 1
    assert "expected ['http://w1:1']" in capsys.readouterr().err
    monkeypatch.setenv("ROUTER_LOAD_API_KEY", "wrong")
    assert router_load.main(["workers", "--router", fake]) == 1
    assert "401" in capsys.readouterr().err


def test_workers_expect_fails_on_a_url_listed_twice(fake, monkeypatch, capsys):
    """Two registrations of one URL (two ids) are two entries to the router: a {url: healthy} view would hide them."""
    monkeypatch.setenv("ROUTER_LOAD_API_KEY", KEY)
    FakeRouter.workers = ["http://w1:1", "http://w2:1", "http://w2:1"]
    assert router_load.main(["workers", "--router", fake, "--expect", "http://w1:1", "http://w2:1"]) == 1
    assert "listed more than once: {'http://w2:1': [['1', True], ['2', True]]}" in capsys.readouterr().err


def test_watch_journals_each_change_until_the_stop_file(fake, monkeypatch, tmp_path):
    """The watch writes a line when the listing changes (ids included), none while it stays.
    Driven by the watch's own polls (FakeRouter.served), not by the clock."""
    monkeypatch.setenv("ROUTER_LOAD_API_KEY", KEY)
    out, stop = tmp_path / "watch.jsonl", tmp_path / "stop"
    FakeRouter.workers = ["http://w1:1", "http://w2:1"]
    proc = subprocess.Popen([sys.executable, router_load.__file__, "watch", "--router", fake, "--out", str(out),
                             "--stop-file", str(stop), "--interval", "0.01"], env=dict(os.environ))
    try:
        ready.wait_until(lambda: FakeRouter.served.get(("http://w1:1", "http://w2:1"), 0) >= 3, alive=proc, timeout=60,
                         what="3 polls of the first listing")
        FakeRouter.workers = ["http://w1:1"]
        ready.wait_until(lambda: FakeRouter.served.get(("http://w1:1",), 0) >= 3, alive=proc, timeout=60,
                         what="3 polls of the second listing")
        stop.touch()
        assert proc.wait(30) == 0
    finally:
        proc.kill()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["workers"] for line in lines] == [
        {"http://w1:1": [["0", True]], "http://w2:1": [["1", True]]}, {"http://w1:1": [["0", True]]}]
    assert all(isinstance(line["t"], float) for line in lines)


def test_failures_by_url():
    logs = {"http://a:1": [{"t": 1, "request_id": "p-0-0"}, {"t": 2, "request_id": "p-1-0"}, {"t": 3, "request_id": None}],
            "http://b:1": [{"t": 1, "request_id": "p-2-0"}]}
    records = [{"request_id": "p-0-0", "outcome": "truncated"}, {"request_id": "p-1-0", "outcome": "ok"},
               {"request_id": "p-2-0", "outcome": "failed"}, {"request_id": "p-3-0", "outcome": "failed"}]
    assert router_load.failures_by_url(records, logs) == {"http://a:1": 1, "http://b:1": 1, "None": 1}
