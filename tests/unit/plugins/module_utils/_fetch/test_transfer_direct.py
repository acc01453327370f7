# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Files a token-holding endpoint serves itself (``direct``): fetched in-process, up to parallel_files
at once, while the batch's aria2c runs, with progress ticks, redirects refused.

Faults are driven by bytes and events, never by the clock: the lab Hub stalls a direct file's body
after STALL_BYTES (its ``seconds`` is only the bound that code fetching serially reaches), and the
test ends the stalled GET from its side (the client socket) once it saw what it came for, on a
progress write. Each lab test fails on the serial, tick-less code this replaced."""
from __future__ import annotations

import hashlib
import http.server
import os
import socket
import threading

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import aria2 as _aria2
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import progress as _snapshot_progress
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import staging as _snapshot_staging
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import transfer as _transfer
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import rounds as _rounds
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import direct as _transfer_direct
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"  # tests/lab/fixtures.py, lab-only, fake
STALLED = "model.safetensors.index.json"  # ~1 MB, not LFS: the gated repo's endpoint serves it itself
SHARD = "model-00001-of-000004.safetensors"
STALL_BYTES = 64 << 10
# The longest a stalled body is held: only code that cannot act while a direct file stalls waits it out.
STALL_BOUND = 60
# Barrier waits in the no-Hub tests: only serial code reaches them.
GATE_BOUND = 30


# ----------------------------------------------------------------------------- no Hub needed

class GateSource(object):
    """Direct bytes from a dict; each download waits at a barrier of ``parties`` downloads, so the
    fetch can only go on when that many run at once. Records the most ever running together."""

    def __init__(self, blobs, parties, fail=None):
        self.blobs = blobs
        self.gate = threading.Barrier(parties, timeout=GATE_BOUND)
        self.fail = dict(fail or {})
        self.lock = threading.Lock()
        self.running = 0
        self.most = 0

    def resolve(self, items):
        return [(item, _transfer.Resolution("mem://" + item.remote.path, direct=True)) for item in items]

    def download(self, url, out_path, size=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            self.gate.wait()
            if url in self.fail:
                raise self.fail[url]
            with open(out_path, "wb") as handle:
                handle.write(self.blobs[url])
        finally:
            with self.lock:
                self.running -= 1


def direct_transfer(dest, items, source, parallel_files, progress=None):
    staging = _snapshot_staging.staging_dir(str(dest))
    progress = progress or _snapshot_progress.Progress(str(dest), staging=staging, repo_id="org/m", commit="c" * 40,
                                                       items=list(_snapshot_plan.unique_fetches(items).values()))
    aria2 = _aria2.Aria2Settings(aria2c="/nonexistent/aria2c", connections=1, splits=1, parallel_files=parallel_files,
                                 min_split_size="1M", timeout=5, retry_wait=0, validate_certs=True, ca_path=None,
                                 proxy=None)
    return _transfer.Transfer(items, dest=str(dest), source=source, aria2=aria2, max_tries=1, retry_wait=0,
                              hash_workers=2, progress=progress, timings=_snapshot_progress.Timings(),
                              log=lambda msg: None)


def fetch_items(dest, count):
    items = []
    for index in range(count):
        item = sf.item_for(dest, "f%d.json" % index, b'{"n": %d}\n' % index, False)
        item.action = "fetch"
        items.append(item)
    return items


def test_direct_files_download_parallel_files_at_once(tmp_path):
    """6 direct files, parallel_files 3: every download waits until 3 run together (serial code never
    gets past the first), and never more than 3 run."""
    dest = tmp_path / "d"
    items = fetch_items(dest, 6)
    source = GateSource({"mem://" + it.remote.path: b'{"n": %d}\n' % i for i, it in enumerate(items)}, 3)
    assert direct_transfer(dest, items, source, 3).run() == {}
    assert source.most == 3
    for index, item in enumerate(items):
        with open(item.final, "rb") as handle:
            assert handle.read() == b'{"n": %d}\n' % index
        assert item.stat is not None


def test_direct_errors_and_retry_after_are_kept_by_the_round(tmp_path):
    """A worker's SourceError becomes the file's error and its Retry-After the round's wait; bad bytes
    are unlinked; the good files are placed."""
    dest = tmp_path / "d"
    items = fetch_items(dest, 3)
    blobs = {"mem://f0.json": b'{"n": 0}\n', "mem://f1.json": b'{"n": 9}\n', "mem://f2.json": b'{"n": 2}\n'}
    source = GateSource(blobs, 3, fail={"mem://f2.json": _transfer.SourceError("GET: 429 slow down", 7.0)})
    transfer = direct_transfer(dest, items, source, 3)
    _snapshot_staging.make_staging(str(dest))
    assert _rounds.Round(transfer).run() == 7.0
    assert transfer.errors == {"f1.json": "downloaded bytes do not match the Hub's id", "f2.json": "GET: 429 slow down"}
    assert items[0].stat is not None and sorted(it.remote.path for it in transfer.pending.values()) == ["f1.json", "f2.json"]
    assert not os.path.exists(transfer.staged(items[1]))


class Recorder(object):
    def __init__(self):
        self.messages = []

    def write(self, state="running", message=None):
        self.messages.append(message)


def test_an_error_echoing_the_token_never_reaches_progress(tmp_path):
    """Per-file errors quote what the server said; the retry line in progress.json masks the token."""
    dest = tmp_path / "d"
    items = fetch_items(dest, 1)
    source = GateSource({}, 1, fail={"mem://f0.json": _transfer.SourceError("GET: 401 bad token hf_tok3n")})
    source.token = "hf_tok3n"
    progress = Recorder()
    transfer = direct_transfer(dest, items, source, 1, progress=progress)
    transfer.max_tries = 2
    assert transfer.run() == {"f0.json": "GET: 401 bad token hf_tok3n"}  # the module masks its result itself
    retry = [m for m in progress.messages if m and m.startswith("retrying")]
    assert retry and all("hf_tok3n" not in m for m in retry) and "bad token ********" in retry[0], retry


def test_a_worker_crash_is_raised_after_every_worker_ended(tmp_path):
    dest = tmp_path / "d"
    items = fetch_items(dest, 2)
    source = GateSource({"mem://f0.json": b'{"n": 0}\n'}, 2, fail={"mem://f1.json": RuntimeError("bug")})
    with pytest.raises(RuntimeError, match="bug"):
        direct_transfer(dest, items, source, 2).run()
    assert source.running == 0


# ----------------------------------------------------------------------------- lab Hub (+ aria2c)

class Tap(object):
    """The module's own opener; keeps each GET of ``path`` so the test can end it from the client side
    (the lab Hub's stall ends by its clock only)."""

    def __init__(self, inner, path):
        self.inner = inner
        self.path = path
        self.held = []
        self.released = False

    def open(self, req, *args, **kwargs):
        resp = self.inner.open(req, *args, **kwargs)
        if req.get_method() == "GET" and req.full_url.endswith("/" + self.path):
            self.held.append(resp)
        return resp

    def release(self):
        self.released = True
        for resp in self.held:
            try:
                resp.fp.raw._sock.shutdown(socket.SHUT_RDWR)  # pylint: disable=protected-access
            except (AttributeError, OSError):
                pass  # already ended


def stalled_run(lab_hub, tmp_path, monkeypatch, until, **params):
    """hf_snapshot of GATED with STALLED's body stalled after STALL_BYTES; ``until(data)`` is asked on
    every progress write (data: what progress.json got) and the stalled GET is ended the first time it
    says True. Returns (result, tap)."""
    lab_hub.faults({"name": "stall-direct", "server": "api", "method": "GET", "path": "/resolve/.*/" + STALLED.replace(".", r"\.") + "$",
                    "action": "stall", "after_bytes": STALL_BYTES, "seconds": STALL_BOUND, "times": 1})
    monkeypatch.setattr(_rounds, "PROGRESS_INTERVAL", 0.2)
    taps = []
    real_opener = _hub.url_opener

    def opener(*args, **kwargs):
        taps.append(Tap(real_opener(*args, **kwargs), STALLED))
        return taps[-1]

    monkeypatch.setattr(_hub, "url_opener", opener)
    real_write = _snapshot_progress.Progress.write

    def write(self, state="running", message=None):
        data = real_write(self, state=state, message=message)
        # only once the stalled GET is held (its answer started), so that releasing it ends it
        if data is not None and taps and taps[-1].held and not taps[-1].released and until(data):
            taps[-1].release()
        return data

    monkeypatch.setattr(_snapshot_progress.Progress, "write", write)
    base = dict(repo_id=GATED, revision="main", dest=str(tmp_path / "g"), endpoint=lab_hub.api, min_free_bytes=0,
                token=TOKEN_READER, retry_wait=1, max_tries=3, connections=1, splits=1, min_split_size="1M",
                timeout=STALL_BOUND * 2)  # the client's read timeout never ends the stall first
    base.update(params)
    res = _snapshot.snapshot(base)
    assert TOKEN_READER not in repr(res)
    assert taps and res["changed"]
    return res, taps[-1]


def still_stalled(lab_hub):
    """The stalled GET has not ended: the Hub logs a request when its response ends."""
    return not [e for e in lab_hub.log(server="api") if e["fault"] == "stall-direct"]


def served(lab_hub):
    """Paths whose direct GET the endpoint served whole."""
    return {e["path"].split("/resolve/", 1)[1].split("/", 1)[1] for e in lab_hub.log(server="api")
            if e["method"] == "GET" and "/resolve/" in e["path"] and e["status"] == 200 and not e["error"]}


def check_tree(lab_hub, res, dest, paths):
    dummy, files = lab_hub.files_at(GATED, "main")
    assert sorted(f["path"] for f in res["files"]) == sorted(paths)
    for path in paths:
        with open(os.path.join(str(dest), path), "rb") as handle:
            data = handle.read()
        entry = files[path]
        if entry.get("lfs"):
            assert hashlib.sha256(data).hexdigest() == entry["lfs"]["sha256"]
        else:
            assert len(data) == entry["size"]


def test_direct_files_overlap_so_a_slow_one_holds_no_other_back(lab_hub, aria2c, tmp_path, monkeypatch):
    """A gated repo's small files, all direct, parallel_files 4: while one direct body is stalled
    mid-way, every other direct file is served whole (serial code would wait for the stalled one)."""
    dummy, files = lab_hub.files_at(GATED, "main")
    paths = sorted(p for p in files if not files[p].get("lfs"))
    others = set(paths) - {STALLED}
    seen = []

    def until(data):
        if still_stalled(lab_hub) and others <= served(lab_hub):
            seen.append(data)
            return True
        return False

    res, tap = stalled_run(lab_hub, tmp_path, monkeypatch, until, parallel_files=4, allow_patterns=paths)
    assert tap.released and seen, "the other direct files waited for the stalled one"
    check_tree(lab_hub, res, tmp_path / "g", paths)
    # the stalled GET was ended by the test (the Hub logs it once its stall is over) and the next
    # round fetched the rest of the file (all of it when no byte had arrived yet), with the token
    # (the stalled GET itself is logged only when the Hub's stall bound ran out, whenever that is)
    gets = [e for e in lab_hub.log(server="api") if e["method"] == "GET" and e["path"].endswith("/" + STALLED)
            and e["fault"] != "stall-direct"]
    assert len(gets) == 1 and gets[0]["auth_present"], gets
    size = files[STALLED]["size"]
    if gets[0]["range"] is None:
        assert (gets[0]["status"], gets[0]["bytes_sent"]) == (200, size)
    else:
        have = int(gets[0]["range"][len("bytes="):-1])
        assert 0 < have <= STALL_BYTES and (gets[0]["status"], gets[0]["bytes_sent"]) == (206, size - have), gets
    assert [r["fired"] for r in lab_hub.fault_state()] == [1]


def test_progress_shows_a_direct_file_growing(lab_hub, aria2c, tmp_path, monkeypatch):
    """A direct file stalled after STALL_BYTES: progress.json is written while it is stalled and
    counts the bytes it already has (the serial code wrote no progress during a direct download)."""
    seen = []

    def until(data):
        if data["bytes_done"] >= STALL_BYTES and data["files_done"] == 0 and still_stalled(lab_hub):
            seen.append(data)
            return True
        return False

    res, tap = stalled_run(lab_hub, tmp_path, monkeypatch, until, allow_patterns=[STALLED])
    assert tap.released and seen, "no progress write while the direct file was downloading"
    assert seen[0]["bytes_done"] < seen[0]["bytes_total"] and seen[0]["state"] == "running"
    check_tree(lab_hub, res, tmp_path / "g", [STALLED])


def test_a_cut_direct_download_resumes_where_it_stopped(lab_hub, aria2c, tmp_path, monkeypatch):
    """The direct GET is cut once STALL_BYTES arrived: the next round asks for the rest only (Range),
    and the file is whole and right. Before, the round's leftover check took the prefix for a
    preallocated file (no .aria2 control file), deleted it and fetched everything again."""
    dummy, files = lab_hub.files_at(GATED, "main")

    def until(data):
        return data["bytes_done"] >= STALL_BYTES and still_stalled(lab_hub)

    res, tap = stalled_run(lab_hub, tmp_path, monkeypatch, until, allow_patterns=[STALLED])
    assert tap.released
    check_tree(lab_hub, res, tmp_path / "g", [STALLED])
    assert [f["action"] for f in res["files"]] == ["resumed"], res["files"]
    gets = [e for e in lab_hub.log(server="api") if e["method"] == "GET" and e["path"].endswith("/" + STALLED)
            and e["fault"] != "stall-direct"]
    size = files[STALLED]["size"]
    assert [(e["range"], e["status"], e["bytes_sent"], e["auth_present"]) for e in gets] == [
        ("bytes=%d-" % STALL_BYTES, 206, size - STALL_BYTES, True)], gets
    staging = _snapshot_staging.staging_dir(str(tmp_path / "g"))
    assert not os.path.exists(staging), os.listdir(staging)  # no marker left behind


def test_aria2_runs_while_a_direct_file_downloads(lab_hub, aria2c, tmp_path, monkeypatch):
    """One batch: a direct file stalled mid-body and a shard for aria2. The shard is fetched, verified
    and placed while the direct body is still stalled (the serial code started aria2 only after every
    direct file had ended). aria2 never sends the token."""
    dest = tmp_path / "g"

    def until(data):
        return os.path.exists(str(dest / SHARD)) and still_stalled(lab_hub)

    res, tap = stalled_run(lab_hub, tmp_path, monkeypatch, until, allow_patterns=[STALLED, SHARD])
    assert tap.released, "aria2 waited for the direct file"
    check_tree(lab_hub, res, dest, [STALLED, SHARD])
    log = lab_hub.log()
    assert any("aria2" in (e.get("user_agent") or "") for e in log if e["server"] == "cdn")
    assert not any("aria2" in (e.get("user_agent") or "") for e in log if e["auth_present"])


# ----------------------------------------------------------------------------- a redirecting endpoint

class _Redirector(http.server.BaseHTTPRequestHandler):
    """An endpoint that answers a GET with a redirect to ``target``; another origin records what came."""

    target = ""
    seen: list = []

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        self.seen.append((self.server.server_address, self.path, self.headers.get("Authorization")))
        if self.target:
            self.send_response(302)
            self.send_header("Location", self.target)
        else:
            self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


def test_a_redirected_direct_get_is_not_followed_and_the_token_stays(tmp_path):
    """The endpoint that served the HEAD redirects the GET to another origin: the download fails this
    round (retried), the other origin sees no request, the token appears in no error."""
    other = http.server.ThreadingHTTPServer(("127.0.0.2", 0), type("Other", (_Redirector,), {"target": "", "seen": []}))
    host, port = other.server_address[:2]
    endpoint = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("Endpoint", (_Redirector,), {
        "target": "http://%s:%d/blob" % (host, port), "seen": []}))
    threads = [threading.Thread(target=srv.serve_forever, daemon=True) for srv in (other, endpoint)]
    for thread in threads:
        thread.start()
    try:
        source = _transfer.HubSource(endpoint="http://127.0.0.1:%d" % endpoint.server_address[1], repo_id="org/m",
                                     repo_type="model", commit="c" * 40, token=TOKEN_READER, use_token=True,
                                     timeout=10, opener=_hub.url_opener())
        with pytest.raises(_transfer.SourceError) as exc:
            source.download("http://127.0.0.1:%d/org/m/resolve/%s/config.json" % (endpoint.server_address[1], "c" * 40),
                            str(tmp_path / "out"))
    finally:
        for srv in (other, endpoint):
            srv.shutdown()
            srv.server_close()
    assert "302" in exc.value.message and TOKEN_READER not in exc.value.message
    assert endpoint.RequestHandlerClass.seen[0][2] == "Bearer " + TOKEN_READER
    assert other.RequestHandlerClass.seen == []


