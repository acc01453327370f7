# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small HTTP client for a running SGLang server: the endpoints sglang_probe and sglang_bench use.

Private to the collection: not a public API, may change without notice.

Standard library only (urllib; the TLS policy is _common/http.py's ``ssl_context``), no Ansible imports: the
modules run it on the GPU host, where the server usually listens on loopback only.

* ``call()``: one JSON request; returns (status, data) for every HTTP answer, 2xx or not, so the
  caller decides what a 503 or a 404 means; raises ``SGLangHTTPError`` only when there is no usable
  answer (connection refused, timeout, a 2xx that is not JSON).
* ``stream_generate()``: ``POST /generate`` with ``stream: true``; yields each ``data: {...}`` event
  with the monotonic time it arrived (for time-to-first-token), until ``data: [DONE]``.
* ``wait_healthy()``: polls ``/health`` until it answers 200 or the timeout runs out.

The API key goes only into an ``Authorization: Bearer`` header (unredirected: urllib must not carry
it to wherever a redirect points), never into a URL or a message; anything a server echoes back is
scrubbed of it as well. SGLang 0.5.23's ``/server_info`` answers ``api_key``, ``admin_api_key`` and a
``launch_command`` holding both (srt/utils/common.py ``build_server_info``): ``call()`` drops those keys
from every JSON answer, at any depth, and masks their values wherever else they appear (``scrub``), so
no module result, message or report built from an answer can carry them.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from typing import Any, Callable, Iterator
from urllib import error as _urlerror
from urllib import parse as _urlparse
from urllib import request as _urlrequest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
# One TLS policy and one redirect guard for every client.
from ansible_collections.gpufleet.llm.plugins.module_utils._common.http import NoRedirect, ssl_context

DEFAULT_URL = "http://127.0.0.1:30000"
# How much of a non-JSON error body to quote in a message.
_SNIPPET = 300


class SGLangHTTPError(Exception):
    """No usable answer from the server. ``status`` is the HTTP status when there was one."""

    def __init__(self, msg, status=None, url_path=None):
        super(SGLangHTTPError, self).__init__(msg)
        self.msg = msg
        self.status = status
        self.url_path = url_path
        # wait_healthy() only: how long it waited and how many polls it made before giving up.
        self.polls = None
        self.waited = None

    def __str__(self):
        return self.msg


def validate_base_url(base_url):
    """The base URL without a trailing slash; raises SGLangHTTPError naming what is wrong."""
    if not isinstance(base_url, str) or not base_url.strip():
        raise SGLangHTTPError("url is empty; give the server's base URL, for example %s" % DEFAULT_URL)
    url = base_url.strip()
    try:
        parts = _urlparse.urlsplit(url)
        port = parts.port  # raises ValueError on a port that is not a number
    except ValueError as exc:
        raise SGLangHTTPError("url %r is not a valid URL (%s); use the form %s" % (url, exc, DEFAULT_URL))
    if parts.scheme not in ("http", "https"):
        raise SGLangHTTPError("url %r: scheme must be http or https (got %r); use the form %s"
                              % (url, parts.scheme or "", DEFAULT_URL))
    if not parts.hostname:
        raise SGLangHTTPError("url %r has no host; use the form %s" % (url, DEFAULT_URL))
    if parts.username is not None or parts.password is not None:
        # Credentials in a URL end up in messages and logs; the key has its own parameter.
        raise SGLangHTTPError("url must not contain credentials (user:password@); pass the API key as api_key")
    if parts.query or parts.fragment:
        raise SGLangHTTPError("url %s%s has a query or fragment; give only the base URL, for example %s"
                              % (parts.scheme + "://", parts.netloc, DEFAULT_URL))
    del port
    return url.rstrip("/")


def _opener(base_url, validate_certs, ca_path):
    handlers = [NoRedirect(), _urlrequest.ProxyHandler({})]  # loopback/cluster addresses: no proxy
    if base_url.startswith("https:"):
        handlers.append(_urlrequest.HTTPSHandler(context=ssl_context(validate_certs, ca_path)))
    return _urlrequest.build_opener(*handlers)


def _request(base_url, path, method, body, api_key, stream=False):
    data = None
    headers = {"Accept": "text/event-stream" if stream else "application/json"}
    if body is not None:
        data = json.dumps(body).encode("utf-8")
        headers["Content-Type"] = "application/json"
    req = _urlrequest.Request(base_url + path, data=data, method=method, headers=headers)
    if api_key:
        req.add_unredirected_header("Authorization", "Bearer %s" % api_key)
    return req


def _reason(exc):
    """A short text for a connection-level failure."""
    if isinstance(exc, _urlerror.URLError) and not isinstance(exc, _urlerror.HTTPError):
        exc = exc.reason if exc.reason is not None else exc
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, ssl.SSLError):
        return "TLS error: %s (set ca_path, or validate_certs=false for a self-signed lab certificate)" % exc
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens there: is the service running and is this its host:port?)"
    text = getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__
    return text


