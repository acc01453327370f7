# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_preflight module end to end, in-process, with the REAL SGLang 0.5.23 of the lab's venv
as ``python`` (sglang_env.py; skipped, saying why, only outside the lab). The module runs its
checker with that interpreter as a subprocess, as on a host."""
from __future__ import annotations

import sys

import pytest

from ansible_collections.gpufleet.llm.plugins.modules import sglang_preflight
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import sglang_configs as cfg
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    SGLANG_VERSION, sglang_python)


def run(capsys, args, check_mode=False):
    return run_module(sglang_preflight.main, capsys, args, check_mode=check_mode, forbidden=cfg.API_KEY)


def test_good_config_check_mode_and_real(capsys, tmp_path, sglang_python):
    config = cfg.write(str(tmp_path), "kimi", cfg.GOOD)
    for check_mode in (True, False):
        res = run(capsys, {"config": config, "python": sglang_python, "expect_version": SGLANG_VERSION}, check_mode)
        assert res["_rc"] == 0, res.get("msg")
        assert res["changed"] is False and res["ok"] is True
        assert res["version"] == SGLANG_VERSION
        assert res["python"] == sglang_python and res["config"] == config
        assert res["options"]["speculative-algorithm"] == "DFLASH" and res["options"]["api-key"] == "********"
        assert res["problems"] == []


@pytest.mark.parametrize("name,fragment", [
    ("underscore", "tp_size: underscore key"),
    ("unknown", "speculative-algorythm: unknown option"),
    ("dflashx", "speculative-algorithm: 'DFLASHX' is not an algorithm"),
    ("choice", "attention-backend: argument --attention-backend: invalid choice: 'nope'"),
    ("secret_underscore", "api_key: underscore key"),
])
def test_bad_config_fails_naming_the_option(capsys, tmp_path, sglang_python, name, fragment):
    config = cfg.write(str(tmp_path), name, cfg.BAD[name])
    res = run(capsys, {"config": config, "python": sglang_python}, check_mode=True)
    assert res["_rc"] == 1 and res["failed"] and res["ok"] is False
    assert fragment in res["msg"] and "SGLang 0.5.23 rejects" in res["msg"], res["msg"]
    assert any(fragment in p for p in res["problems"])


def test_all_problems_in_one_message(capsys, tmp_path, sglang_python):
    res = run(capsys, {"config": cfg.write(str(tmp_path), "all", cfg.ALL_AT_ONCE), "python": sglang_python})
    assert res["_rc"] == 1 and "4 problem(s)" in res["msg"]
    for name in ("tp_size", "speculative-algorythm", "DFLASHX", "attention-backend"):
        assert name in res["msg"]


def test_not_yaml(capsys, tmp_path, sglang_python):
    config = cfg.write(str(tmp_path), "kimi", cfg.GOOD, suffix=".conf")
    res = run(capsys, {"config": config, "python": sglang_python})
    assert res["_rc"] == 1 and "Config file must be YAML format, got: .conf" in res["msg"]


def test_expect_version(capsys, tmp_path, sglang_python):
    res = run(capsys, {"config": cfg.write(str(tmp_path), "kimi", cfg.GOOD), "python": sglang_python,
                       "expect_version": "0.4.0"})
    assert res["_rc"] == 1 and "expected 0.4.0" in res["msg"]


def test_missing_python_and_config(capsys, tmp_path):
    config = cfg.write(str(tmp_path), "kimi", cfg.GOOD)
    missing = str(tmp_path / "opt" / "sglang" / "0.5.23" / "bin" / "python")
    res = run(capsys, {"config": config, "python": missing})
    assert res["_rc"] == 1 and "python %s is not an executable file" % missing in res["msg"]
    res = run(capsys, {"config": str(tmp_path / "absent.yaml"), "python": sys.executable})
    assert res["_rc"] == 1 and "absent.yaml does not exist" in res["msg"]


def test_python_without_sglang(capsys, tmp_path):
    # The units venv's own interpreter has no SGLang: a clear failure naming it.
    res = run(capsys, {"config": cfg.write(str(tmp_path), "kimi", cfg.GOOD), "python": sys.executable})
    assert res["_rc"] == 1
    assert "SGLang is not importable with python %s" % sys.executable in res["msg"]
    assert "No module named 'sglang'" in res["import_error"]


# --- issue 11 item 2: SGLang's start-time rules, with the unit's environment ----------------------

HF_TOKEN = "hf_gpufleet-test-NOT-A-SECRET-777"


def test_start_rules_with_and_without_the_environment(capsys, tmp_path, sglang_python):
    # The drafter's max_position_embeddings (4096) is below the context length (131072): SGLang
    # refuses at start unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 is in its environment.
    from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils._sglang import test_sglang_start_check as t

    target, draft = t.models(tmp_path / "models", drafter_len=4096)
    config = cfg.write(str(tmp_path), "kimi", t.config_text(target, draft))
    res = run(capsys, {"config": config, "python": sglang_python, "environment": {"NCCL_DEBUG": "WARN"}})
    assert res["_rc"] == 1 and res["ok"] is False
    assert "draft-context-length (context-length, speculative-draft-model-path): SGLang 0.5.23 refuses to start" \
        in res["msg"]
    assert "set SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in res["msg"]
    env = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1", "HF_TOKEN": HF_TOKEN, "NCCL_DEBUG": "WARN"}
    with_env = run_module(sglang_preflight.main, capsys, {"config": config, "python": sglang_python,
                                                          "environment": env}, forbidden=HF_TOKEN)
    assert with_env["_rc"] == 0, with_env.get("msg")
    assert with_env["ok"] and with_env["problems"] == [] and "draft-context-length" in with_env["start"]["checked"]
    assert with_env["environment"] == sorted(env)
    # Values never shown, not even the harmless ones: the invocation carries the names only.
    assert with_env["invocation"]["module_args"]["environment"] == dict((k, "********") for k in env)


@pytest.mark.parametrize("option,rule", [
    ("pp-size: 2", "dflash-pp-size (pp-size)"),
    ("speculative-dflash-block-size: 8", "dflash-block-size (speculative-dflash-block-size, speculative-num-draft-tokens)"),
    ("speculative-draft-window-size: 8", "dflash-draft-window (speculative-draft-window-size, speculative-num-draft-tokens)"),
])
def test_start_rule_refused_by_name(capsys, tmp_path, sglang_python, option, rule):
    res = run(capsys, {"config": cfg.write(str(tmp_path), "kimi", cfg.GOOD + option + "\n"), "python": sglang_python},
              check_mode=True)
    assert res["_rc"] == 1 and res["changed"] is False
    assert "SGLang 0.5.23 rejects" in res["msg"] and rule + ": SGLang 0.5.23 refuses to start" in res["msg"], res["msg"]


def test_bad_environment_name(capsys, tmp_path, sglang_python):
    res = run(capsys, {"config": cfg.write(str(tmp_path), "kimi", cfg.GOOD), "python": sglang_python,
                       "environment": {"NOT-A-NAME": "x"}})
    assert res["_rc"] == 1 and res["msg"].startswith("environment: ") and "NOT-A-NAME" in res["msg"]
