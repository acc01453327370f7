# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_config's environment file (format env) and check mode on a host that never ran the role
(issue 11 item 6): secret-looking variables masked in the diff and absent from everything printed,
a missing directory or group in check mode reported as the whole new file, nothing written."""
from __future__ import annotations

import os
import stat

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import config as _sglang_config
from ansible_collections.gpufleet.llm.plugins.modules import sglang_config
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module

TOKEN = "hf_itest_not_a_real_token_91b2"
ENV = {"NCCL_DEBUG": "WARN", "HF_TOKEN": TOKEN, "GPUFLEET_QUOTE": 'a"b\\c', "LOAD_SECONDS": 2}


def run(capsys, args, check_mode=False):
    return run_module(sglang_config.main, capsys, args, check_mode=check_mode, forbidden=TOKEN)


def test_env_file_written_and_secret_masked(capsys, tmp_path):
    path = str(tmp_path / "a.env")
    res = run(capsys, dict(path=path, format="env", options=ENV, mode="0640", _ansible_diff=True))
    assert res["changed"] and res["_rc"] == 0
    text = open(path).read()
    assert text.splitlines()[1:] == ['GPUFLEET_QUOTE="a\\"b\\\\c"', 'HF_TOKEN="%s"' % TOKEN, 'LOAD_SECONDS="2"',
                                     'NCCL_DEBUG="WARN"']
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert 'HF_TOKEN="********"' in res["diff"]["after"] and 'NCCL_DEBUG="WARN"' in res["diff"]["after"]
    assert res["options"]["HF_TOKEN"] == _sglang_config.MASK and res["options"]["NCCL_DEBUG"] == "WARN"
    again = run(capsys, dict(path=path, format="env", options=ENV, mode="0640"))
    assert not again["changed"]


def test_env_change_keeps_previous_and_masks_both_sides(capsys, tmp_path):
    path = str(tmp_path / "a.env")
    run(capsys, dict(path=path, format="env", options=ENV))
    res = run(capsys, dict(path=path, format="env", options=dict(ENV, NCCL_DEBUG="INFO"), previous=path + ".previous",
                           _ansible_diff=True))
    assert res["changed"] and res["previous"] == path + ".previous"
    assert 'NCCL_DEBUG="WARN"' in res["diff"]["before"] and 'NCCL_DEBUG="INFO"' in res["diff"]["after"]
    assert 'HF_TOKEN="********"' in res["diff"]["before"]


@pytest.mark.parametrize("fmt, name", [("yaml", "a.yaml"), ("env", "a.env")])
def test_check_mode_on_a_fresh_host(capsys, tmp_path, fmt, name):
    # /etc/sglang and the service group do not exist yet: the tasks before would create them.
    path = str(tmp_path / "etc-sglang" / name)
    options = ENV if fmt == "env" else {"tp-size": 8}
    res = run(capsys, dict(path=path, format=fmt, options=options, group="no-such-group-gpufleet", _ansible_diff=True),
              check_mode=True)
    assert res["_rc"] == 0 and res["changed"], res
    assert res["diff"]["before"] == "" and _sglang_config.HEADER in res["diff"]["after"]
    assert not os.path.exists(os.path.dirname(path))


@pytest.mark.parametrize("options, words", [
    ({"1BAD": "x"}, "is not an environment variable name"),
    ({"A": "two\nlines"}, "line break"),
    ({"A": ["x"]}, "must be a string or a number"),
])
def test_bad_environment(capsys, tmp_path, options, words):
    res = run(capsys, dict(path=str(tmp_path / "a.env"), format="env", options=options))
    assert res["failed"] and words in res["msg"], res["msg"]


def test_missing_directory_still_fails_outside_check_mode(capsys, tmp_path):
    res = run(capsys, dict(path=str(tmp_path / "none" / "a.env"), format="env", options={}))
    assert res["failed"] and "does not exist: create it first" in res["msg"]


def test_secret_never_reaches_the_hosts_journal(capsys, tmp_path, monkeypatch):
    # Ansible logs a module's invocation to the host's journal/syslog before main() can mask anything:
    # with an HF_TOKEN in the options that line held the token.
    from ansible.module_utils import basic

    logged = []
    monkeypatch.setattr(basic.AnsibleModule, "log", lambda self, msg, log_args=None: logged.append(msg))
    res = run(capsys, dict(path=str(tmp_path / "a.env"), format="env", options=ENV, mode="0640"))
    assert res["changed"]
    assert not any(TOKEN in m for m in logged)
