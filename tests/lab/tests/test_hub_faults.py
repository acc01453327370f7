"""Every control of the lab Hub is observable by a real client: status faults, resets, truncation,
expiring CDN URLs, bandwidth caps and the request log."""

from __future__ import annotations

import http.client
import json
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import httpx2
import pytest
import ready
from conftest import start_hub_process, stop_hub_process
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
SHARD = "model-00001-of-000004.safetensors"
MiB = 1 << 20


def _shard(hub):
    d = hub.repo(TARGET)
    main = d["refs"]["branches"]["main"]
    return next(f for f in d["commits"][main]["files"] if f["path"] == SHARD)


def _signed_url(hub, token=None):
    return get_hf_file_metadata(hf_hub_url(TARGET, SHARD, endpoint=hub.api), token=token).location


def _fetch(url, headers=None, timeout=30):
    """(status, body, headers) of a plain GET, errors included."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def test_500_then_success_is_retried_by_paginating_client(hub):
    hub.faults({"server": "api", "method": "GET", "path": "/tree/", "status": 500, "times": 2})
    entries = list(HfApi(endpoint=hub.api).list_repo_tree(TARGET))
    assert len(entries) == 15
    assert [e["status"] for e in hub.log()] == [500, 500, 200]
    assert hub.fault_state()[0]["fired"] == 2


def test_500_on_model_info_reaches_the_caller_with_the_message(hub):
    hub.faults({"path": r"^/api/models/", "status": 500, "message": "lab says the Hub is down"})
    with pytest.raises(HfHubHTTPError) as err:
        HfApi(endpoint=hub.api).model_info(TARGET)
    assert err.value.response.status_code == 500
    assert "lab says the Hub is down" in str(err.value)


def test_503_retry_after_is_honoured(hub):
    hub.faults({"server": "api", "path": "/tree/", "status": 503, "retry_after": 1, "times": 1})
    list(HfApi(endpoint=hub.api).list_repo_tree(TARGET))
    log = hub.log()
    assert [e["status"] for e in log] == [503, 200]
    # huggingface_hub sleeps Retry-After + 1 s.
    assert 1.9 <= log[1]["ts"] - log[0]["ts"] <= 10


def test_429_retry_after_on_cdn_download(hub, tmp_path):
    hub.faults({"server": "cdn", "method": "GET", "status": 429, "retry_after": 1, "times": 1})
    p = Path(hf_hub_download(TARGET, SHARD, endpoint=hub.api, cache_dir=tmp_path))
    assert p.stat().st_size == _shard(hub)["size"]
    cdn = hub.log(server="cdn")
    assert [e["status"] for e in cdn] == [429, 200]
    assert cdn[1]["ts"] - cdn[0]["ts"] >= 1.9


def test_nth_and_times_select_exactly_one_request(hub):
    hub.faults({"server": "api", "path": "^/api/models/", "nth": 2, "times": 1, "status": 503})
    api = HfApi(endpoint=hub.api)
    api.model_info(TARGET)
    with pytest.raises(HfHubHTTPError):
        api.model_info(TARGET)
    api.model_info(TARGET)
    assert [e["status"] for e in hub.log()] == [200, 503, 200]
    rule = hub.fault_state()[0]
    assert (rule["matched"], rule["fired"]) == (3, 1)


def test_connection_reset_mid_body(hub, tmp_path):
    size = _shard(hub)["size"]
    hub.faults({"server": "cdn", "method": "GET", "action": "reset", "after_bytes": 300_000, "times": 1})
    with pytest.raises(httpx2.ReadError):  # huggingface_hub does not retry a reset
        hf_hub_download(TARGET, SHARD, endpoint=hub.api, cache_dir=tmp_path)
    e = hub.log(server="cdn")[-1]
    assert e["bytes_sent"] == 300_000 and "reset" in e["error"] and e["fault"]
    # A raw reader gets (at most) the first 300000 bytes, then ECONNRESET: a peer's unread bytes
    # may be dropped when the RST lands, which is TCP, not the lab.
    hub.faults({"server": "cdn", "action": "reset", "after_bytes": 300_000, "times": 1})
    loc = urllib.parse.urlsplit(_signed_url(hub))
    conn = http.client.HTTPConnection(loc.hostname, loc.port, timeout=10)
    got = bytearray()
    try:
        conn.request("GET", f"{loc.path}?{loc.query}")
        r = conn.getresponse()
        assert int(r.getheader("Content-Length")) == size
        with pytest.raises((ConnectionResetError, http.client.IncompleteRead)):
            for dummy in range(10_000):
                chunk = r.read(65536)
                if not chunk:
                    raise http.client.IncompleteRead(bytes(got))
                got += chunk
    finally:
        conn.close()
    assert 0 < len(got) <= 300_000
    assert bytes(got) == hub.blob(_shard(hub)["lfs"]["sha256"]).read_bytes()[:len(got)]
    # The rule fired once: the next download is whole.
    assert Path(hf_hub_download(TARGET, SHARD, endpoint=hub.api, cache_dir=tmp_path)).stat().st_size == size


def test_truncated_body_is_detected_and_refetched(hub, tmp_path):
    shard = _shard(hub)
    hub.faults({"server": "cdn", "method": "GET", "action": "truncate", "after_bytes": 123_456, "times": 1})
    p = Path(hf_hub_download(TARGET, SHARD, endpoint=hub.api, cache_dir=tmp_path))
    assert p.read_bytes() == hub.blob(shard["lfs"]["sha256"]).read_bytes()
    cdn = hub.log(server="cdn")
    assert cdn[0]["bytes_sent"] == 123_456 and "truncated" in cdn[0]["error"]
    assert len(cdn) == 2 and cdn[1]["status"] in (200, 206) and cdn[1]["error"] is None


def test_stall_then_close(hub):
    hub.faults({"server": "cdn", "action": "stall", "after_bytes": 4096, "seconds": 1.5, "times": 1})
    loc = urllib.parse.urlsplit(_signed_url(hub))
    conn = http.client.HTTPConnection(loc.hostname, loc.port, timeout=10)
    try:
        conn.request("GET", f"{loc.path}?{loc.query}")
        r = conn.getresponse()
        first = r.read(4096)
        t0 = time.monotonic()
        with pytest.raises(http.client.IncompleteRead):
            r.read()
        stalled = time.monotonic() - t0
    finally:
        conn.close()
    assert len(first) == 4096 and 1.2 <= stalled <= 5
    assert "stalled" in hub.log(server="cdn")[-1]["error"]


@pytest.mark.skipif(shutil.which("aria2c") is None, reason="aria2c not installed")
def test_truncated_body_fails_aria2_single_connection(hub, tmp_path):
    hub.faults({"server": "cdn", "method": "GET", "action": "truncate", "after_bytes": 200_000})
    proc = subprocess.run(["aria2c", "-x1", "-s1", "--max-tries=1", "--console-log-level=error",
                           "--summary-interval=0", "--timeout=10", "-d", str(tmp_path), "-o", "x",
                           _signed_url(hub)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode != 0, "aria2 must not accept a short body"


def test_expired_and_forged_cdn_urls_are_403(hub):
    hub.config(cdn_url_ttl=1)
    url = _signed_url(hub)
    status, body = _fetch(url)[:2]
    assert status == 200 and len(body) == _shard(hub)["size"]
    forged = url[:-1] + ("0" if url[-1] != "0" else "1")
    status, body = _fetch(forged)[:2]
    assert status == 403 and b"Invalid signature" in body
    time.sleep(2.2)
    status, body, headers = _fetch(url)
    assert status == 403 and b"expired" in body
    if shutil.which("aria2c"):
        proc = subprocess.run(["aria2c", "--max-tries=1", "--console-log-level=error", "--summary-interval=0",
                               "--dry-run=true", url], capture_output=True, text=True, timeout=60, check=False)
        assert proc.returncode != 0
    assert [e["status"] for e in hub.log(server="cdn")][:3] == [200, 403, 403]


def test_cdn_url_blobs_expires_a_url_once_another_blob_was_asked_for(hub):
    """cdn_url_blobs=1: a signed URL dies once the CDN was asked for another blob after it was signed (an
    expiry by the downloads' order, for tests that must not race the clock); the same blob again, or a URL
    signed after, still serves; off (0), both serve."""
    other = "model-00002-of-000004.safetensors"
    hub.config(cdn_url_blobs=1)
    first = _signed_url(hub)
    second = get_hf_file_metadata(hf_hub_url(TARGET, other, endpoint=hub.api)).location
    assert _fetch(first)[0] == 200 and _fetch(first)[0] == 200  # its own blob, asked twice
    status, body = _fetch(second)[:2]
    assert status == 403 and b"expired" in body  # signed before the first blob was asked for
    fresh = get_hf_file_metadata(hf_hub_url(TARGET, other, endpoint=hub.api)).location
    assert _fetch(fresh)[0] == 200
    assert _fetch(first)[0] == 403  # another blob was asked for since it was signed
    hub.config(cdn_url_blobs=0)
    assert _fetch(first)[0] == 200 and _fetch(second)[0] == 200
    tampered = first.replace("&n=0&", "&n=9&")
    assert tampered != first and _fetch(tampered)[0] == 403  # the mark is signed


def _timed_get(url, headers, out, key):
    t0 = time.monotonic()
    status, body = _fetch(url, headers=headers, timeout=60)[:2]
    out[key] = (status, len(body), time.monotonic() - t0)


def test_per_connection_cap(hub):
    rate = 2 * MiB
    hub.config(rate_per_conn=rate)
    url = _signed_url(hub)
    results = {}
    # Two connections at once: each gets the per-connection rate (the cap is not shared).
    threads = [threading.Thread(target=_timed_get, args=(url, {"Range": f"bytes=0-{3 * MiB - 1}"}, results, i))
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for status, n, secs in results.values():
        assert status == 206 and n == 3 * MiB
        # The upper bound is the cap's promise; the lower one only tells "per connection" from
        # "shared by both" (0.5x), with room for a busy machine.
        assert 0.6 * rate <= n / secs <= 1.15 * rate, f"{n / secs / MiB:.2f} MiB/s, cap 2 MiB/s"


def test_total_cap_is_shared(hub):
    rate = 3 * MiB
    hub.config(rate_total=rate)
    url = _signed_url(hub)
    results = {}
    threads = [threading.Thread(target=_timed_get, args=(url, {"Range": f"bytes=0-{2 * MiB - 1}"}, results, i))
               for i in range(3)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    wall = time.monotonic() - t0
    assert sorted(r[:2] for r in results.values()) == [(206, 2 * MiB)] * 3
    total = 6 * MiB / wall
    # Per-connection instead of shared would give 3x the rate: the upper bound catches that.
    assert 0.6 * rate <= total <= 1.15 * rate, f"{total / MiB:.2f} MiB/s over 3 connections, cap 3 MiB/s"
    # Uncapping takes effect without a restart: far above the old cap.
    hub.config(rate_total=0)
    _timed_get(url, {}, results, "free")
    status, n, secs = results["free"]
    assert status == 200 and n / secs > 3 * rate, f"uncapped: {n / secs / MiB:.2f} MiB/s"


def test_request_log_contents(hub, lab_tokens):
    token = lab_tokens["reader"]
    api_host = urllib.parse.urlsplit(hub.api)
    conn = http.client.HTTPConnection(api_host.hostname, api_host.port, timeout=10)
    try:
        for dummy in range(2):  # two requests on one keep-alive connection
            conn.request("HEAD", f"/{TARGET}/resolve/main/{SHARD}", headers={"Authorization": f"Bearer {token}"})
            conn.getresponse().read()
    finally:
        conn.close()
    url = _signed_url(hub)
    status, body = _fetch(url, headers={"Range": "bytes=100-1099"})[:2]
    assert status == 206
    status = _fetch(hub.api + f"/{TARGET}/resolve/main/config.json")[0]
    log = hub.log()
    assert len(log) == 5
    keys = {"ts", "server", "method", "path", "query", "range", "auth_present", "status", "bytes_sent",
            "client", "conn_id", "seq"}
    assert all(keys <= set(e) for e in log)
    h1, h2, h3, cdn, cfg = log
    assert (h1["method"], h1["status"], h1["auth_present"], h1["server"]) == ("HEAD", 302, True, "api")
    assert h1["conn_id"] == h2["conn_id"] != h3["conn_id"]
    assert h3["auth_present"] is False
    assert (cdn["server"], cdn["status"], cdn["range"], cdn["bytes_sent"]) == ("cdn", 206, "bytes=100-1099", 1000)
    assert "sig=" in cdn["query"] and cdn["path"].startswith("/cdn/")
    assert cfg["status"] == 200 and cfg["bytes_sent"] > 0 and cfg["client"].startswith("127.0.0.1:")
    assert token not in json.dumps(log)
    # The --log file holds the same entries as JSON lines, and no token either (once the last
    # entry is written: the file is line-buffered, the in-memory log may be a moment ahead).

    def written():
        return any(json.loads(line)["seq"] == cfg["seq"] for line in hub.log_file.read_text().splitlines())

    ready.wait_until(written, alive=hub.proc, what=f"the Hub's --log line of entry {cfg['seq']}", timeout=10)
    text = hub.log_file.read_text()
    assert token not in text
    # Lines are written as entries complete, which may be out of seq order by a moment.
    tail = [json.loads(line) for line in text.splitlines()[-5:]]
    assert sorted(e["seq"] for e in tail) == [e["seq"] for e in log]
    assert [e["seq"] for e in hub.log(since=log[2]["seq"])] == [cdn["seq"], cfg["seq"]]
    hub.reset()
    assert hub.log() == []


def test_log_order_is_the_order_responses_ended(hub):
    """A response whose thread records late (here: a stall after its last byte) still comes first.

    The client reads the whole first body, then sends a second request on a new connection that
    is recorded at once, while the first thread is still stalling: before the entry took its seq
    when its last byte went out, the log held them in the wrong order."""
    hub.faults({"server": "api", "method": "GET", "path": "config.json$", "action": "stall",
                "after_bytes": 1 << 30, "seconds": 1, "times": 1})
    first = _fetch(hub.api + f"/{TARGET}/resolve/main/config.json")
    second = _fetch(hub.api + f"/api/models/{TARGET}")
    assert first[0] == 200 and second[0] == 200

    def both():
        entries = hub.log()
        return entries if len(entries) == 2 else None

    log = ready.wait_until(both, alive=hub.proc, what="both entries in the Hub's log", timeout=30)
    assert [e["path"].rsplit("/", 1)[-1] for e in log] == ["config.json", "Kimi-K2.6-mini"]
    assert "stalled" in log[0]["error"] and log[0]["seq"] < log[1]["seq"]


def test_control_api_rejects_bad_input(hub):
    for path, body in (("/_lab/faults", {"rules": [{"action": "explode"}]}),
                       ("/_lab/faults", {"rules": [{"path": "("}]}),
                       ("/_lab/config", {"rate_total": -1}),
                       ("/_lab/config", {"no_such_key": 1})):
        req = urllib.request.Request(hub.api + path, data=json.dumps(body).encode(), method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 400
    assert hub.fault_state() == [] and hub.config()["rate_total"] == 0


def test_sigterm_stops_the_server_cleanly(fixture_store, tmp_path):
    proc, ready = start_hub_process(fixture_store, tmp_path / "log.jsonl")
    status, body = _fetch(ready["api"] + "/_lab/health")[:2]
    assert status == 200 and json.loads(body)["ok"]
    t0 = time.monotonic()
    assert stop_hub_process(proc) == 0
    assert time.monotonic() - t0 < 5
