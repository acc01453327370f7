# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the sglang unit stops and restarts (issue 22 item 3), rendered from the shipped template with the role's
shipped defaults: SIGTERM to SGLang's main process only (KillMode=mixed: SGLang drains, then systemd SIGKILLs
the rest), TimeoutStopSec and the start limit from variables (in [Unit], where systemd reads them), and the
role's own restarts reset that limit first (handlers/main.yml, tasks/rollback.yml).

systemd 252's behaviour of these directives was checked on a lab host (docs/sglang_role.md, "Stopping").
"""
from __future__ import annotations

import os
import re

import yaml

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template  # ansible-core >= 2.19: only trusted strings are templated
except ImportError:  # pragma: no cover - older ansible-core templates every string
    def trust_as_template(value):
        return value

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "sglang")


def _defaults():
    with open(os.path.join(ROLE, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


def _sections(**overrides):
    """{section: [directive lines]} of the unit rendered with the role's defaults (and ``overrides``)."""
    with open(os.path.join(ROLE, "templates", "sglang.service.j2")) as handle:
        source = handle.read()
    defaults = _defaults()
    variables = dict(ansible_managed="managed", sglang_instance="itest", sglang_user="sglang", sglang_group="sglang",
                     sglang_service={"config": "/etc/sglang/itest.yaml", "env_file": "/etc/sglang/itest.env"},
                     sglang_python="/opt/sglang/0.5.23/bin/python", sglang_launch_module="sglang.launch_server",
                     _sglang_target="/srv/models/kimi/abc", _sglang_drafter="", sglang_protect_home=True,
                     **{k: defaults[k] for k in ("sglang_stop_timeout", "sglang_start_limit_interval", "sglang_start_limit_burst")})
    variables.update(overrides)
    text = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(source))
    sections, current = {}, None
    for line in text.splitlines():
        if re.match(r"^\[\w+\]$", line):
            current = sections.setdefault(line.strip("[]"), [])
        elif current is not None and line and not line.startswith("#"):
            current.append(line)
    return sections


def test_sigterm_reaches_the_main_process_only_and_the_stop_waits_for_the_drain():
    service = _sections()["Service"]
    assert "KillMode=mixed" in service
    assert "KillMode=control-group" not in service
    assert "TimeoutStopSec=900" in service
    assert _defaults()["sglang_stop_timeout"] == 900
    # a crash is restarted, a stop is not
    assert "Restart=on-failure" in service


def test_the_start_limit_is_in_unit_and_stops_a_crash_loop():
    sections = _sections(sglang_start_limit_interval=1200, sglang_start_limit_burst=3, sglang_stop_timeout=1800)
    assert "StartLimitIntervalSec=1200" in sections["Unit"]
    assert "StartLimitBurst=3" in sections["Unit"]
    # systemd reads StartLimitIntervalSec= only in [Unit]: systemd 252 says "Unknown key 'StartLimitIntervalSec' in section [Service], ignoring"
    assert not [line for line in sections["Service"] if line.startswith("StartLimit")]
    assert "TimeoutStopSec=1800" in sections["Service"]


def _tasks(path):
    with open(os.path.join(ROLE, path)) as handle:
        return yaml.safe_load(handle)


def _reset_failed_index(tasks):
    for number, task in enumerate(tasks):
        argv = (task.get("ansible.builtin.command") or {}).get("argv") or []
        if argv[:2] == ["systemctl", "reset-failed"]:
            return number
    return None


def test_the_roles_own_restarts_reset_the_start_limit_first():
    handlers = _tasks("handlers/main.yml")
    restart = [n for n, t in enumerate(handlers) if (t.get("ansible.builtin.systemd_service") or {}).get("state") == "restarted"]
    reset = _reset_failed_index(handlers)
    assert reset is not None and restart and reset < restart[0]
    rollback = _tasks("tasks/rollback.yml")
    restart = [n for n, t in enumerate(rollback) if (t.get("ansible.builtin.systemd_service") or {}).get("state") == "restarted"]
    reset = _reset_failed_index(rollback)
    assert reset is not None and restart and reset < restart[0]


def test_the_server_leaves_its_routers_before_the_restart():
    handlers = _tasks("handlers/main.yml")
    listen = [t.get("listen") for t in handlers]
    assert set(listen) == {"sglang restart"}
    leave = [n for n, t in enumerate(handlers) if t.get("ansible.builtin.include_tasks") == "router_leave.yml"]
    restart = [n for n, t in enumerate(handlers) if "ansible.builtin.systemd_service" in t]
    # handlers of one topic run in file order: the leave (and its drain) before the restart
    assert leave and restart and leave[0] < restart[0]
