# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small Range-capable HTTP server standing in for a peer's server in hf_snapshot's unit tests.

It serves one directory (a peer's copy of a commit directory) at ``/`` with GET/HEAD, single
Ranges and a bearer token, like peer_serve's nginx does; the fleet integration target tests the
real nginx. Faults are driven by bytes and events, never by time:

- ``corrupt``: every body byte is flipped (same length: only the hash can tell);
- ``die_after``: after that many body bytes the connection is closed and the server stops
  listening (a peer that dies mid-file: later connections are refused);
- ``publish_on_miss``: {path: source file}; the first request that misses ``path`` gets its 404,
  then the file is renamed into the tree (the owner publishes it: an event the module must wait for);
- ``fail_first``: {"status": 503, "count": N, "methods": ("GET",), "paths": None}: the first N
  requests that match (method, and path when ``paths`` is given) get that status (``Retry-After``
  with ``retry_after``); then the peer serves (a peer that is briefly overloaded).

``log`` records each request (method, path, status, body bytes, whether the token was right) once it
is answered; ``requests`` counts them as they arrive (before any answer, so a test that asserts it
after the client got its answers never races the server's thread).
"""
from __future__ import annotations

import os
import re
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class PeerServer(object):
    def __init__(self, root, token, *, host="127.0.0.3", corrupt=False, die_after=None, publish_on_miss=None,
                 fail_first=None):
        self.root = str(root)
        self.token = token
        self.corrupt = corrupt
        self.die_after = die_after
        self.publish_on_miss = dict(publish_on_miss or {})
        self.fail_first = dict(fail_first or {})
        self.failures_left = self.fail_first.get("count", 0)
        self.log = []
        self.requests = 0
        self.lock = threading.Lock()
        self.sent = 0
        self.stopped = False
        self.server = _QuietServer((host, 0), _handler(self))
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://%s:%d/" % (host, self.server.server_address[1])

    def stop(self):
        if not self.stopped:
            self.stopped = True
            self.server.shutdown()
            self.server.server_close()

    def status(self, state, failed=()):
        import json  # pylint: disable=import-outside-toplevel

        meta = os.path.join(self.root, ".gpufleet")
        os.makedirs(meta, exist_ok=True)
        with open(os.path.join(meta, "peer-status.json"), "w") as handle:
            json.dump({"state": state, "failed": list(failed)}, handle)

    def bytes_sent(self):
        return sum(e["bytes"] for e in self.log)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # aria2 closes connections mid-body when it re-splits: not an error of the test


def _handler(peer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # noqa: D401 - quiet: the test reads peer.log
            pass

        def do_HEAD(self):  # noqa: N802
            self._serve(body=False)

        def do_GET(self):  # noqa: N802
            self._serve(body=True)

        def _entry(self, status, sent=0):
            peer.log.append({"method": self.command, "path": self.path, "status": status, "bytes": sent,
                             "auth_ok": self.headers.get("Authorization") == "Bearer %s" % peer.token})

        def _answer(self, status):
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()
            self._entry(status)

        def _serve(self, body):
            with peer.lock:
                peer.requests += 1
            if self.headers.get("Authorization") != "Bearer %s" % peer.token:
                return self._answer(401)
            rel = urllib.parse.unquote(self.path.lstrip("/"))
            if self._fail_now(rel):
                return None
            path = os.path.join(peer.root, rel)
            if not os.path.isfile(path):
                self._answer(404)
                source = peer.publish_on_miss.pop(rel, None)
                if source is not None:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    os.rename(source, path)
                return None
            size = os.path.getsize(path)
            start, end = 0, size - 1
            match = re.match(r"^bytes=(\d+)-(\d*)$", self.headers.get("Range") or "")
            if match:
                start = int(match.group(1))
                end = min(end, int(match.group(2))) if match.group(2) else end
                self.send_response(206)
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end, size))
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(end - start + 1))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            sent = self._body(path, start, end) if body else 0
            self._entry(206 if match else 200, sent)
            return None

        def _fail_now(self, rel):
            rule = peer.fail_first
            if not rule or self.command not in rule.get("methods", ("GET",)):
                return False
            if rule.get("paths") is not None and rel not in rule["paths"]:
                return False
            with peer.lock:
                if peer.failures_left <= 0:
                    return False
                peer.failures_left -= 1
            self.send_response(rule.get("status", 503))
            self.send_header("Content-Length", "0")
            if rule.get("retry_after") is not None:
                self.send_header("Retry-After", str(rule["retry_after"]))
            self.end_headers()
            self._entry(rule.get("status", 503))
            return True

        def _body(self, path, start, end):
            sent = 0
            with open(path, "rb") as handle:
                handle.seek(start)
                left = end - start + 1
                while left > 0:
                    data = handle.read(min(left, 65536))
                    if not data:
                        break
                    if peer.corrupt:
                        data = bytes(b ^ 0xFF for b in data)
                    with peer.lock:
                        if peer.die_after is not None and peer.sent + len(data) > peer.die_after:
                            data = data[:max(0, peer.die_after - peer.sent)]
                            peer.sent += len(data)
                            self.wfile.write(data)
                            self._die()
                            return sent + len(data)
                        peer.sent += len(data)
                    self.wfile.write(data)
                    sent += len(data)
                    left -= len(data)
            return sent

        def _die(self):
            # the peer dies mid-file: this connection ends now, and nothing listens any more
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            threading.Thread(target=peer.stop, daemon=True).start()

    return Handler