def _decode_error_body(raw):
    text = raw.decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        return data
    text = text.strip()
    return {"error": text[:_SNIPPET]} if text else None


def error_text(data):
    """The server's own error text from an error answer's JSON, or ''."""
    if not isinstance(data, dict):
        return ""
    err = data.get("error", data.get("detail", data.get("message", "")))
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err, sort_keys=True)
    return str(err)[:_SNIPPET] if err else ""


# Keys of SGLang 0.5.23's /server_info that hold its secrets (the key, the admin key, and the command
# line that names both): never passed on.
LEAKED_KEYS = frozenset(("api_key", "admin_api_key", "launch_command"))


def scrub(data: Any, *secrets: str | None) -> Any:
    """``data`` without LEAKED_KEYS (at any depth), with every form of their string values and of
    ``secrets`` masked in what is left."""
    found: list[str] = []

    def strip(node):
        if isinstance(node, dict):
            kept = {}
            for key, value in node.items():
                if key in LEAKED_KEYS:
                    if isinstance(value, str) and key != "launch_command":
                        found.append(value)
                    continue
                kept[key] = strip(value)
            return kept
        if isinstance(node, list):
            return [strip(item) for item in node]
        return node

    clean = strip(data)
    hidden = [secret for secret in (*found, *secrets) if secret and isinstance(secret, str)]
    if not hidden or not isinstance(clean, (dict, list)):
        return clean
    try:
        return json.loads(_secrets.mask(json.dumps(clean), *hidden))
    except ValueError:  # a secret so short that masking broke the JSON: the stripped data stays
        return clean


def call(base_url: str, path: str, *, method: str = "GET", body: Any = None, api_key: str | None = None,
         timeout: float = 30.0, validate_certs: bool = True, ca_path: str | None = None) -> tuple[int, Any]:
    """One JSON request. Returns ``(status, data)``; data is the decoded JSON (None for an empty body).

    Non-2xx answers are returned, with data = the error JSON (or ``{"error": <text>}``).
    Raises SGLangHTTPError on a bad URL, connection errors, timeouts and a 2xx that is not JSON.
    """
    base_url = validate_base_url(base_url)
    req = _request(base_url, path, method, body, api_key)
    try:
        with _opener(base_url, validate_certs, ca_path).open(req, timeout=timeout) as resp:
            status, raw = resp.status, resp.read()
    except _urlerror.HTTPError as exc:
        try:
            raw = exc.read()
        except (OSError, socket.timeout):
            raw = b""
        finally:
            exc.close()
        return exc.code, scrub(_decode_error_body(raw), api_key)
    except (_urlerror.URLError, OSError, socket.timeout, ssl.SSLError, http.client.HTTPException) as exc:
        what = _reason(exc)
        if what == "timed out":
            what = "no answer within %ss" % _fmt(timeout)
        raise SGLangHTTPError(_secrets.mask("%s %s%s: %s" % (method, base_url, path, what), api_key), None, path)
    if not raw.strip():
        return status, None
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError:
        snippet = _secrets.mask(raw.decode("utf-8", "replace").strip()[:_SNIPPET], api_key)
        raise SGLangHTTPError("%s %s%s answered %d with something that is not JSON (is this an SGLang server?): %r"
                              % (method, base_url, path, status, snippet), status, path)
    return status, scrub(data, api_key)


