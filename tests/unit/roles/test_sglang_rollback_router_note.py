# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the sglang role's ROLLED BACK message says about the routers (roles/sglang/tasks/rollback.yml), rendered
from the shipped task by a real ansible-playbook run: nothing without routers; after the server was taken out
of its routers before the restart, whether the previous server is back in them. The lab run of the same (a
failed probe behind the real router, the old server re-added) is in docs/rollout.md, "Behind routers".
"""
from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.gpufleet.llm.tests.unit.fixtures.localplay import run_play

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLLBACK = os.path.join(ROOT, "roles", "sglang", "tasks", "rollback.yml")
SKIPPED = {"skipped": True, "changed": False}

CASES = [
    # (the removal before the restart, the re-add after the rollback, what the message says)
    (None, None, ""),
    (SKIPPED, SKIPPED, ""),
    ({"changed": True}, {"changed": True, "failed": False, "routers": [{"url": "http://10.0.9.1:30080"}, {"url": "http://r2:30080"}]},
     "It is back in its routers (http://10.0.9.1:30080, http://r2:30080)."),
    ({"changed": True}, {"changed": False, "failed": True, "msg": "http://10.0.9.1:30080 did not list it healthy within 600s"},
     "It is NOT back in its routers (http://10.0.9.1:30080 did not list it healthy within 600s)."),
    ({"changed": True}, SKIPPED, "It is NOT back in its routers (it does not answer)."),
]


def _note_vars():
    with open(ROLLBACK) as handle:
        for task in yaml.safe_load(handle):
            if "ansible.builtin.fail" in task and "__sglang_router_note" in task.get("vars", {}):
                return task["vars"]
    raise AssertionError("no fail task with __sglang_router_note in %s" % ROLLBACK)


def test_rolled_back_message_says_whether_the_old_server_is_back_in_its_routers(tmp_path):
    # rank 0 is this host: its registered results are set as facts, case after case (the first case
    # has none at all: a run without routers never registers them)
    note_vars = dict(_note_vars(), _sglang_rank0="localhost")
    tasks = []
    for left, joined, _expected in CASES:
        if left is not None:
            tasks.append({"name": "Results", "ansible.builtin.set_fact": {"__sglang_router_left": left, "__sglang_rollback_joined": joined}})
        tasks.append({"name": "Render", "vars": note_vars,
                      "ansible.builtin.set_fact": {"notes": "{{ notes | default([]) + [__sglang_router_note | trim] }}"}})
    tasks.append({"name": "Write", "ansible.builtin.copy": {"content": "{{ notes | to_json }}", "dest": str(tmp_path / "out.json")}})
    assert run_play(tmp_path, tasks) == [case[2] for case in CASES]
