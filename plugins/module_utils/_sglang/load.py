# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The load generator: streamed generations at a set concurrency, one record per request.

Private to the collection: not a public API, may change without notice.

Standard library only, no Ansible imports (the modules run this on the GPU host). sglang_bench
measures with it (its levels, repeats and aggregates are _bench's); sglang_probe draws its
accept-length sample with it (accept.py), so the gate and the benchmark send the same requests.

* ``build_requests()``: requests taking the prompts in turn.
* ``run_level()``: one concurrency level: one thread per request slot, each streaming
  ``POST /generate`` or, for chat models, ``POST /v1/chat/completions`` (chat.py; ``temperature``
  as given, ``ignore_eos`` so every request produces its full ``max_new_tokens``) and recording
  time to first token, end-to-end latency, output tokens and the request's accept length,
  ``completion_tokens / spec_verify_ct`` from the request's own answer.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import chat
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as _sglang_http

# Seconds one request may take in all: the default of sglang_bench's option and of the load generator.
DEFAULT_REQUEST_TIMEOUT = 600.0


class LoadError(Exception):
    """The load generator could not finish (a request over its time, threads that never returned)."""


def build_requests(prompts, num_requests, max_new_tokens):
    """``num_requests`` requests taking the prompts in turn (a prompt's own max_new_tokens wins)."""
    out = []
    for index in range(num_requests):
        prompt = prompts[index % len(prompts)]
        out.append(dict(index=index, prompt=prompt["prompt"], category=prompt["category"],
                        max_new_tokens=prompt.get("max_new_tokens", max_new_tokens)))
    return out


def as_number(value: Any) -> int | float | None:
    """``value`` when it is a JSON number (not a bool), else None: what a server reports may be absent."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value


def one_request(base_url: str, request: dict, *, api_key: str | None = None,
                request_timeout: float = DEFAULT_REQUEST_TIMEOUT, validate_certs: bool = True,
                ca_path: str | None = None, clock: Callable[[], float] = time.monotonic,
                api: str = "generate", temperature: float = 0.0) -> dict[str, Any]:
    """Stream one generation (``api`` generate or chat); returns its record (``ok`` False with ``error`` on failure)."""
    record = dict(index=request["index"], category=request["category"], max_new_tokens=request["max_new_tokens"],
                  ok=False, error=None, ttft=None, latency=None, prompt_tokens=None, output_tokens=0,
                  spec_verify_ct=None, accept_length=None, chunks=0, api=api)
    start = clock()
    state = {}
    client = dict(api_key=api_key, timeout=request_timeout, validate_certs=validate_certs, ca_path=ca_path)
    if api == "chat":
        stream = chat.stream_chat(base_url, chat.chat_body(request, temperature), **client)
        progress = chat.chat_progress
    else:
        stream = _sglang_http.stream_generate(base_url, chat.generate_body(request, temperature), **client)
        progress = chat.generate_progress
    try:
        for when, chunk in stream:
            progress(chunk, state)
            record["chunks"] += 1
            if record["ttft"] is None and state.get("first_token"):
                record["ttft"] = when - start
            # The per-read timeout of the stream never fires while steps keep coming: bound the
            # whole request here, so one endless generation cannot hold the benchmark (and a
            # server on its baseline config) forever.
            if when - start > request_timeout:
                raise LoadError("request %d ran longer than request_timeout (%ss); raise request_timeout or "
                                "lower max_new_tokens" % (request["index"], request_timeout))
    except (_sglang_http.SGLangHTTPError, LoadError) as exc:
        record["error"] = str(exc)
        record["latency"] = clock() - start
        return record
    finally:
        stream.close()
    record["latency"] = clock() - start
    record["prompt_tokens"] = state.get("prompt_tokens")
    record["output_tokens"] = int(state.get("completion_tokens") or 0)
    verify = as_number(state.get("spec_verify_ct"))
    record["spec_verify_ct"] = verify
    if verify:
        record["accept_length"] = record["output_tokens"] / float(verify)
    if record["ttft"] is None:
        record["ttft"] = record["latency"]
    record["finish_reason"] = state.get("finish_reason")
    if record["output_tokens"] < 1:
        record["error"] = "the server finished request %d without generating a token" % request["index"]
        return record
    record["ok"] = True
    return record


def run_level(base_url: str, requests: list[dict], concurrency: int, *, api_key: str | None = None,
              request_timeout: float = DEFAULT_REQUEST_TIMEOUT, validate_certs: bool = True,
              ca_path: str | None = None, clock: Callable[[], float] = time.monotonic,
              stop_on_error: bool = True, api: str = "generate", temperature: float = 0.0
              ) -> tuple[list[dict], float]:
    """Run ``requests`` with ``concurrency`` slots; returns (records in request order, wall seconds).

    One thread per slot, each taking the next request as soon as its previous one finished, so the
    server sees exactly ``concurrency`` requests in flight until the queue runs dry. With
    ``stop_on_error`` a failed request stops the slots from taking new requests (a server that
    went away should not be hammered for the rest of the queue).
    """
    lock = threading.Lock()
    queue = list(requests)
    records = []
    failed = threading.Event()

    def slot():
        while True:
            with lock:
                if not queue or (stop_on_error and failed.is_set()):
                    return
                request = queue.pop(0)
            record = one_request(base_url, request, api_key=api_key, request_timeout=request_timeout,
                                 validate_certs=validate_certs, ca_path=ca_path, clock=clock, api=api,
                                 temperature=temperature)
            record["concurrency"] = concurrency
            with lock:
                records.append(record)
            if not record["ok"]:
                failed.set()

    threads = [threading.Thread(target=slot, name="bench-slot-%d" % i) for i in range(min(concurrency, len(queue)))]
    start = clock()
    for thread in threads:
        thread.daemon = True  # a hung request must not keep the module process alive after a failure
        thread.start()
    # Bounded: every request is bounded by request_timeout (plus the read timeout of its last chunk).
    limit = request_timeout * 2 + 5
    for thread in threads:
        remaining = limit * (len(requests) // max(1, concurrency) + 1) - (clock() - start)
        thread.join(max(1.0, remaining))
    wall = clock() - start
    if any(t.is_alive() for t in threads):
        raise LoadError("the load generator's threads did not finish within request_timeout bounds; the server "
                        "stopped answering mid-stream?")
    records.sort(key=lambda r: r["index"])
    return records, wall