# ----------------------------------------------------------------------------- resuming a direct download

BODY = bytes(range(256)) * 4  # 1024 bytes, every offset distinguishable


class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers every GET with ``answer(range_header) -> (status, headers, body)``; records the Range asked."""

    protocol_version = "HTTP/1.1"
    answer = None
    asked: list = []

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        self.asked.append(self.headers.get("Range"))
        status, headers, body = type(self).answer(self.headers.get("Range"))
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture
def scripted():
    """(start(answer) -> url, the Range headers asked); the server on loopback, stopped after the test."""
    servers = []

    def start(answer):
        handler = type("Handler", (_Scripted,), {"answer": staticmethod(answer), "asked": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return "http://127.0.0.1:%d/f" % server.server_address[1], handler.asked

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get(url, out, size=len(BODY)):
    return _transfer_direct.download_direct(_hub.url_opener(), url, str(out), token="hf_tok", timeout=10, size=size)


def test_a_206_that_continues_the_prefix_is_appended(scripted, tmp_path):
    out = tmp_path / "f"
    out.write_bytes(BODY[:100])
    url, asked = scripted(lambda rng: (206, {"Content-Range": "bytes 100-1023/1024"}, BODY[100:]))
    assert _get(url, out) == len(BODY) - 100 and out.read_bytes() == BODY and asked == ["bytes=100-"]


def test_a_200_to_a_range_request_starts_the_file_over(scripted, tmp_path):
    out = tmp_path / "f"
    out.write_bytes(BODY[:100])
    url, dummy = scripted(lambda rng: (200, {}, BODY))
    assert _get(url, out) == len(BODY) and out.read_bytes() == BODY


def test_a_206_from_another_offset_drops_the_prefix(scripted, tmp_path):
    """Appending it would leave BODY[:100] + BODY on disk (found by the hash only after a whole round)."""
    out = tmp_path / "f"
    out.write_bytes(BODY[:100])
    url, dummy = scripted(lambda rng: (206, {"Content-Range": "bytes 0-1023/1024"}, BODY))
    with pytest.raises(_hub.HubHTTPError, match="asked from byte 100: the next try starts over"):
        _get(url, out)
    assert not out.exists()


def test_a_416_short_of_the_size_drops_the_prefix_a_416_when_whole_keeps_it(scripted, tmp_path):
    out = tmp_path / "f"
    out.write_bytes(BODY[:100])
    url, asked = scripted(lambda rng: (416, {"Content-Range": "bytes */1024"}, b""))
    with pytest.raises(_hub.HubHTTPError, match="refused the rest of the file from byte 100"):
        _get(url, out)
    assert not out.exists()  # the next try asks for the whole file, instead of the same Range for ever
    out.write_bytes(BODY)
    assert _get(url, out) == 0 and out.read_bytes() == BODY and asked == ["bytes=100-", "bytes=1024-"]


def test_a_body_longer_than_the_listing_is_cut_and_refused(scripted, tmp_path):
    out = tmp_path / "f"
    url, dummy = scripted(lambda rng: (200, {}, BODY * 4))
    with pytest.raises(_hub.HubHTTPError, match="longer than the listing's 1024 bytes"):
        _get(url, out)
    assert not out.exists()


def test_a_redirected_get_says_why_it_is_not_followed(scripted, tmp_path):
    url, dummy = scripted(lambda rng: (302, {"Location": "http://127.0.0.2:1/elsewhere"}, b""))
    with pytest.raises(_hub.HubHTTPError, match="redirected the GET after answering its HEAD itself; not followed"):
        _get(url, tmp_path / "f")


def test_an_error_answer_keeps_its_status_and_retry_after_and_the_prefix(scripted, tmp_path):
    out = tmp_path / "f"
    out.write_bytes(BODY[:100])
    url, asked = scripted(lambda rng: (503, {"Retry-After": "7"}, b'{"error": "busy"}'))
    with pytest.raises(_hub.HubHTTPError) as err:
        _get(url, out)
    assert err.value.status == 503 and err.value.retry_after == 7.0 and "busy" in err.value.message
    assert out.read_bytes() == BODY[:100] and asked == ["bytes=100-"]  # the next try asks the rest again
