# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_bench module end to end, in-process, against the lab's SGLang STAND-IN on loopback
(tests/unit/plugins/standin.py). The stand-in is not SGLang and has no GPU: its figures come from
its open delay model and say nothing about GPU performance.

engine=bench_serving runs `<python> -m sglang.bench_serving`; SGLang's real tool needs a tokenizer
from the Hub, so here `python` is a wrapper whose PYTHONPATH holds a fake `sglang.bench_serving`
that checks the arguments it is given and writes the recorded result fixture to --output-file.
"""
from __future__ import annotations

import json
import os
import stat
import sys
import textwrap

from ansible_collections.gpufleet.llm.plugins.modules import sglang_bench
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    ROOT, free_port, standin_factory)

API_KEY = "sk-lab-bench-fake-KEY-0123456789"  # lab-only, fake
PROMPTS = os.path.join(ROOT, "playbooks", "files", "bench-prompts.jsonl")
FIXTURE = os.path.join(ROOT, "tests", "unit", "plugins", "module_utils", "fixtures",
                       "sglang_bench_serving_result.jsonl")


def run(capsys, args, check_mode=False):
    return run_module(sglang_bench.main, capsys, args, check_mode=check_mode, forbidden=API_KEY)


def _paths(golden):
    return os.path.join(golden, "target"), os.path.join(golden, "drafter")


def test_speculative_run(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, api_key=API_KEY, wait="ready")
    res = run(capsys, {"url": server.url, "api_key": API_KEY, "prompts": PROMPTS, "concurrency": [1, 4],
                       "num_requests": 8, "max_new_tokens": 24})
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is False and res["label"] == "spec" and res["engine"] == "builtin"
    assert res["server"]["standin"] is True and res["server"]["speculative_algorithm"] == "DFLASH"
    # ansible-core 2.19 wraps warnings in structures: look at their text
    assert "stand-in" in json.dumps(res["warnings"]) and "say nothing about GPU" in json.dumps(res["warnings"])
    assert [lvl["concurrency"] for lvl in res["levels"]] == [1, 4]
    assert len(res["records"]) == 16 * 3 and all(r["ok"] for r in res["records"])
    for level in res["levels"]:
        assert level["succeeded"] == 8 * 3 and level["output_tokens"] == 8 * 24 * 3
        assert level["accept_length"] > 1.0
        assert level["accept_length_source"] == "requests" and len(level["repeats"]) == 3  # the default
        for key in ("p50", "p90", "p99"):
            assert level["latency_s"][key] > 0 and level["ttft_s"][key] > 0
    assert res["workload"]["categories"] == {"chat": 10, "code": 10, "math": 10}


def test_check_mode_sends_no_load(capsys):
    # nothing listens on this port: check mode must not even try
    res = run(capsys, {"url": "http://127.0.0.1:%d" % free_port(), "prompts": PROMPTS, "concurrency": [2]},
              check_mode=True)
    assert res["_rc"] == 0, res.get("msg")
    assert res["changed"] is False and "levels" not in res
    assert res["workload"]["num_requests"] == 32 and res["workload"]["prompt_count"] == 30


def test_check_mode_still_validates(capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    res = run(capsys, {"prompts": str(empty)}, check_mode=True)
    assert res["_rc"] == 1 and "has no prompts" in res["msg"]


def test_bad_inputs_fail_clearly(capsys, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    res = run(capsys, {"prompts": str(empty)})
    assert res["_rc"] == 1 and "has no prompts" in res["msg"] and "default set" in res["msg"]
    res = run(capsys, {"prompts": PROMPTS, "concurrency": [0, 8]})
    assert res["_rc"] == 1 and "concurrency levels must be integers >= 1 (got 0)" in res["msg"]
    res = run(capsys, {"prompts": PROMPTS, "num_requests": 0, "url": "ftp://host"})
    assert res["_rc"] == 1 and "num_requests must be >= 1" in res["msg"] and "scheme must be http" in res["msg"]


def test_connection_refused(capsys):
    res = run(capsys, {"url": "http://127.0.0.1:%d" % free_port(), "prompts": PROMPTS})
    assert res["_rc"] == 1 and "connection refused" in res["msg"] and "/server_info" in res["msg"]


def test_label_must_match_the_server(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    plain = standin_factory(target, wait="ready")
    res = run(capsys, {"url": plain.url, "prompts": PROMPTS, "label": "spec"})
    assert res["_rc"] == 1 and "runs without speculative decoding" in res["msg"]
    spec = standin_factory(target, drafter=drafter, wait="ready")
    res = run(capsys, {"url": spec.url, "prompts": PROMPTS, "label": "baseline"})
    assert res["_rc"] == 1 and "still runs speculative decoding" in res["msg"] and "drop-in" in res["msg"]


def test_baseline_run(capsys, standin_factory, golden):
    target = _paths(golden)[0]
    server = standin_factory(target, wait="ready")
    res = run(capsys, {"url": server.url, "prompts": PROMPTS, "label": "baseline", "concurrency": [2],
                       "num_requests": 4, "max_new_tokens": 8})
    assert res["_rc"] == 0, res.get("msg")
    level = res["levels"][0]
    assert level["accept_length"] is None and level["server_accept_length"] is None


def test_workload_failing_midway_fails_with_partial_results(capsys, standin_factory, golden, tmp_path):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready", env={"GPUFLEET_STANDIN_STEP_MS": "40"})
    # the first request is short, the second outlasts request_timeout (~110 steps x 48 ms)
    prompts = tmp_path / "two.jsonl"
    prompts.write_text(json.dumps({"prompt": "say hi", "category": "chat"}) + "\n" +
                       json.dumps({"prompt": "count to a thousand", "category": "math", "max_new_tokens": 400}) + "\n")
    res = run(capsys, {"url": server.url, "prompts": str(prompts), "concurrency": [1, 2], "num_requests": 2,
                       "max_new_tokens": 2, "request_timeout": 1.5})
    assert res["_rc"] == 1
    assert "1 of 2 requests failed at concurrency 1" in res["msg"] and "request_timeout" in res["msg"]
    assert len(res["levels"]) == 1 and [r["ok"] for r in res["records"]] == [True, False]


FAKE_BENCH_SERVING = textwrap.dedent('''\
    """A FAKE sglang.bench_serving for the unit tests: checks its argv, writes the recorded result."""
    import argparse, json, os, sys
    p = argparse.ArgumentParser()
    for opt in ("--backend", "--base-url", "--dataset-name", "--dataset-path", "--num-prompts",
                "--sharegpt-output-len", "--max-concurrency", "--request-rate", "--output-file", "--seed"):
        p.add_argument(opt)
    p.add_argument("--extra-request-body")
    p.add_argument("--temperature", type=float)
    p.add_argument("--warmup-requests")
    p.add_argument("--flush-cache", action="store_true")
    p.add_argument("--output-details", action="store_true")
    p.add_argument("--disable-tqdm", action="store_true")
    a = p.parse_args()
    assert a.backend in ("sglang", "sglang-oai-chat") and a.dataset_name == "sharegpt", a
    assert a.flush_cache and int(a.warmup_requests) >= 1 and a.temperature is not None, a
    data = json.load(open(a.dataset_path))
    assert len(data) == int(a.num_prompts) and data[0]["conversations"][0]["from"] == "human"
    assert os.environ.get("OPENAI_API_KEY") == os.environ["FAKE_EXPECT_KEY"], "key not passed in the environment"
    lines = [l for l in open(os.environ["FAKE_FIXTURE"]) if l.startswith("{")]
    result = json.loads(lines[-1])
    result["max_concurrency"] = int(a.max_concurrency)
    result["sharegpt_output_len"] = int(a.sharegpt_output_len)
    with open(a.output_file, "a") as out:
        out.write(json.dumps(result) + "\\n")
    print("fake bench_serving done")
''')


def _fake_python(tmp_path, expect_key):
    pkg = tmp_path / "fakesite" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "bench_serving.py").write_text(FAKE_BENCH_SERVING)
    wrapper = tmp_path / "python-with-fake-sglang"
    wrapper.write_text("#!/bin/sh\nexport PYTHONPATH=%s FAKE_FIXTURE=%s FAKE_EXPECT_KEY=%s\nexec %s \"$@\"\n"
                       % (tmp_path / "fakesite", FIXTURE, expect_key, sys.executable))
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_bench_serving_engine(capsys, tmp_path, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, api_key=API_KEY, wait="ready")
    python = _fake_python(tmp_path, API_KEY)
    res = run(capsys, {"url": server.url, "api_key": API_KEY, "prompts": PROMPTS, "engine": "bench_serving",
                       "python": python, "concurrency": [1, 4], "num_requests": 8, "max_new_tokens": 256})
    assert res["_rc"] == 0, res.get("msg")
    assert [lvl["concurrency"] for lvl in res["levels"]] == [1, 4]
    # the deprecated module saves no per-request figures: the lifetime 3.37 is kept as the server's only
    assert all(lvl["source"] == "bench_serving" and lvl["server_accept_length"] == 3.37 and lvl["accept_length"] is None
               for lvl in res["levels"])
    assert len(res["records"]) == 16 * 3


def test_bench_serving_missing(capsys, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, wait="ready")
    res = run(capsys, {"url": server.url, "prompts": PROMPTS, "engine": "bench_serving", "python": sys.executable})
    assert res["_rc"] == 1
    assert "cannot import sglang.benchmark.serving or sglang.bench_serving" in res["msg"]
    assert "engine=builtin" in res["msg"]
