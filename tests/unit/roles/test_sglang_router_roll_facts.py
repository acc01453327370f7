# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the sglang role's roll works out about routers (roles/sglang/tasks/facts.yml, vars/main.yml), rendered
by a real ansible-playbook run of the role's own facts.yml against an inventory with a router group:
the routers' URLs, whether the roll goes through them (_sglang_router_roll), the worker URL the new
server is added as and the one the running server is removed as. No lab needed: the leave, drain,
restart and join themselves run in the lab (docs/rollout.md).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

INVENTORY = """
[gpu_nodes]
gpu1 ansible_host=mgmt-gpu1 model_peer_address=10.0.8.11
gpu2 ansible_host=mgmt-gpu2 model_peer_address=""
gpu3 ansible_host=mgmt-gpu3 sglang_worker_url=http://lb-name.example:31000
gpu4

[sglang_routers]
rtr1 sglang_router_address=10.0.9.1
rtr2 ansible_host=fd00::2 sglang_router_port=31080

[other_routers]
rtr3

[all:vars]
ansible_connection=local
"""


def _run(tmp_path, extra_vars):
    play = [{
        "hosts": "gpu_nodes",
        "gather_facts": False,
        "vars": {"sglang_target_path": "/srv/models/kimi/abc", "sglang_args": {"host": "0.0.0.0", "port": 30001}},
        "tasks": [
            {"name": "Facts", "ansible.builtin.include_role": {"name": "gpufleet.llm.sglang", "tasks_from": "facts.yml", "public": True}},
            {"name": "Collect", "ansible.builtin.set_fact": {"out": {
                "routers": "{{ _sglang_routers }}",
                "roll": "{{ _sglang_router_roll | bool }}",
                "worker": "{{ _sglang_worker_url }}",
                "running": "{{ _sglang_running_worker_url }}",
                "log_level": "{{ _sglang_options['log-level'] | default('') }}"}},
             "vars": {"_sglang_current_options": {"host": "0.0.0.0", "port": 30000}}},
            {"name": "Write", "run_once": True, "ansible.builtin.copy": {
                "content": "{{ dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'out'))) | to_json }}",
                "dest": str(tmp_path / "out.json")}},
        ],
    }]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    (tmp_path / "inventory.ini").write_text(INVENTORY)
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collections, ANSIBLE_HOST_KEY_CHECKING="False")
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.ini"),
            "-e", "ansible_python_interpreter=%s" % sys.executable, "-e", json.dumps(extra_vars), str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if not (tmp_path / "out.json").exists():
        pytest.fail("ansible-playbook failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    return json.loads((tmp_path / "out.json").read_text())


def test_routers_of_the_default_group(tmp_path):
    out = _run(tmp_path, {})
    for host in ("gpu1", "gpu2", "gpu3", "gpu4"):
        assert out[host]["routers"] == ["http://10.0.9.1:30080", "http://[fd00::2]:31080"]
        assert out[host]["roll"] is True
        # SGLang logs its keys at INFO: the role's default keeps them out of the journal
        assert out[host]["log_level"] == "warning"
    # the new server's port (sglang_args) for the add; the running config's port for the removal
    assert out["gpu1"]["worker"] == "http://10.0.8.11:30001"  # model_peer_address: the cluster address
    assert out["gpu1"]["running"] == "http://10.0.8.11:30000"
    assert out["gpu2"]["worker"] == "http://mgmt-gpu2:30001"  # else (unset or empty) ansible_host
    assert out["gpu4"]["worker"] == "http://gpu4:30001"  # else the inventory name
    assert out["gpu3"]["worker"] == out["gpu3"]["running"] == "http://lb-name.example:31000"  # set: both


def test_no_router_or_no_drain_is_the_old_roll(tmp_path):
    out = _run(tmp_path, {"sglang_router_group": "no_such_group"})
    assert {h: (o["routers"], o["roll"]) for h, o in out.items()} == {h: ([], False) for h in ("gpu1", "gpu2", "gpu3", "gpu4")}
    out = _run(tmp_path, {"sglang_router_drain": False})
    assert {o["roll"] for o in out.values()} == {False}


def test_another_group_and_port(tmp_path):
    out = _run(tmp_path, {"sglang_router_group": "other_routers", "sglang_router_port": 30999, "sglang_log_level": ""})
    assert out["gpu2"]["routers"] == ["http://rtr3:30999"]
    assert out["gpu2"]["log_level"] == ""
