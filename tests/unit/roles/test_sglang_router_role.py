# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_router role's own facts, preflight and templates, rendered by a real ansible-playbook on localhost
(tests/unit/fixtures/localplay.py): what ships is what is tested. No lab needed; the lab run is the integration
target sglang_router."""
from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.gpufleet.llm.tests.unit.fixtures.localplay import play_command, run_play

pytestmark = pytest.mark.playbook  # runs a real ansible-playbook (tests/unit/conftest.py)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TEMPLATES = os.path.join(ROOT, "roles", "sglang_router", "templates")
KEY = 'sk-lab-"quoted"\\back$slash-fake'  # lab-only, fake; quotes and a backslash to escape


def _render(tmp_path, play_vars):
    tasks = [
        {"name": "Facts", "ansible.builtin.include_role": {"name": "gpufleet.llm.sglang_router", "tasks_from": "facts.yml",
                                                           "public": True}},
        {"name": "Unit", "ansible.builtin.template": {"src": os.path.join(TEMPLATES, "sglang-router.service.j2"),
                                                      "dest": str(tmp_path / "unit"), "mode": "0600"}},
        {"name": "Env", "ansible.builtin.template": {"src": os.path.join(TEMPLATES, "router.env.j2"),
                                                     "dest": str(tmp_path / "env"), "mode": "0600"}},
        {"name": "Out", "ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "mode": "0600", "content": (
            "{{ {'url': _sglang_router_url, 'args': _sglang_router_args, 'servers': _sglang_router_servers} | to_json }}")}},
    ]
    out = run_play(tmp_path, tasks, play_vars=play_vars)
    return out, (tmp_path / "unit").read_text(), (tmp_path / "env").read_text()


def test_unit_and_environment_keep_the_key_off_the_command_line(tmp_path):
    out, unit, env = _render(tmp_path, {"sglang_router_api_key": KEY, "sglang_router_workers_from": "ungrouped",
                                        "sglang_router_address": "fd00::5", "sglang_router_environment": {"RUST_LOG": "info"}})
    assert out["url"] == "http://[fd00::5]:30080"
    assert out["servers"] == ["localhost"]
    args = out["args"]
    assert args[:4] == ["--host", "fd00::5", "--port", "30080"]
    assert args[args.index("--policy") + 1] == "cache_aware"
    assert args[args.index("--prometheus-host") + 1] == "127.0.0.1"  # not the router's 0.0.0.0 default
    assert args[args.index("--health-check-interval-secs") + 1] == "60"
    assert args[args.index("--health-failure-threshold") + 1] == "3"
    assert "--api-key" not in args
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    assert len(exec_start) == 1 and "gpufleet-sglang-router.py --host fd00::5 --port 30080" in exec_start[0]
    assert "sk-lab" not in unit and "--api-key" not in unit
    for line in ("EnvironmentFile=/etc/sglang-router/sglang-router.env", "Environment=HF_HUB_OFFLINE=1",
                 "NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateDevices=yes", "ProtectProc=invisible",
                 "CapabilityBoundingSet=", "KillMode=mixed", "TimeoutStopSec=210", "StartLimitBurst=5"):
        assert line in unit.splitlines(), line
    # systemd's EnvironmentFile: a double-quoted value, \" and \\ escaped
    assert 'SGLANG_ROUTER_API_KEY="sk-lab-\\"quoted\\"\\\\back$slash-fake"' in env.splitlines()
    assert 'RUST_LOG="info"' in env.splitlines()


def test_a_low_port_gets_only_the_bind_capability(tmp_path):
    _out, unit, _env = _render(tmp_path, {"sglang_router_port": 443, "sglang_router_workers_from": "ungrouped"})
    assert "CapabilityBoundingSet=CAP_NET_BIND_SERVICE" in unit.splitlines()
    assert "AmbientCapabilities=CAP_NET_BIND_SERVICE" in unit.splitlines()


@pytest.mark.parametrize("play_vars, words", [
    ({"sglang_router_policy": "power_of_two"}, ["routes on the workers' load (/get_load)", "use cache_aware or round_robin"]),
    ({"sglang_router_policy": "bucket"}, ["routes on the workers' load"]),
    ({"sglang_router_policy": "manual"}, ["must be one of cache_aware, round_robin, random, got manual"]),
    ({"sglang_router_port": 70000}, ["sglang_router_port must be a port number"]),
    ({"sglang_router_prometheus_port": 30080}, ["must differ from sglang_router_port"]),
    ({"sglang_router_api_key": "a\nb"}, ["must be one line"]),
    ({"sglang_router_extra_args": ["--api-key=x"]}, ["must not hold --api-key"]),
    ({"sglang_router_workers_from": "no_such_group"}, ["is not an inventory group"]),
])
def test_preflight_refuses_with_the_reason(tmp_path, play_vars, words):
    tasks = [{"name": "Preflight", "ansible.builtin.include_role": {"name": "gpufleet.llm.sglang_router",
                                                                    "tasks_from": "preflight.yml"}}]
    argv, env = play_command(tmp_path, tasks, play_vars=play_vars)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode != 0, proc.stdout[-2000:]
    for word in words:
        assert word in proc.stdout, proc.stdout[-2000:]


def test_preflight_passes_the_defaults(tmp_path):
    tasks = [{"name": "Preflight", "ansible.builtin.include_role": {"name": "gpufleet.llm.sglang_router",
                                                                    "tasks_from": "preflight.yml"}},
             {"name": "Out", "ansible.builtin.copy": {"dest": str(tmp_path / "out.json"), "content": "{{ {} | to_json }}",
                                                      "mode": "0600"}}]
    assert run_play(tmp_path, tasks, play_vars={"sglang_router_workers_from": "ungrouped"}) == {}
