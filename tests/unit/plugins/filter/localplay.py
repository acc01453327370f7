# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run a playbook on localhost with this collection, for tests that render the roles' own task
expressions (what ships) with a real ansible-playbook. No lab needed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))  # the collection root


def run_play(tmp_path, tasks: list, *, play_vars: dict | None = None, out: str = "out.json"):
    """Run ``tasks`` in one localhost play and return the JSON a task of it wrote to ``tmp_path/out``."""
    playbook = [{"hosts": "localhost", "gather_facts": False, "vars": play_vars or {}, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    # Expressions call gpufleet.llm filters: this tree is .../ansible_collections/gpufleet/llm.
    collections = os.path.dirname(os.path.dirname(os.path.dirname(ROOT)))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False", ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
               ANSIBLE_COLLECTIONS_PATH=collections)
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", "localhost,", "-c", "local",
            "-e", "ansible_python_interpreter=%s" % sys.executable, str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    if not (tmp_path / out).exists():
        pytest.fail("ansible-playbook failed:\n%s\n%s" % (proc.stdout[-3000:], proc.stderr[-3000:]))
    return json.loads((tmp_path / out).read_text())
