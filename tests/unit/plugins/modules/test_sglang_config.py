# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_config end to end, in-process, on real files: dash form, stable bytes, previous kept,
check mode, and the API key never in any output (the output is checked as printed)."""
from __future__ import annotations

import os
import re
import stat

import pytest
import yaml

from ansible_collections.gpufleet.llm.plugins.module_utils._common import secrets as _secrets
from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import config as _sglang_config
from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.modules import sglang_config
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module

KEY = "sk-test-not-a-real-key-3f9a"
OPTIONS = {"model_path": "/srv/models/kimi/0123", "speculative-algorithm": "DFLASH", "tp_size": 8,
           "trust-remote-code": True, "mem_fraction_static": 0.85, "context-length": None}


def run(capsys, args, check_mode=False):
    return run_module(sglang_config.main, capsys, args, check_mode=check_mode, forbidden=KEY)


def test_writes_dash_form_and_masks_the_key(capsys, tmp_path):
    path = str(tmp_path / "kimi.yaml")
    res = run(capsys, dict(path=path, options=OPTIONS, secrets={"api_key": KEY}, mode="0640", _ansible_diff=True))
    assert res["changed"] and res["_rc"] == 0
    data = yaml.safe_load(open(path))
    assert data == {"model-path": "/srv/models/kimi/0123", "speculative-algorithm": "DFLASH", "tp-size": 8,
                    "trust-remote-code": True, "mem-fraction-static": 0.85, "api-key": KEY}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert res["options"]["api-key"] == _sglang_config.MASK
    assert KEY not in res["diff"]["after"] and '"api-key": ' not in res["diff"]["after"]
    assert 'api-key: "********"' in res["diff"]["after"]
    # the same options again: same bytes, no change
    again = run(capsys, dict(path=path, options=OPTIONS, secrets={"api-key": KEY}, mode="0640"))
    assert not again["changed"]


def test_previous_kept_and_diff_masks_both_sides(capsys, tmp_path):
    path = str(tmp_path / "kimi.yaml")
    prev = path + ".previous"
    run(capsys, dict(path=path, options=OPTIONS, secrets={"api-key": KEY}))
    old = open(path).read()
    changed = dict(OPTIONS, tp_size=4)
    res = run(capsys, dict(path=path, options=changed, secrets={"api-key": KEY}, previous=prev, _ansible_diff=True))
    assert res["changed"] and res["previous"] == prev
    assert open(prev).read() == old and stat.S_IMODE(os.stat(prev).st_mode) == 0o640
    assert "tp-size: 8" in res["diff"]["before"] and "tp-size: 4" in res["diff"]["after"]
    assert KEY not in res["diff"]["before"]


def test_check_mode_writes_nothing(capsys, tmp_path):
    path = str(tmp_path / "kimi.yaml")
    res = run(capsys, dict(path=path, options=OPTIONS), check_mode=True)
    assert res["changed"] and not os.path.exists(path)


def test_mode_only_change_is_a_change(capsys, tmp_path):
    path = str(tmp_path / "kimi.yaml")
    run(capsys, dict(path=path, options=OPTIONS, mode="0640"))
    os.chmod(path, 0o644)
    res = run(capsys, dict(path=path, options=OPTIONS, mode="0640"))
    assert res["changed"] and stat.S_IMODE(os.stat(path).st_mode) == 0o640


@pytest.mark.parametrize("args, words", [
    (dict(path="/tmp/x.json", options={}), "must end in .yaml"),
    (dict(path="/nonexistent-dir/x.yaml", options={}), "does not exist"),
    (dict(path="{tmp}/x.yaml", options={"tp_size": 8, "tp-size": 4}), "given twice"),
    (dict(path="{tmp}/x.yaml", options={"tp size": 8}), "not an SGLang option name"),
    (dict(path="{tmp}/x.yaml", options={}, group="no-such-group-gpufleet"), "does not exist on this host"),
])
def test_bad_input(capsys, tmp_path, args, words):
    args = dict(args, path=args["path"].format(tmp=tmp_path))
    res = run(capsys, args)
    assert res["failed"] and words in res["msg"], res["msg"]
    assert res["_rc"] == 1


def test_mask_text_handles_hand_written_files():
    text = "api_key: hunter2\nadmin-api-key: 'x'\nport: 30000\nmax-total-tokens: 5\napi-key:\n"
    masked = _sglang_config.mask_text(text)
    assert "hunter2" not in masked and "'x'" not in masked
    assert "port: 30000" in masked and "max-total-tokens: 5" in masked


def test_one_mask_for_the_collection():
    assert _sglang_config.MASK is _secrets.MASK
    assert _sglang_config.mask_text("x: hunter2\n", ["hunter2", ""]) == "x: %s\n" % _secrets.MASK


def test_file_mode_and_owner_ids():
    assert _sglang_config.file_mode("0640") == 0o640 and _sglang_config.file_mode(0o600) == 0o600
    with pytest.raises(ModuleFailure, match=re.escape("mode must be octal like 0640, got 'u+rw'")):
        _sglang_config.file_mode("u+rw")
    assert _sglang_config.owner_ids(None, None) == (-1, -1)
    assert _sglang_config.owner_ids("0", "0") == (0, 0) and _sglang_config.owner_ids("root", None) == (0, -1)
    with pytest.raises(ModuleFailure, match="create the service user first"):
        _sglang_config.owner_ids("no-such-user-gpufleet", None)


def test_run_unchanged_leaves_attributes_to_the_module(tmp_path):
    params = dict((name, spec.get("default")) for name, spec in _sglang_config.argument_spec().items())
    params.update(path=str(tmp_path / "kimi.yaml"), options=OPTIONS)
    first = _sglang_config.run(params, check_mode=False)
    assert first["changed"] and "diff" in first and "previous" not in first
    again = _sglang_config.run(params, check_mode=False)
    assert again == dict(changed=False, path=params["path"], options=first["options"])