def stream_generate(base_url: str, body: dict | None, *, api_key: str | None = None, timeout: float = 600.0,
                    validate_certs: bool = True, ca_path: str | None = None) -> Iterator[tuple[float, Any]]:
    """``POST /generate`` streaming; yields ``(time.monotonic(), chunk)`` per ``data: {json}`` event.

    Stops at ``data: [DONE]``. Raises SGLangHTTPError on a non-2xx answer (with its status), on an
    ``{"error": ...}`` event, on a line that is not JSON, and when the stream ends without [DONE].
    ``timeout`` bounds each read, not the whole generation.
    """
    base_url = validate_base_url(base_url)
    path = "/generate"
    body = dict(body or {})
    body["stream"] = True
    req = _request(base_url, path, "POST", body, api_key, stream=True)
    try:
        resp = _opener(base_url, validate_certs, ca_path).open(req, timeout=timeout)
    except _urlerror.HTTPError as exc:
        try:
            data = _decode_error_body(exc.read())
        except (OSError, socket.timeout):
            data = None
        finally:
            exc.close()
        detail = error_text(data)
        detail = ": " + detail if detail else ""
        raise SGLangHTTPError(_secrets.mask("POST %s%s answered %d%s" % (base_url, path, exc.code, detail), api_key),
                              exc.code, path)
    except (_urlerror.URLError, OSError, socket.timeout, ssl.SSLError, http.client.HTTPException) as exc:
        what = _reason(exc)
        if what == "timed out":
            what = "no answer within %ss" % _fmt(timeout)
        raise SGLangHTTPError(_secrets.mask("POST %s%s: %s" % (base_url, path, what), api_key), None, path)
    with resp:
        status = resp.status
        while True:
            try:
                line = resp.readline()
            except (OSError, socket.timeout, http.client.HTTPException) as exc:
                what = _reason(exc)
                if what == "timed out":
                    what = "no event within %ss" % _fmt(timeout)
                raise SGLangHTTPError(_secrets.mask("POST %s%s stream: %s" % (base_url, path, what), api_key), status, path)
            now = time.monotonic()
            if not line:
                raise SGLangHTTPError("POST %s%s: the stream ended without 'data: [DONE]' (server stopped or "
                                      "restarted mid-request?)" % (base_url, path), status, path)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue  # blank separators, comments (": keep-alive"), other SSE fields
            payload = line[5:].strip()
            if payload == b"[DONE]":
                return
            try:
                chunk = json.loads(payload.decode("utf-8"))
            except ValueError:
                raise SGLangHTTPError(_secrets.mask("POST %s%s stream: an event that is not JSON: %r"
                                                    % (base_url, path, payload[:_SNIPPET]), api_key), status, path)
            if isinstance(chunk, dict) and "error" in chunk and "meta_info" not in chunk:
                raise SGLangHTTPError(_secrets.mask("POST %s%s stream: the server reported an error: %s"
                                                    % (base_url, path, error_text(chunk)), api_key), status, path)
            yield now, chunk


def _fmt(seconds):
    return ("%.1f" % seconds).rstrip("0").rstrip(".") if seconds is not None else "?"


def wait_healthy(base_url: str, *, timeout: float, interval: float, api_key: str | None = None,
                 validate_certs: bool = True, ca_path: str | None = None, path: str = "/health",
                 request_timeout: float = 30.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Poll ``path`` until it answers 200: returns ``dict(waited, polls, last_status)``.

    Any other answer (503 while loading), a refused connection (not started yet) or a timeout is
    retried every ``interval`` seconds until ``timeout`` seconds have passed; then SGLangHTTPError
    names the last status or error and the timeout. 401/403 are not retried: waiting cannot fix a
    key.
    """
    base_url = validate_base_url(base_url)
    if timeout < 0 or interval <= 0:
        raise SGLangHTTPError("timeout must be >= 0 and interval > 0 (got timeout=%s, interval=%s)"
                              % (timeout, interval), None, path)
    start = clock()
    polls = 0
    last_status = None
    last_error = None
    while True:
        remaining = timeout - (clock() - start)
        polls += 1
        try:
            status, data = call(base_url, path, api_key=api_key, validate_certs=validate_certs, ca_path=ca_path,
                                timeout=max(1.0, min(request_timeout, remaining if remaining > 0 else 1.0)))
        except SGLangHTTPError as exc:
            status, data, last_error = None, None, exc.msg
        else:
            last_status, last_error = status, None
            if status == 200:
                return dict(waited=round(clock() - start, 3), polls=polls, last_status=status)
            if status in (401, 403):
                detail = error_text(data)
                exc = SGLangHTTPError("GET %s%s answered %d (authentication%s): %s"
                                      % (base_url, path, status, ": " + detail if detail else "",
                                         "set api_key to the server's api-key" if not api_key else
                                         "the api_key given is not the server's api-key"), status, path)
                exc.polls, exc.waited = polls, round(clock() - start, 3)
                raise exc
        elapsed = clock() - start
        if elapsed >= timeout:
            if last_error is not None:
                last = "last error: %s" % last_error
            else:
                detail = error_text(data)
                last = "last answer: %s%s" % (last_status, " (%s)" % detail if detail else "")
            exc = SGLangHTTPError("GET %s%s did not answer 200 within %ss (%d polls every %ss); %s"
                                  % (base_url, path, _fmt(timeout), polls, _fmt(interval), last),
                                  last_status if last_error is None else None, path)
            exc.polls, exc.waited = polls, round(elapsed, 3)
            raise exc
        sleep(max(0.0, min(interval, timeout - elapsed)))
