# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model_verify module end to end, in-process: arguments in through ansible-core's
``ansible.module_utils.testing.patch_module_args`` (ansible-core 2.19; older cores: the
``_ANSIBLE_ARGS`` patch it replaces), the JSON result read from stdout as the controller would."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._verify import expect as _expect
from ansible_collections.gpufleet.llm.plugins.modules import model_verify
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt


def run(capsys, args, check_mode=False):
    return run_module(model_verify.main, capsys, args, check_mode=check_mode)


def test_clean_target_and_drafter(capsys, trees):
    target, drafter = trees
    for mode in ("quick", "full", "auto"):
        res = run(capsys, {"path": target, "mode": mode, "expect": {"model_type": "kimi_k25",
                                                                    "text_config.num_hidden_layers": 61}})
        assert res["_rc"] == 0 and not res.get("failed") and res["ok"] and res["changed"] is False, res
        assert res["shards"] == 4 and res["config"]["layers"] == 61 and res["duration"] >= 0
        assert res["verified_path"] == target and "uid" not in res  # no file facts mixed into the result
        res = run(capsys, {"path": drafter, "mode": mode, "target": target})
        assert res["ok"] and not res.get("failed") and res["changed"] is False


def test_problems_fail_with_every_line(capsys, trees):
    target, _drafter = trees
    os.unlink(os.path.join(target, mt.shard_name(2)))
    with open(os.path.join(target, mt.shard_name(1) + ".aria2"), "w") as handle:
        handle.write("x")
    res = run(capsys, {"path": target, "mode": "quick"})
    assert res["failed"] and res["_rc"] == 1 and res["changed"] is False and not res["ok"]
    assert mt.shard_name(2) + " is missing" in res["msg"] and mt.shard_name(1) + ".aria2" in res["msg"]
    assert res["msg"].startswith("model_verify found 2 problem(s)")
    assert "exception" not in res and "Traceback" not in res["msg"]


def test_report_only(capsys, trees):
    target, _drafter = trees
    os.truncate(os.path.join(target, mt.shard_name(3)), 10)
    res = run(capsys, {"path": target, "mode": "quick", "fail_on_problem": False})
    assert not res.get("failed") and res["ok"] is False and len(res["problems"]) == 1
    assert mt.shard_name(3) in res["problems"][0]


def test_check_mode_writes_no_stat_cache(capsys, trees):
    target, _drafter = trees
    res = run(capsys, {"path": target, "mode": "full"}, check_mode=True)
    assert res["ok"] and not os.path.exists(os.path.join(target, ".gpufleet", "statcache.json"))
    res = run(capsys, {"path": target, "mode": "full"})
    assert res["ok"] and os.path.exists(os.path.join(target, ".gpufleet", "statcache.json"))


def test_stray_notices_become_warnings(capsys, trees):
    target, _drafter = trees
    extra = mt.shard_name(5)
    with open(os.path.join(target, extra), "wb") as handle:
        handle.write(b"x")
    res = run(capsys, {"path": target, "mode": "quick", "allow_stray": True})
    assert res["ok"] and not res.get("failed")
    # ansible-core 2.19 returns warnings as structured events; older cores as strings.
    assert extra in json.dumps(res["warnings"]) and any(extra in n for n in res["notices"])
    # issue 10 item 12: a partial download is a problem even with allow_stray.
    with open(os.path.join(target, "x.incomplete"), "w") as handle:
        handle.write("x")
    res = run(capsys, {"path": target, "mode": "quick", "allow_stray": True, "fail_on_problem": False})
    assert res["ok"] is False and any(p.startswith("x.incomplete:") for p in res["problems"])


@pytest.mark.parametrize("args,needle", [
    ({}, "missing required arguments: path"),
    ({"path": "/nonexistent", "mode": "fast"}, "value of mode must be one of: quick, full, auto, got: fast"),
    ({"path": "/nonexistent", "expect": {"text_config.[": 61}}, "not valid JMESPath"),
    ({"path": "/nonexistent", "hash_workers": 0}, "hash_workers must be a positive integer"),
    ({"path": "/nonexistent", "token": "hf_secret_value_123"}, "only apply with repo_id"),
])
def test_bad_parameters_fail_cleanly(capsys, args, needle):
    res = run(capsys, args)
    assert res["failed"] and needle in res["msg"], res
    assert "exception" not in res and "Traceback" not in res["msg"]
    assert "hf_secret_value_123" not in json.dumps(res)


def test_missing_path_is_a_problem_not_a_traceback(capsys, tmp_path):
    res = run(capsys, {"path": str(tmp_path / "nope")})
    assert res["failed"] and "does not exist" in res["msg"] and "exception" not in res


def test_missing_library_fails_with_missing_required_lib(capsys, monkeypatch, trees):
    target, _drafter = trees
    monkeypatch.setattr(_expect, "HAS_JMESPATH", False)
    monkeypatch.setattr(_expect, "JMESPATH_IMPORT_ERROR", "Traceback (stand-in): No module named 'jmespath'")
    res = run(capsys, {"path": target, "expect": {"model_type": "kimi_k25"}})
    assert res["failed"] and res["_rc"] == 1 and "required Python library (jmespath)" in res["msg"]
    # ansible-core 2.19 keeps the traceback out of the result unless tracebacks are enabled; older cores keep it.
    assert res.get("exception", "Traceback (stand-in)").startswith("Traceback (stand-in)")
    # Without expect, jmespath is not needed.
    res = run(capsys, {"path": target, "mode": "quick"})
    assert res["ok"] and not res.get("failed")
