# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_sglang_http against the lab's SGLang STAND-IN on loopback (tests/unit/plugins/standin.py): a
real HTTP server with SGLang's endpoints, NOT SGLang (no GPU here; its timings say nothing about
GPUs). A plain http.server stands for "something that is not SGLang" where that is the point."""
from __future__ import annotations

import http.server
import os
import threading

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import http as _http
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub
from ansible_collections.gpufleet.llm.plugins.module_utils._hub import resolve as _resolve
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as h
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    free_port, standin_factory)

API_KEY = "sk-lab-probe-fake-KEY-0123456789"  # lab-only, fake


def _paths(golden):
    return os.path.join(golden, "target"), os.path.join(golden, "drafter")


# --- URL validation (no server) -----------------------------------------------------------------

@pytest.mark.parametrize("url,fragment", [
    ("", "url is empty"),
    ("ftp://127.0.0.1:30000", "scheme must be http or https"),
    ("127.0.0.1:30000", "scheme must be http or https"),
    ("http://", "has no host"),
    ("http://127.0.0.1:port", "is not a valid URL"),
    ("http://user:secret@127.0.0.1:30000", "must not contain credentials"),
    ("http://127.0.0.1:30000/?x=1", "query or fragment"),
])
def test_bad_base_url(url, fragment):
    with pytest.raises(h.SGLangHTTPError) as exc:
        h.validate_base_url(url)
    assert fragment in exc.value.msg
    assert "secret" not in exc.value.msg


def test_base_url_normalised():
    assert h.validate_base_url(" http://127.0.0.1:30000/ ") == "http://127.0.0.1:30000"
    assert h.validate_base_url("https://gpu1.example:8443") == "https://gpu1.example:8443"


# --- connection-level errors ---------------------------------------------------------------------

def test_connection_refused_names_url_and_path():
    url = "http://127.0.0.1:%d" % free_port()
    with pytest.raises(h.SGLangHTTPError) as exc:
        h.call(url, "/model_info", api_key=API_KEY, timeout=5)
    assert exc.value.status is None and exc.value.url_path == "/model_info"
    assert "connection refused" in exc.value.msg and url + "/model_info" in exc.value.msg
    assert API_KEY not in exc.value.msg


def test_wait_healthy_refused_gives_up_at_timeout_with_fake_clock():
    url = "http://127.0.0.1:%d" % free_port()
    now = [100.0]
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        now[0] += seconds

    with pytest.raises(h.SGLangHTTPError) as exc:
        h.wait_healthy(url, timeout=10, interval=3, clock=lambda: now[0], sleep=sleep)
    # polls at t=0, 3, 6, 9, then 10 (the last sleep is cut to the time left)
    assert sleeps == [3, 3, 3, 1]
    assert "did not answer 200 within 10s (5 polls every 3s)" in exc.value.msg
    assert "connection refused" in exc.value.msg and exc.value.status is None


def test_wait_healthy_rejects_bad_numbers():
    with pytest.raises(h.SGLangHTTPError, match="interval > 0"):
        h.wait_healthy("http://127.0.0.1:1", timeout=1, interval=0)


class _NotSGLang(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        body = b"<html>hello</html>" if self.path == "/html" else b"oops, not json"
        self.send_response(200 if self.path == "/html" else 500)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


@pytest.fixture
def not_sglang():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotSGLang)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_not_json_2xx_raises_and_non_json_error_is_returned(not_sglang):
    with pytest.raises(h.SGLangHTTPError) as exc:
        h.call(not_sglang, "/html")
    assert exc.value.status == 200 and "not JSON" in exc.value.msg and "/html" in exc.value.msg
    status, data = h.call(not_sglang, "/other")
    assert status == 500 and data == {"error": "oops, not json"}


class _Redirects(http.server.BaseHTTPRequestHandler):
    """Answers every path with a 302 to /elsewhere, and records what each request carried."""

    def do_GET(self):  # noqa: N802  pylint: disable=invalid-name
        self.server.seen.append((self.path, self.headers.get("Authorization")))
        self.send_response(302)
        self.send_header("Location", "/elsewhere")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


def test_a_redirect_is_answered_not_followed():
    # one redirect guard and one TLS policy for the Hub and SGLang clients (_common/http.py)
    assert h.NoRedirect is _hub.NoRedirect is _resolve.NoRedirect is _http.NoRedirect
    assert h.ssl_context is _resolve.ssl_context is _http.ssl_context
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirects)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        status, data = h.call("http://127.0.0.1:%d" % server.server_address[1], "/model_info", api_key=API_KEY)
    finally:
        server.shutdown()
        server.server_close()
    assert (status, data) == (302, None)
    assert server.seen == [("/model_info", "Bearer " + API_KEY)]  # the key never went to /elsewhere


# --- against the stand-in -------------------------------------------------------------------------

def test_endpoints_of_a_speculative_standin(standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready")
    assert h.call(server.url, "/health")[0] == 200
    status, info = h.call(server.url + "/", "/model_info")
    assert status == 200 and info["model_path"] == target and info["standin"] is True
    status, sinfo = h.call(server.url, "/server_info")
    assert status == 200 and sinfo["standin"] is True and sinfo["version"] == "0.5.23-standin"
    assert sinfo["speculative_algorithm"] == "DFLASH"
    status, gen = h.call(server.url, "/generate", method="POST",
                         body={"text": "one two three", "sampling_params": {"max_new_tokens": 12, "temperature": 0}})
    assert status == 200
    meta = gen["meta_info"]
    assert meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 12
    assert 1 <= meta["spec_verify_ct"] <= 12
    status, err = h.call(server.url, "/generate", method="POST", body={"sampling_params": {}})
    assert status == 400 and h.error_text(err)


def test_stream_generate_events_until_done(standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready")
    events = list(h.stream_generate(server.url, {"text": "hello world",
                                                 "sampling_params": {"max_new_tokens": 40, "temperature": 0}}))
    times = [t for t, _chunk in events]
    metas = [chunk["meta_info"] for _t, chunk in events]
    assert times == sorted(times)
    # one event per verify step, counts cumulative, the last one complete
    assert metas[-1]["completion_tokens"] == 40
    assert metas[-1]["spec_verify_ct"] == len(events)
    counts = [m["completion_tokens"] for m in metas]
    assert counts == sorted(counts) and counts[0] >= 1
    assert len(events) < 40  # speculative: several tokens in some steps (DFLASH, default accept mean 3.5)


def test_stream_generate_autoregressive_one_token_per_event(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    events = list(h.stream_generate(server.url, {"text": "x", "sampling_params": {"max_new_tokens": 5}}))
    assert [chunk["meta_info"]["completion_tokens"] for _t, chunk in events] == [1, 2, 3, 4, 5]


def test_api_key_bearer_only_when_set(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, api_key=API_KEY, wait="ready")
    # /health is open (as in SGLang); everything else needs the key
    assert h.call(server.url, "/health")[0] == 200
    status, data = h.call(server.url, "/model_info")
    assert status == 401 and data.get("error")
    assert h.call(server.url, "/model_info", api_key="wrong")[0] == 401
    status, info = h.call(server.url, "/model_info", api_key=API_KEY)
    assert status == 200 and info["model_path"] == target
    with pytest.raises(h.SGLangHTTPError) as exc:
        list(h.stream_generate(server.url, {"text": "x", "sampling_params": {"max_new_tokens": 2}}))
    assert exc.value.status == 401 and exc.value.url_path == "/generate"
    events = list(h.stream_generate(server.url, {"text": "x", "sampling_params": {"max_new_tokens": 2}},
                                    api_key=API_KEY))
    assert events[-1][1]["meta_info"]["completion_tokens"] == 2
    # the stand-in logs it itself, as SGLang 0.5.23 does (`server_args=` at INFO); nowhere else
    assert [line for line in server.log().splitlines() if API_KEY in line and "server_args=" not in line] == []


def test_stream_generate_bad_body_raises_with_status(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, wait="ready")
    with pytest.raises(h.SGLangHTTPError) as exc:
        list(h.stream_generate(server.url, {"sampling_params": {"max_new_tokens": 2}}))
    assert exc.value.status == 400 and "answered 400" in exc.value.msg


def test_wait_healthy_503_then_200(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, env={"GPUFLEET_STANDIN_LOAD_SECONDS": "3"}, wait="answering")
    res = h.wait_healthy(server.url, timeout=60, interval=0.2)
    assert res["last_status"] == 200
    assert res["polls"] >= 2 and res["waited"] > 0  # it saw the 503 of "loading" first


def test_wait_healthy_never_ready_times_out_naming_503(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    with pytest.raises(h.SGLangHTTPError) as exc:
        h.wait_healthy(server.url, timeout=1, interval=0.2)
    assert exc.value.status == 503 and exc.value.url_path == "/health"
    assert "did not answer 200 within 1s" in exc.value.msg and "last answer: 503" in exc.value.msg
