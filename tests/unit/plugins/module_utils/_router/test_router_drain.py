# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The drain against the lab's SGLang STAND-IN (not SGLang: no GPU here), whose /v1/loads counts its running and
waiting requests as SGLang 0.5.23's does, behind the REAL sglang-router 0.3.2. The stand-in's stall fault
(GPUFLEET_STANDIN_STALL_FILE: while the file exists its scheduler produces nothing) holds a request in flight for
as long as the test wants, so the order of events is driven by the test, never by the clock."""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.request

from ansible_collections.gpufleet.llm.plugins.module_utils._router import api, worker
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.router_env import (  # noqa: F401 pylint: disable=unused-import
    until, ROUTER_KEY, WORKER_KEY, router_factory, router_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import standin_factory  # noqa: F401 pylint: disable=unused-import


def _stream(url, key, out):
    """One streaming /generate of 8 tokens; ``out`` gets its events and whether [DONE] came."""
    body = json.dumps({"text": "The capital of France is", "stream": True,
                       "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}).encode()
    req = urllib.request.Request(url + "/generate", data=body, method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer %s" % key})
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp:
            line = line.strip()
            if line == b"data: [DONE]":
                out["done"] = True
            elif line.startswith(b"data:"):
                out.setdefault("events", []).append(json.loads(line[5:]))
    out["ended"] = time.monotonic()


def test_drain_waits_for_the_request_in_flight(router_factory, standin_factory, golden, tmp_path):
    stall = str(tmp_path / "stall")
    server = standin_factory(os.path.join(golden, "target"), api_key=WORKER_KEY, wait="ready",
                             env={"GPUFLEET_STANDIN_STALL_FILE": stall})
    router = router_factory()
    params = dict(routers=[router.url], router_api_key=ROUTER_KEY, url=server.url, api_key=WORKER_KEY,
                  state="present", wait=True, timeout=30, min_healthy=0, drain=False, drain_url=None,
                  drain_timeout=60, validate_certs=True, ca_path=None)
    assert worker.run(params)["changed"] is True
    client = api.Client(api_key=WORKER_KEY)
    with open(stall, "w"):
        pass
    stream = {}
    streamer = threading.Thread(target=_stream, args=(server.url, WORKER_KEY, stream), daemon=True)
    streamer.start()
    until(lambda: api.read_loads(client, server.url)["running"] == 1, "request in flight")
    result = {}

    def remove():
        result.update(worker.run(dict(params, state="absent", drain=True)))
        result["returned"] = time.monotonic()

    remover = threading.Thread(target=remove, daemon=True)
    remover.start()
    until(lambda: not router.workers(), "removal from the router")
    # out of the router, but the request it holds is stalled: the drain must still be waiting
    assert remover.is_alive() and "returned" not in result
    assert api.read_loads(client, server.url)["running"] == 1
    os.unlink(stall)
    remover.join(60)
    streamer.join(60)
    assert result["changed"] is True and result["drained"] is True
    assert result["loads"]["running"] == 0 and result["loads"]["waiting"] == 0 and result["loads"]["polls"] >= 3
    # the request ran to its end, and the drain returned only after it had
    assert stream.get("done") is True and stream["events"][-1]["meta_info"]["finish_reason"]["type"] == "length"
    assert stream["ended"] <= result["returned"]
