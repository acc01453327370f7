# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_hub against a real HTTP server speaking the Hub's tree and revision API (stdlib, loopback)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._hub import client as _hub

COMMIT = "a" * 40
TREE = [
    {"type": "directory", "oid": "d" * 40, "size": 0, "path": "sub"},
    {"type": "file", "oid": "1" * 40, "size": 12, "path": "config.json"},
    {"type": "file", "oid": "2" * 40, "size": 99, "path": "sub/model.safetensors",
     "lfs": {"oid": "f" * 64, "size": 99, "pointerSize": 130}},
]


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path.startswith("/api/models/org/repo/revision/"):
            self._json({"id": "org/repo", "sha": COMMIT, "siblings": []})
        elif self.path.startswith("/api/models/org/repo/tree/%s" % COMMIT):
            self._json(TREE)
        else:
            self.send_error(404)


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_resolve_and_list(endpoint):
    api = _hub.hf_api(endpoint=endpoint, token=False)
    commit = _hub.resolve_commit(api, "org/repo", "main")
    assert commit == COMMIT
    files = _hub.list_revision(api, "org/repo", commit)
    assert files == [
        _hub.RemoteFile("config.json", 12, "1" * 40, None, False),
        _hub.RemoteFile("sub/model.safetensors", 99, "2" * 40, "f" * 64, True),
    ]
