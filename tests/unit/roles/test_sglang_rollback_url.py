# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The URL the sglang role's rollback probes, as it ships: the url of the sglang_probe task in
roles/sglang/tasks/rollback.yml (with the facts it sets before it), rendered by a real
ansible-playbook run on localhost (no lab).

Issue 11 item 5: the rollback probed sglang_service.url, the NEW config's address; when the change
moved host or port, the restored server listens elsewhere and was reported as not answering.
The lab run of the same (a real port move) is the sglang_role target's scenario_crashloop.sh.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLLBACK = os.path.join(ROOT, "roles", "sglang", "tasks", "rollback.yml")
NEW_URL = "http://127.0.0.1:30112"  # sglang_service.url: the config that failed

CASES = [
    # (the restored config's options, the URL the rollback must probe)
    ({"host": "127.0.0.1", "port": 30111, "model-path": "/m"}, "http://127.0.0.1:30111"),
    ({"host": "0.0.0.0", "port": 30000}, "http://127.0.0.1:30000"),
    ({"host": "::", "port": 8000}, "http://127.0.0.1:8000"),
    ({"host": "::1", "port": 8000}, "http://[::1]:8000"),
    ({"host": "10.0.4.11"}, "http://10.0.4.11:30000"),
    ({}, "http://127.0.0.1:30000"),
]


def _tasks():
    with open(ROLLBACK) as handle:
        return yaml.safe_load(handle)


def _probe_url_and_facts():
    """The probe task's url expression, and every set_fact before it (the facts it may use)."""
    facts = {}
    for task in _tasks():
        facts.update(task.get("ansible.builtin.set_fact", {}))
        for inner in task.get("block", []):
            probe = inner.get("gpufleet.llm.sglang_probe")
            if probe:
                return probe["url"], facts
    raise AssertionError("no sglang_probe task in %s" % ROLLBACK)


def test_rollback_probes_the_previous_address(tmp_path):
    url, facts = _probe_url_and_facts()
    playbook = [{
        "hosts": "localhost",
        "gather_facts": False,
        "vars": {"sglang_service": {"url": NEW_URL, "unit": "sglang-itest.service"}},
        "tasks": [{
            "name": "Render",
            # the rollback's facts as lazily templated vars: each loop item is one restored config
            "vars": dict(facts, _sglang_current_options="{{ item }}"),
            "ansible.builtin.set_fact": {"probe_url": url},
            "loop": [case[0] for case in CASES],
            "register": "rendered",
        }, {
            "name": "Write",
            "ansible.builtin.copy": {
                "content": "{{ rendered.results | map(attribute='ansible_facts.probe_url') | list | to_json }}",
                "dest": str(tmp_path / "out.json")},
        }],
    }]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_COLLECTIONS_PATH=collections)
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if not (tmp_path / "out.json").exists():
        pytest.fail("ansible-playbook failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    rendered = [u.strip() for u in json.loads((tmp_path / "out.json").read_text())]
    assert rendered == [case[1] for case in CASES]
