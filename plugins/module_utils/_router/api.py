# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The worker API of sglang-router 0.3.2, and a worker's own ``/v1/loads``.

Private to the collection: not a public API, may change without notice. Standard library only (urllib;
the TLS policy and the redirect guard are _common/http.py's).

What the router does, read in its source (sgl-model-gateway, the router's Rust crate) and checked against
the real 0.3.2 binary on loopback (tests/unit/plugins/module_utils/_router/):

* ``GET /workers`` -> ``{"workers": [{"id", "url", "is_healthy", "load", "model_id", ...}], "total", "stats"}``.
  A worker is listed only once its registration finished (``/health`` answered 2xx); one that stops
  answering stays listed with ``is_healthy: false``.
* ``POST /workers`` ``{"url", "api_key"}`` -> 202 ``{"worker_id", "location": "/workers/<id>"}`` (and a
  ``Location`` header): the registration runs in the background, retried until the router's
  ``--worker-startup-timeout-secs``. The id is new on every add: never keep it, look it up by URL.
* ``GET /workers/<id>`` of a registration still running -> the worker with ``job_status``
  (``{"status": "pending"}`` until the router's job queue takes it up, then ``"processing"``): what a
  timed-out add reports.
* ``DELETE /workers/<id>`` -> 202, the removal is queued: the worker leaves ``/workers`` when it ran, usually
  by the next listing but not always (404 for an unknown id).
* The whole ``/workers`` API needs ``Authorization: Bearer <--api-key>``; with ``--control-plane-api-keys``
  set it needs one of those keys with the admin role instead (the ``--api-key`` then answers 401, a user
  key 403).

Each key goes only into an ``Authorization`` header (unredirected) or the JSON body it belongs to, never
into a URL; every message and every echoed body is scrubbed of both keys (_common/secrets.py).
"""
from __future__ import annotations

import http.client
import json
import socket
import ssl
from urllib import error as _urlerror
from urllib import request as _urlrequest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._common.http import NoRedirect, ssl_context

_SNIPPET = 300


class Unreachable(ModuleFailure):
    """No HTTP answer at all (refused, timed out, TLS): ``refused`` says whether nothing listens there."""

    def __init__(self, msg, refused=False, **fields):
        super(Unreachable, self).__init__(msg, **fields)
        self.refused = refused


class Client(object):
    """One set of keys and TLS settings; every answer, 2xx or not, comes back as (status, headers, data)."""

    def __init__(self, *, router_api_key=None, api_key=None, validate_certs=True, ca_path=None, request_timeout=30.0):
        self.router_api_key = router_api_key or None
        self.api_key = api_key or None
        self.validate_certs = validate_certs
        self.ca_path = ca_path
        self.request_timeout = request_timeout

    def mask(self, text):
        return _secrets.mask(text, self.router_api_key, self.api_key)

    def call(self, base, path, *, method="GET", body=None, token=None):
        data = json.dumps(body).encode("utf-8") if body is not None else None
        req = _urlrequest.Request(base + path, data=data, method=method, headers={"Accept": "application/json"})
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if token:
            req.add_unredirected_header("Authorization", "Bearer %s" % token)
        handlers = [NoRedirect(), _urlrequest.ProxyHandler({})]  # cluster addresses: never through a proxy
        if base.startswith("https:"):
            handlers.append(_urlrequest.HTTPSHandler(context=ssl_context(self.validate_certs, self.ca_path)))
        try:
            with _urlrequest.build_opener(*handlers).open(req, timeout=self.request_timeout) as resp:
                return resp.status, resp.headers, self._decode(resp.read())
        except _urlerror.HTTPError as exc:
            try:
                raw = exc.read()
            except (OSError, socket.timeout, http.client.HTTPException):
                raw = b""
            finally:
                exc.close()
            return exc.code, exc.headers, self._decode(raw)
        except (_urlerror.URLError, OSError, socket.timeout, ssl.SSLError, http.client.HTTPException) as exc:
            reason, refused = _reason(exc, self.request_timeout)
            raise Unreachable(self.mask("%s %s%s: %s" % (method, base, path, reason)), refused=refused)

    def _decode(self, raw):
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return None
        try:
            data = json.loads(text)
        except ValueError:
            return {"error": self.mask(text[:_SNIPPET])}
        if self.router_api_key or self.api_key:
            data = json.loads(self.mask(json.dumps(data)))
        return data


def _reason(exc, timeout):
    if isinstance(exc, _urlerror.URLError) and not isinstance(exc, _urlerror.HTTPError) and exc.reason is not None:
        exc = exc.reason
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "no answer within %ss" % timeout, False
    if isinstance(exc, ssl.SSLError):
        return "TLS error: %s (set ca_path, or validate_certs=false for a self-signed lab certificate)" % exc, False
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (nothing listens there: is the service running, and is this its address and port?)", True
    return getattr(exc, "strerror", None) or str(exc) or exc.__class__.__name__, False


def error_text(data):
    """The error text of an answer's JSON (the router's ``{"error", "code"}``, FastAPI's ``detail``), or ''."""
    if not isinstance(data, dict):
        return ""
    err = data.get("error", data.get("detail", data.get("message", "")))
    if isinstance(err, dict):
        err = err.get("message") or json.dumps(err, sort_keys=True)
    code = data.get("code")
    text = str(err)[:_SNIPPET] if err else ""
    return "%s (%s)" % (text, code) if text and code else text


def _auth_failure(router, method, path, status, data, has_key):
    detail = error_text(data)
    fix = ("set router_api_key to the router's --api-key (sglang_router_api_key), or, when the router runs with "
           "--control-plane-api-keys, to one of those keys with the admin role" if not has_key else
           "router_api_key is not a key this router accepts for /workers: its --api-key (sglang_router_api_key), or "
           "an admin key of its --control-plane-api-keys (a user-role key answers 403)")
    return ModuleFailure("router %s answered %d to %s %s%s: %s" % (router, status, method, path,
                                                                   " (%s)" % detail if detail else "", fix),
                         router=router)


def _unexpected(router, method, path, status, data, fix):
    detail = error_text(data)
    text = "router %s answered %d to %s %s%s; %s" % (router, status, method, path, ": %s" % detail if detail else "", fix)
    return ModuleFailure(text, router=router)


def list_workers(client, router):
    """The router's ``workers`` list."""
    status, _headers, data = client.call(router, "/workers", token=client.router_api_key)
    if status in (401, 403):
        raise _auth_failure(router, "GET", "/workers", status, data, bool(client.router_api_key))
    if status != 200 or not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise _unexpected(router, "GET", "/workers", status, data,
                          "is this an sglang-router (0.3.x) and its base URL? The worker API is GET/POST /workers")
    return [w for w in data["workers"] if isinstance(w, dict)]


def add_worker(client, router, url):
    """``POST /workers``: the id the router gave the registration it queued (for its job status)."""
    body = {"url": url}
    if client.api_key:
        body["api_key"] = client.api_key
    status, headers, data = client.call(router, "/workers", method="POST", body=body, token=client.router_api_key)
    if status in (401, 403):
        raise _auth_failure(router, "POST", "/workers", status, data, bool(client.router_api_key))
    if status not in (200, 201, 202):
        raise _unexpected(router, "POST", "/workers", status, data,
                          "the router did not queue the worker; see its journal (journalctl -u sglang-router)")
    worker_id = data.get("worker_id") if isinstance(data, dict) else None
    location = headers.get("Location") if headers is not None else None
    if not worker_id and location:
        worker_id = location.rstrip("/").rsplit("/", 1)[-1]
    return worker_id


def remove_worker(client, router, worker_id):
    """``DELETE /workers/<id>``; False when the router no longer knew that id (removed meanwhile)."""
    path = "/workers/%s" % worker_id
    status, _headers, data = client.call(router, path, method="DELETE", token=client.router_api_key)
    if status in (401, 403):
        raise _auth_failure(router, "DELETE", path, status, data, bool(client.router_api_key))
    if status == 404:
        return False
    if status not in (200, 202, 204):
        raise _unexpected(router, "DELETE", path, status, data, "see the router's journal (journalctl -u sglang-router)")
    return True


def job_status(client, router, worker_id):
    """What the router says of a registration it queued (``job_status`` of ``GET /workers/<id>``), or None."""
    try:
        status, _headers, data = client.call(router, "/workers/%s" % worker_id, token=client.router_api_key)
    except Unreachable:
        return None
    if status != 200 or not isinstance(data, dict):
        return None
    job = data.get("job_status")
    return job if isinstance(job, dict) else None


def read_loads(client, base):
    """SGLang's ``GET /v1/loads?include=core`` on a worker: {running, waiting, dp_ranks}.

    SGLang 0.5.23 (sglang/srt/entrypoints/v1_loads.py) answers ``{"timestamp", "version", "accelerator",
    "num_accelerators", "loads": [...]}`` with one entry per data-parallel rank, each holding
    ``num_running_reqs`` and ``num_waiting_reqs`` (sglang/srt/managers/load_snapshot.py). The route is
    behind the server's api-key, so the worker's ``api_key`` is sent.
    """
    status, _headers, data = client.call(base, "/v1/loads?include=core", token=client.api_key)
    if status in (401, 403):
        raise ModuleFailure("GET %s/v1/loads answered %d: %s" % (
            base, status, "set api_key to the server's api-key" if not client.api_key else
            "api_key is not this server's api-key (drain_url must be the same server as url)"))
    if status == 404:
        raise ModuleFailure("GET %s/v1/loads answered 404: this server does not report its load (SGLang 0.5.23 "
                            "has /v1/loads; older ones do not), so it cannot be drained; set drain=false "
                            "(sglang_router_drain) or check drain_url" % base)
    loads = data.get("loads") if isinstance(data, dict) else None
    if status != 200 or not isinstance(loads, list):
        detail = error_text(data)
        raise ModuleFailure("GET %s/v1/loads answered %d%s, not SGLang's load report ({\"loads\": [...]}); check "
                            "drain_url" % (base, status, ": %s" % detail if detail else ""))
    running = waiting = 0
    for entry in loads:
        if isinstance(entry, dict):
            running += _count(entry.get("num_running_reqs"))
            waiting += _count(entry.get("num_waiting_reqs"))
    return {"running": running, "waiting": waiting, "dp_ranks": len(loads)}


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
