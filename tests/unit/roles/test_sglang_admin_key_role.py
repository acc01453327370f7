# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 24 item 2: the sglang role passes sglang_admin_api_key wherever the API key goes, and the config
holds it 0640 and masked in the diff. The expressions are read from the role's task files and rendered by a
real ansible-playbook run on localhost (a controller test: ansible-test's module units cannot run a play).
"""

from __future__ import annotations

import json
import os

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import config as _sglang_config
from ansible_collections.gpufleet.llm.tests.unit.fixtures.localplay import ROOT, run_play

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

API_KEY = "sk-lab-admin-test-API-key-0123"  # lab-only, fake
ADMIN_KEY = "sk-lab-admin-test-ADMIN-key-4567"  # lab-only, fake
TASKS = os.path.join(ROOT, "roles", "sglang", "tasks")


# --- the role passes it: config (masked diff), preflight, probe, benchmark -----------------------------------------

def _task_args(name, module):
    import yaml
    with open(os.path.join(TASKS, name)) as handle:
        text = handle.read()
    found = []

    def walk(tasks):
        for task in tasks or []:
            if module in task:
                found.append(task[module])
            for key in ("block", "rescue", "always"):
                walk(task.get(key))
            if "module_defaults" in task and module in task["module_defaults"]:
                found.append(task["module_defaults"][module])
    walk(yaml.safe_load(text))
    return found


def test_role_passes_the_admin_key_everywhere_the_api_key_goes():
    for name in ("configure.yml", "preflight.yml"):
        secrets = [args["secrets"] for args in _task_args(name, "gpufleet.llm.sglang_config") if "secrets" in args]
        assert len(secrets) == 1 and "sglang_admin_api_key" in secrets[0] and "'admin-api-key'" in secrets[0], name
    # the probes' shared arguments (vars/main.yml, given as module_defaults by probe.yml and baseline.yml)
    import yaml
    with open(os.path.join(ROOT, "roles", "sglang", "vars", "main.yml")) as handle:
        shared = yaml.safe_load(handle)["_sglang_probe_args"]
    assert "sglang_admin_api_key" in shared["admin_api_key"] and "sglang_api_key" in shared["api_key"]
    for name in ("probe.yml", "baseline.yml"):
        probes = _task_args(name, "gpufleet.llm.sglang_probe")
        assert any(isinstance(args, str) and "_sglang_probe_args" in args for args in probes), name
        # no call overrides the shared keys with something else
        assert all("admin_api_key" not in args for args in probes if isinstance(args, dict)), name
    rollback = _task_args("rollback.yml", "gpufleet.llm.sglang_probe")
    assert rollback and all("'admin-api-key'" in args["admin_api_key"] for args in rollback)
    defaults = [args for args in _task_args("baseline.yml", "gpufleet.llm.sglang_bench") if "url" in args]
    assert defaults and all("sglang_admin_api_key" in args["admin_api_key"] for args in defaults)


def test_configured_admin_key_is_in_the_0640_config_and_masked_in_the_diff(tmp_path):
    # the secrets expression of configure.yml rendered by ansible, then written by sglang_config
    secrets = [args["secrets"] for args in _task_args("configure.yml", "gpufleet.llm.sglang_config") if "secrets" in args][0]
    tasks = [{"name": "Render", "ansible.builtin.copy": {"content": "{{ %s | to_json }}" % secrets.strip()[3:-3].strip(),
                                                         "dest": str(tmp_path / "out.json")}}]
    rendered = run_play(tmp_path, tasks, play_vars={"sglang_api_key": API_KEY, "sglang_admin_api_key": ADMIN_KEY})
    assert rendered == {"api-key": API_KEY, "admin-api-key": ADMIN_KEY}
    path = str(tmp_path / "kimi.yaml")
    res = _sglang_config.run(dict(path=path, options={"port": 30000}, secrets=rendered, owner=None, group=None,
                                  mode="0640", previous=None, format="yaml"), check_mode=False)
    assert res["options"]["admin-api-key"] == _sglang_config.MASK
    assert ADMIN_KEY not in json.dumps(res) and 'admin-api-key: "********"' in res["diff"]["after"]
    with open(path) as handle:
        assert 'admin-api-key: "%s"' % ADMIN_KEY in handle.read()
    assert oct(os.stat(path).st_mode & 0o777) == "0o640"
