# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang 0.5.23 leaks its keys (issue 22 item 4): ``/server_info`` answers ``api_key`` and
``admin_api_key`` as set, plus a ``launch_command`` naming both (srt/utils/common.py
build_server_info), and the journal gets ``server_args={... 'api_key': ...}`` at INFO
(srt/entrypoints/engine.py). The lab's stand-in now leaks them the same way; these tests feed that
leaking server to our modules and check that neither key reaches a module result, message or quoted
journal line, even a key the module was never given (the admin key below).
"""
from __future__ import annotations

import json
import os

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import client as _http
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import unit as _unit
from ansible_collections.gpufleet.llm.plugins.modules import sglang_bench, sglang_probe
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    standin_factory)

API_KEY = "sk-lab-leak-test-API-key-0123"  # lab-only, fake
ADMIN_KEY = "sk-lab-leak-test-ADMIN-key-4567"  # lab-only, fake
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
PROMPTS = os.path.join(ROOT, "playbooks", "files", "bench-prompts.jsonl")


def _leaking(standin_factory, golden):
    target, drafter = os.path.join(golden, "target"), os.path.join(golden, "drafter")
    server = standin_factory(target, drafter=drafter, api_key=API_KEY, options={"admin-api-key": ADMIN_KEY},
                             wait="ready")
    raw = _raw_server_info(server.url)
    # the stand-in leaks as SGLang 0.5.23 does: otherwise these tests would prove nothing
    assert raw["api_key"] == API_KEY and raw["admin_api_key"] == ADMIN_KEY
    assert "--api-key %s" % API_KEY in raw["launch_command"] and ADMIN_KEY in raw["launch_command"]
    return server, target


def _raw_server_info(url):
    import urllib.request  # pylint: disable=import-outside-toplevel

    req = urllib.request.Request(url + "/server_info", headers={"Authorization": "Bearer %s" % API_KEY})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _clean(obj):
    text = json.dumps(obj)
    return API_KEY not in text and ADMIN_KEY not in text and "launch_command" not in text


def test_client_drops_the_leaked_keys(standin_factory, golden):
    server, target = _leaking(standin_factory, golden)
    status, info = _http.call(server.url, "/server_info", api_key=API_KEY)
    assert status == 200 and info["model_path"] == target and info["standin"] is True
    assert not {"api_key", "admin_api_key", "launch_command"} & set(info)
    assert _clean(info)
    # also where the key shows up elsewhere (nested, as a PD server nests its decode side) and in errors
    nested = _http.scrub({"decode": [{"api_key": "k-1234567", "note": "run with k-1234567"}], "x": "k-1234567"})
    assert nested == {"decode": [{"note": "run with ********"}], "x": "********"}
    state = bench.server_state(server.url, api_key=API_KEY)
    assert state["speculative_algorithm"] == "DFLASH" and _clean(state)


def test_probe_result_never_carries_the_keys(capsys, standin_factory, golden):
    server, target = _leaking(standin_factory, golden)
    for check_mode in (False, True):
        res = run_module(sglang_probe.main, capsys, {"url": server.url, "api_key": API_KEY, "expect_model_path": target,
                                                     "min_accept_length": 1.5, "interval": 0.2, "timeout": 60},
                         check_mode=check_mode, forbidden=ADMIN_KEY)
        assert res["_rc"] == 0, res.get("msg")
        assert res["speculative_algorithm"] == "DFLASH" and _clean(res)


def test_bench_result_never_carries_the_keys(capsys, standin_factory, golden):
    server, _target = _leaking(standin_factory, golden)
    res = run_module(sglang_bench.main, capsys, {"url": server.url, "api_key": API_KEY, "admin_api_key": ADMIN_KEY,
                                                 "prompts": PROMPTS, "concurrency": [1], "num_requests": 2,
                                                 "repeats": 1, "max_new_tokens": 8},
                     forbidden=ADMIN_KEY)
    assert res["_rc"] == 0, res.get("msg")
    assert res["server"]["standin"] is True and _clean(res)


def test_journal_quotes_mask_keys_the_module_was_not_given(standin_factory, golden):
    server, _target = _leaking(standin_factory, golden)
    line = next(line for line in server.log().splitlines() if "server_args=" in line)
    assert API_KEY in line and ADMIN_KEY in line  # the stand-in's journal line, as SGLang's
    for text in (line, line[:line.index(ADMIN_KEY) + 5], "sglang ... --api-key %s --admin-api-key=%s" % (API_KEY, ADMIN_KEY)):
        out = _unit.scrub_journal(text)
        assert API_KEY[:12] not in out and ADMIN_KEY[:12] not in out, out
    assert "'api_key': '********'" in _unit.scrub_journal(line)
    assert _unit.scrub_journal("'api_key': None, api_key=None") == "'api_key': None, api_key=None"
