# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The hf_snapshot module shell: argument handling, check mode, failures, no secret in output."""
from __future__ import annotations

import json
import os

import pytest

from ansible.module_utils.testing import patch_module_args

from ansible_collections.gpufleet.llm.plugins.modules import hf_snapshot

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
GATED = "gpufleet-lab/Kimi-K2.6-mini-gated"
TOKEN_READER = "hf_labREADERfakeTOKENnotAsecret000001"
TOKEN_NO_GATED = "hf_labNOGATEDfakeTOKENnotAsecret00002"


def call(args, capsys, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            hf_snapshot.main()
    out = capsys.readouterr().out
    return json.loads(out), out


def test_check_mode_then_real_then_idempotent(lab_hub, aria2c, tmp_path, capsys):
    dest = str(tmp_path / "d")
    args = dict(repo_id=TARGET, dest=dest, endpoint=lab_hub.api, min_free_bytes=0, allow_patterns=["*.json"])
    res, dummy = call(args, capsys, check_mode=True)
    assert res["changed"] and res["bytes_to_fetch"] > 0 and not os.path.exists(dest)
    res, dummy = call(args, capsys)
    assert res["changed"] and res["commit"] == lab_hub.files_at(TARGET, "main")[0]
    assert {f["action"] for f in res["files"]} == {"fetched"}
    res, dummy = call(args, capsys)
    assert not res["changed"] and {f["action"] for f in res["files"]} == {"present"}


def test_gated_refusal_is_a_clean_failure_without_the_token(lab_hub, aria2c, tmp_path, capsys):
    args = dict(repo_id=GATED, dest=str(tmp_path / "g"), endpoint=lab_hub.api, min_free_bytes=0,
                token=TOKEN_NO_GATED, allow_patterns=["config.json"])
    res, raw = call(args, capsys)
    assert res["failed"] and "no access" in res["msg"]
    assert TOKEN_NO_GATED not in raw
    args["token"] = TOKEN_READER
    res, raw = call(args, capsys)
    assert res["changed"] and TOKEN_READER not in raw


def test_unknown_repo_and_revision(lab_hub, tmp_path, capsys):
    res, dummy = call(dict(repo_id="gpufleet-lab/nope", dest=str(tmp_path / "x"), endpoint=lab_hub.api), capsys)
    assert res["failed"] and "not found" in res["msg"]
    res, dummy = call(dict(repo_id=TARGET, revision="no-such-branch", dest=str(tmp_path / "x"),
                           endpoint=lab_hub.api), capsys)
    assert res["failed"] and "revision" in res["msg"] and "not found" in res["msg"]


def test_bad_parameters(tmp_path, capsys):
    res, dummy = call(dict(repo_id=TARGET, dest=str(tmp_path), connections=32), capsys)
    assert res["failed"] and "1-16" in res["msg"]


def test_peer_token_never_in_the_output(lab_hub, aria2c, tmp_path, capsys):
    token = "peerTOKENfakeNOTaSECRET0000000002"
    commit = lab_hub.files_at(TARGET, "main")[0]
    # hub=false, no peer holds the file and its owner is gone (nothing listens): a clean failure
    args = dict(repo_id=TARGET, revision=commit, dest=str(tmp_path / "p"), min_free_bytes=0, hub=False,
                listing=[{"path": "config.json", "size": 3, "sha256": None, "blob_id": "a" * 40}],
                peers=[{"name": "gpu2", "url": "http://127.0.0.9:9/m/%s/" % commit, "share": ["config.json"]}],
                peer_token=token)
    res, raw = call(args, capsys)
    assert res["failed"] and "no Hub access" in res["msg"] and token not in raw
