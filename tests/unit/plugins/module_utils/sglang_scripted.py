# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A SCRIPTED SGLang server on loopback for sglang_bench's unit tests: it answers with recorded
shapes of SGLang 0.5.23's answers and logs every request, so a test can check what the benchmark
sent and in which order (warm-up, /flush_cache, measured requests).

Not the lab stand-in (that one models timing); this one has no delay model at all. The answer
shapes were read from SGLang 0.5.23's source (sglang/srt/entrypoints/http_server.py: /flush_cache
answers 200 with plain text, or 400 while requests run; openai/serving_chat.py: a streamed chat
ends with an ``sglext.spec_tokens_details`` chunk when ``return_spec_tokens_details`` is set, then
a ``usage`` chunk with ``stream_options.include_usage``, then ``[DONE]``;
managers/tokenizer_manager.py: ``meta_info.spec_verify_ct`` per request; /server_info has
``internal_states[0].avg_spec_accept_length`` and no ``spec_verify_ct_total``).

Each generation yields ``tokens`` tokens in ``steps`` verify steps (``ScriptedServer.tokens`` /
``steps``), in ``steps`` chunks.
"""
from __future__ import annotations

import http.server
import json
import threading


class ScriptedServer:
    """Start with ``ScriptedServer(...)``; ``.url``, ``.log`` (list of (method, path, body)), ``.stop()``."""

    def __init__(self, *, speculative=True, model_path="/nonexistent/model", tokens=12, steps=4, flush_status=200,
                 lifetime_accept=9.99):
        self.speculative, self.model_path = speculative, model_path
        self.tokens, self.steps, self.flush_status, self.lifetime_accept = tokens, steps, flush_status, lifetime_accept
        self.log = []
        self.lock = threading.Lock()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _body(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                return json.loads(raw) if raw else None

            def _send(self, status, data, ctype="application/json"):
                raw = data if isinstance(data, bytes) else json.dumps(data).encode()
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _events(self, events):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                for event in events:
                    self.wfile.write(b"data: " + json.dumps(event).encode() + b"\n\n")
                self.wfile.write(b"data: [DONE]\n\n")

            def do_GET(self):  # noqa: N802
                owner.record("GET", self.path, None)
                if self.path.startswith("/server_info"):
                    info = {"version": "0.5.23", "model_path": owner.model_path, "tokenizer_path": owner.model_path,
                            "speculative_algorithm": "DFLASH" if owner.speculative else None,
                            "internal_states": [{"avg_spec_accept_length": owner.lifetime_accept}
                                                if owner.speculative else {}]}
                    self._send(200, info)
                else:
                    self._send(404, {"detail": "Not Found"})

            def do_POST(self):  # noqa: N802
                body = self._body()
                owner.record("POST", self.path, body)
                path = self.path.split("?", 1)[0]
                if path == "/flush_cache":
                    if owner.flush_status == 200:
                        self._send(200, b"Cache flushed.\nPlease check backend logs for more details. (When there are "
                                        b"running or waiting requests, the operation will not be performed.)\n",
                                   "text/plain")
                    elif owner.flush_status == 400:
                        self._send(400, b"Flush cache failed.\n", "text/plain")
                    else:
                        self._send(owner.flush_status, {"detail": "Not Found"})
                elif path == "/generate":
                    self._events(owner.generate_events(body))
                elif path == "/v1/chat/completions":
                    self._events(owner.chat_events(body))
                else:
                    self._send(404, {"detail": "Not Found"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def record(self, method, path, body):
        with self.lock:
            self.log.append((method, path, body))

    def _split(self):
        steps = self.steps if self.speculative else self.tokens
        per = [self.tokens // steps + (1 if i < self.tokens % steps else 0) for i in range(steps)]
        return steps, per

    def generate_events(self, body):
        steps, per = self._split()
        events, done = [], 0
        for step in range(steps):
            done += per[step]
            meta = {"id": "r", "prompt_tokens": 5, "completion_tokens": done,
                    "finish_reason": {"type": "length", "length": done} if step == steps - 1 else None}
            if self.speculative:
                meta.update(spec_verify_ct=step + 1, spec_accept_length=done / float(step + 1))
            events.append({"text": "w " * done, "meta_info": meta})
        return events

    def chat_events(self, body):
        steps, per = self._split()
        events = [{"id": "c", "object": "chat.completion.chunk", "model": "default",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
        for step in range(steps):
            events.append({"id": "c", "object": "chat.completion.chunk", "model": "default",
                           "choices": [{"index": 0, "delta": {"content": "w " * per[step]}, "finish_reason": None}]})
        events.append({"id": "c", "object": "chat.completion.chunk", "model": "default",
                       "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        if self.speculative and (body or {}).get("return_spec_tokens_details"):
            details = {"spec_accept_rate": 0.5, "spec_accept_length": self.tokens / float(steps), "spec_verify_ct": steps}
            events.append({"id": "c", "object": "chat.completion.chunk", "model": "default", "choices": [],
                           "sglext": {"spec_tokens_details": details}})
        if ((body or {}).get("stream_options") or {}).get("include_usage"):
            events.append({"id": "c", "object": "chat.completion.chunk", "model": "default", "choices": [],
                           "usage": {"prompt_tokens": 9, "completion_tokens": self.tokens,
                                     "total_tokens": 9 + self.tokens}})
        return events

    def paths(self):
        """The logged request paths without their query, in order."""
        with self.lock:
            return [path.split("?", 1)[0] for _method, path, _body in self.log]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
