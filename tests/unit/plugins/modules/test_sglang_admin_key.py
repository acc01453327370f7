# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's admin-api-key as a role variable (issue 24 item 2): only in the 0640 config, masked in
diffs and in the journal lines a failed probe quotes, and sent by the benchmark's /flush_cache.

SGLang 0.5.23 marks /flush_cache ``AuthLevel.ADMIN_OPTIONAL`` (sglang/srt/utils/auth.py): once an
admin-api-key is set it takes only that key, the api-key no longer opens it (401). The lab's
stand-in models that (tests/lab/sglang_standin); the bench_serving driver is run with the real
0.5.23 ``flush_server_cache``/``get_auth_headers`` read from the lab venv's source.
"""
from __future__ import annotations

import ast
import glob
import json
import os
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._bench import bench
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import run as bench_run
from ansible_collections.gpufleet.llm.plugins.module_utils._bench import serving as bench_serving
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import probe as _sglang_probe
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.modules import sglang_bench, sglang_probe
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    sglang_python)
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._sglang.test_sglang_unit import JOURNAL, SECRET, FakeSystemd
from ansible_collections.gpufleet.llm.tests.unit.plugins.standin import (  # noqa: F401 pylint: disable=unused-import
    standin_factory)

API_KEY = "sk-lab-admin-test-API-key-0123"  # lab-only, fake
ADMIN_KEY = "sk-lab-admin-test-ADMIN-key-4567"  # lab-only, fake


def _paths(golden):
    return os.path.join(golden, "target"), os.path.join(golden, "drafter")


def _bench_params(**given):
    params = dict((name, spec.get("default")) for name, spec in bench.argument_spec().items())
    params.update(given)
    return params


def _prompts(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(dict(prompt="prompt %d" % i, category="chat")) for i in range(2)) + "\n")
    return str(path)


# --- the modules take it, no_log -----------------------------------------------------------------------------

def test_bench_and_probe_take_the_admin_key_no_log():
    for module, spec in ((sglang_bench, bench.argument_spec()), (sglang_probe, _sglang_probe.argument_spec())):
        assert spec["admin_api_key"] == dict(type="str", no_log=True), module.__name__
        assert "admin_api_key" in module.DOCUMENTATION


# --- the benchmark's flush ---------------------------------------------------------------------------------------

def test_builtin_flush_sends_the_admin_key(tmp_path, standin_factory, golden):
    target, drafter = _paths(golden)
    server = standin_factory(target, drafter=drafter, api_key=API_KEY, options={"admin-api-key": ADMIN_KEY},
                             wait="ready")
    params = _bench_params(url=server.url, api_key=API_KEY, prompts=_prompts(tmp_path), concurrency=[1],
                           num_requests=2, repeats=2, max_new_tokens=8, api="generate")
    warnings = []
    # without the admin key the server refuses the flush, as SGLang 0.5.23 does: the message says what to set
    with pytest.raises(ModuleFailure) as exc:
        bench_run.run(params, check_mode=False, run_command=None, warn=warnings.append)
    assert "flush_cache answered 401" in exc.value.msg and "admin_api_key" in exc.value.msg
    assert "sglang_admin_api_key" in exc.value.msg and API_KEY not in exc.value.msg
    res = bench_run.run(dict(params, admin_api_key=ADMIN_KEY), check_mode=False, run_command=None,
                        warn=warnings.append)
    assert not [w for w in warnings if "flush" in w], warnings
    assert res["levels"][0]["succeeded"] == 4 and len(res["levels"][0]["repeats"]) == 2
    with pytest.raises(ModuleFailure) as exc:
        bench_run.run(dict(params, admin_api_key="sk-wrong-admin-key"), check_mode=False, run_command=None,
                      warn=warnings.append)
    assert "refused the admin_api_key given" in exc.value.msg and "sk-wrong-admin-key" not in exc.value.msg


def test_flush_without_admin_key_still_uses_the_api_key(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, api_key=API_KEY, wait="ready")
    assert bench_run.flush_cache(server.url, api_key=API_KEY) is None
    assert bench_run.flush_cache(server.url, api_key="other", admin_api_key=API_KEY) is None  # admin key first


def _real_serving_functions(python):
    """The source of 0.5.23's get_auth_headers and flush_server_cache, and whether benchmark() calls the
    latter by its module-global name (so that DRIVER's replacement is the one called)."""
    site = glob.glob(os.path.join(os.path.dirname(os.path.dirname(python)), "lib", "python3*", "site-packages"))
    path = os.path.join(site[0], "sglang", "benchmark", "serving.py")
    with open(path) as handle:
        source = handle.read()
    tree = ast.parse(source)
    found, by_name = {}, {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            by_name[node.name] = node
            if node.name in ("get_auth_headers", "flush_server_cache"):
                found[node.name] = ast.get_source_segment(source, node)
        elif isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
                "_DEFAULT_SGLANG_FLUSH_CACHE_TIMEOUT"]:
            found["timeout"] = ast.get_source_segment(source, node)
    calls = [n for n in ast.walk(by_name["benchmark"]) if isinstance(n, ast.Call)
             and isinstance(n.func, ast.Name) and n.func.id == "flush_server_cache"]
    uses = [n for n in ast.walk(by_name["flush_server_cache"]) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == "get_auth_headers"]
    return found, bool(calls), bool(uses)


FAKE_TAIL = '''
def calculate_metrics(*args, **kwargs):
    return None


def cli_main():
    url = sys.argv[sys.argv.index("--base-url") + 1]
    flush_server_cache(url, "sglang")  # as benchmark() calls it after the warm-up
    answer = requests.get(url + "/server_info", headers=get_auth_headers())  # a request: the api-key
    answer.raise_for_status()
    print("flushed and served")
'''


def test_bench_serving_driver_flushes_with_the_admin_key(tmp_path, standin_factory, golden, sglang_python):
    # pylint: disable=redefined-outer-name
    found, called_by_name, uses_auth_headers = _real_serving_functions(sglang_python)
    assert called_by_name and uses_auth_headers and set(found) == {"get_auth_headers", "flush_server_cache", "timeout"}
    pkg = tmp_path / "site" / "sglang" / "benchmark"
    pkg.mkdir(parents=True)
    (tmp_path / "site" / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "serving.py").write_text("import os\nimport sys\nfrom typing import Dict\n\nimport requests\n\n%s\n\n%s\n\n%s\n%s"
                                    % (found["timeout"], found["get_auth_headers"], found["flush_server_cache"], FAKE_TAIL))
    target, _drafter = _paths(golden)
    server = standin_factory(target, api_key=API_KEY, options={"admin-api-key": ADMIN_KEY}, wait="ready")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"), OPENAI_API_KEY=API_KEY)
    argv = [sys.executable, "-c", bench_serving.DRIVER, str(tmp_path / "side.json"), "--base-url", server.url]
    # without the admin key in its environment the tool's own flush sends the api-key: 401
    out = subprocess.run(argv, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode != 0 and "401" in out.stderr, out.stderr[-2000:]
    env[bench_serving.ADMIN_KEY_ENV] = ADMIN_KEY
    out = subprocess.run(argv, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0 and "flushed and served" in out.stdout, out.stderr[-2000:]


def test_bench_serving_puts_the_admin_key_in_the_driver_environment_or_refuses(tmp_path):
    seen = []

    def run_command(argv, cwd=None, environ_update=None):
        seen.append((argv, environ_update))
        if "import importlib.util" in " ".join(argv):
            return 0, module + "\n", ""
        return 1, "", "stop here"

    requests = [dict(index=0, prompt="p", category="chat", max_new_tokens=4)]
    params = _bench_params(api_key=API_KEY, admin_api_key=ADMIN_KEY, concurrency=[1], repeats=1, max_new_tokens=4)
    module = bench_serving.LEGACY_MODULE
    with pytest.raises(ModuleFailure) as exc:
        bench_serving.run_levels("/py", "http://127.0.0.1:1", requests, params=params, server={}, run_command=run_command)
    assert "sends one key to every endpoint" in exc.value.msg and ADMIN_KEY not in exc.value.msg
    assert len(seen) == 1  # refused before any run
    module = bench_serving.SERVING_MODULE
    with pytest.raises(ModuleFailure):
        bench_serving.run_levels("/py", "http://127.0.0.1:1", requests, params=params, server={}, run_command=run_command)
    argv, environ = seen[-1]
    assert environ == {"OPENAI_API_KEY": API_KEY, bench_serving.ADMIN_KEY_ENV: ADMIN_KEY}
    assert ADMIN_KEY not in " ".join(argv) and API_KEY not in " ".join(argv)
    seen[:] = []
    with pytest.raises(ModuleFailure):
        bench_serving.run_levels("/py", "http://127.0.0.1:1", requests, params=dict(params, flush_cache=False),
                                 server={}, run_command=run_command)
    assert seen[-1][1] == {"OPENAI_API_KEY": API_KEY}  # no flush: the admin key stays home


# --- journal quotes -----------------------------------------------------------------------------------------------

def test_probe_masks_the_admin_key_in_journal_quotes(standin_factory, golden):
    target, _drafter = _paths(golden)
    server = standin_factory(target, env={"GPUFLEET_STANDIN_NEVER_READY": "1"}, wait="answering")
    # SGLang 0.5.23 logs `server_args={... 'admin_api_key': '<key>' ...}` at start (engine.py)
    journal = JOURNAL.replace(SECRET, API_KEY) + (
        "2026-12-03T17:34:57+0000 gpu1 sh[85]: server_args={'api_key': '%s', 'admin_api_key': '%s'}\n"
        % (API_KEY, ADMIN_KEY))
    fake = FakeSystemd(["crash-first-running", "crash-first-running", "crash-auto-restart"], journal=journal)
    params = dict((name, spec.get("default")) for name, spec in _sglang_probe.argument_spec().items())
    params.update(url=server.url, unit="sglang-itest.service", interval=0.2, timeout=600, api_key=API_KEY,
                  admin_api_key=ADMIN_KEY)
    with pytest.raises(_sglang_probe.ProbeError) as exc:
        _sglang_probe.run(params, warn=lambda msg: None, run_command=fake)
    msg = exc.value.fail_kwargs()["msg"]
    assert "server_args=" in msg and ADMIN_KEY not in msg and API_KEY not in msg
    assert "'admin_api_key': '********'" in msg
