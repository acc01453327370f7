# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""roles/model/tasks/confirm.yml as it ships (issue 20 item 1): which hosts confirm the pinned listing
over their own Hub connection, and the refusal to hand hosts without Hub access a listing nobody but
the resolving host has seen. Run by a real ansible-playbook over local hosts; the confirming
hf_snapshot call itself needs the lab Hub and is left out here (test_snapshot_peers.py runs the module
against the real lab Hub; the fleet integration target's scenario D runs this file for real).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml
import pytest

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CONFIRM = os.path.join(ROOT, "roles", "model", "tasks", "confirm.yml")


def _run(tmp_path, hub_access: dict, **play_vars):
    with open(CONFIRM) as handle:
        tasks = yaml.safe_load(handle)
    confirm = [t for t in tasks if "gpufleet.llm.hf_snapshot" in t]
    assert len(confirm) == 1 and confirm[0].get("any_errors_fatal") is True
    # The confirming call, stood in by a record of who would make it (its `when` kept as it ships).
    record = {"content": "{{ inventory_hostname }}", "dest": "{{ out_dir }}/{{ inventory_hostname }}.confirmed", "mode": "0600"}
    stand_in = {"name": "Who confirms", "ansible.builtin.copy": record, "when": confirm[0]["when"]}
    inventory = "\n".join("%s ansible_connection=local model_peer_hub_access=%s ansible_python_interpreter=%s"
                          % (h, str(ok).lower(), sys.executable) for h, ok in hub_access.items())
    (tmp_path / "inventory.ini").write_text(inventory + "\n")
    defaults = yaml.safe_load(open(os.path.join(ROOT, "roles", "model", "defaults", "main.yml")))
    variables = {"model_peer_unconfirmed_listing_ok": defaults["model_peer_unconfirmed_listing_ok"],
                 "_model_item": {"name": "kimi", "repo_id": "lab/kimi"},
                 "model_pinned_resolvers": {"kimi": next(iter(hub_access))}, "out_dir": str(tmp_path)}
    variables.update(play_vars)
    tasks = [stand_in if "gpufleet.llm.hf_snapshot" in t else t for t in tasks]
    playbook = [{"hosts": "all", "gather_facts": False, "vars": variables, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(json.dumps(playbook))
    env = dict(os.environ, ANSIBLE_LOCALHOST_WARNING="False")
    argv = [sys.executable, "-m", "ansible.cli.playbook", "-i", str(tmp_path / "inventory.ini"), str(tmp_path / "play.yml")]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    confirmed = sorted(h for h in hub_access if (tmp_path / (h + ".confirmed")).exists())
    return proc, confirmed


def test_every_other_host_with_hub_access_confirms(tmp_path):
    proc, confirmed = _run(tmp_path, {"gpu1": True, "gpu2": True, "gpu3": True, "gpu4": False})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert confirmed == ["gpu2", "gpu3"]


def test_hosts_without_hub_access_never_take_one_hosts_word(tmp_path):
    proc, confirmed = _run(tmp_path, {"gpu1": True, "gpu2": False, "gpu3": False})
    assert proc.returncode != 0 and confirmed == []
    assert "gpu2, gpu3 (without Hub access) would take the listing of kimi on the word of gpu1 alone" in proc.stdout
    assert "model_peer_unconfirmed_listing_ok" in proc.stdout


def test_the_operator_may_accept_an_unconfirmed_listing(tmp_path):
    proc, confirmed = _run(tmp_path, {"gpu1": True, "gpu2": False}, model_peer_unconfirmed_listing_ok=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert confirmed == []


def test_a_fleet_with_hub_access_everywhere_needs_no_opt_in(tmp_path):
    proc, confirmed = _run(tmp_path, {"gpu1": True, "gpu2": True})
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert confirmed == ["gpu2"]
