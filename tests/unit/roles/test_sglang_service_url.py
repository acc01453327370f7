# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The probe URL the sglang role derives from its resolved options, _sglang_options (roles/sglang/tasks/facts.yml).

The expression is read from the role's own task file and rendered by a real ansible-playbook run
on localhost, so what is tested is what ships. No lab needed.
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
FACTS = os.path.join(ROOT, "roles", "sglang", "tasks", "facts.yml")

CASES = [
    ({}, "http://127.0.0.1:30000"),
    ({"host": "127.0.0.1", "port": 30000}, "http://127.0.0.1:30000"),
    ({"host": "0.0.0.0", "port": 31000}, "http://127.0.0.1:31000"),  # wildcard: probe on loopback
    ({"host": "::"}, "http://127.0.0.1:30000"),
    ({"host": "10.20.0.7", "port": 30001}, "http://10.20.0.7:30001"),
    ({"host": "fd00::7", "port": 30002}, "http://[fd00::7]:30002"),  # RFC 3986: IPv6 in brackets
    ({"host": "[fd00::7]"}, "http://[fd00::7]:30000"),  # already bracketed: kept
    ({"host": "gpu1.example.net"}, "http://gpu1.example.net:30000"),
]


def _url_expression():
    with open(FACTS) as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        fact = task.get("ansible.builtin.set_fact", {})
        if "sglang_service" in fact:
            return fact["sglang_service"]["url"]
    raise AssertionError("no sglang_service fact in %s" % FACTS)


def test_probe_url_from_listen_address(tmp_path):
    playbook = [{
        "hosts": "localhost",
        "gather_facts": False,
        "tasks": [{
            "name": "Render",
            "ansible.builtin.set_fact": {"urls": "{{ urls | default([]) + [url] }}"},
            "vars": {"_sglang_options": "{{ item }}", "url": _url_expression()},
            "loop": [case[0] for case in CASES],
        }, {
            "name": "Write",
            "ansible.builtin.copy": {"content": "{{ urls | to_json }}", "dest": str(tmp_path / "urls.json")},
        }],
    }]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    # The expression calls gpufleet.llm.host_port: this tree is .../ansible_collections/gpufleet/llm.
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_COLLECTIONS_PATH=collections)
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if proc.returncode != 0:
        pytest.fail("ansible-playbook failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    urls = json.loads((tmp_path / "urls.json").read_text())
    assert urls == [case[1] for case in CASES]
