# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_host_problems filter, and what the sglang role ships for SGLang 0.5.23 (issue 11 item 8):
its release facts agree with the real wheel's METADATA, its constraints pin the closure without extras."""
from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
import yaml

from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template  # ansible-core >= 2.19: only trusted strings are templated
except ImportError:
    def trust_as_template(text):
        return text

from ansible_collections.gpufleet.llm.plugins.filter.sglang_host_problems import FilterModule, sglang_host_problems
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures.sglang_env import (  # noqa: F401 pylint: disable=unused-import
    ROOT, SGLANG_VERSION, sglang_python)

RELEASE_DIR = os.path.join(ROOT, "roles", "sglang", "files", "sglang-%s" % SGLANG_VERSION)


def _release():
    with open(os.path.join(RELEASE_DIR, "release.yml")) as handle:
        return yaml.safe_load(handle)


def _constraints():
    pins = {}
    with open(os.path.join(RELEASE_DIR, "constraints.txt")) as handle:
        for line in handle:
            line = line.strip()
            if line and not line.startswith("#"):
                name, version = line.split("==")
                pins[name] = version
    return pins


def test_filter_is_registered_and_checks_a_dict():
    assert FilterModule().filters()["sglang_host_problems"] is sglang_host_problems
    problems = sglang_host_problems({"python": "/usr/bin/python3", "python_version": "3.10.12",
                                     "requires_python": ">=3.11", "sglang_version": "0.5.23"})
    assert len(problems) == 1 and "requires Python >=3.11" in problems[0]
    with pytest.raises(AnsibleFilterError, match="expected a dict of host facts, got list"):
        sglang_host_problems(["3.10"])


def test_release_facts_refuse_an_old_python_and_an_old_driver():
    release = _release()
    assert release["sglang_version"] == SGLANG_VERSION
    problems = sglang_host_problems(dict(release, python="/usr/bin/python3", python_version="3.10.12",
                                         driver_version="570.133.20"))
    assert len(problems) == 2
    assert "needs driver 580.65.06 or newer" in problems[1]


def test_constraints_pin_the_closure_without_extras():
    pins = _constraints()
    release = _release()
    assert pins["sglang"] == SGLANG_VERSION
    assert pins["torch"] == release["torch"]
    # The diffusion extra (what sglang[all] pulls) is not in the closure.
    for name in ("diffusers", "opencv-python-headless", "moviepy", "cache-dit"):
        assert name not in pins
    for name, version in pins.items():
        assert re.match(r"^[a-z0-9]+(-[a-z0-9]+)*$", name), name
        assert re.match(r"^[0-9][0-9A-Za-z.+!]*$", version), (name, version)


def test_role_installs_sglang_without_extras():
    with open(os.path.join(ROOT, "roles", "sglang", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    packages = defaults["sglang_pip_packages"]
    assert packages == ["sglang=={{ sglang_version }}"]


METADATA = r'''
import importlib.metadata as m, json
dist = m.distribution("sglang")
print(json.dumps({"requires_python": dist.metadata["Requires-Python"], "requires": dist.requires}))
'''


def test_release_facts_match_the_wheel_metadata(sglang_python):  # noqa: F811 pylint: disable=redefined-outer-name
    out = subprocess.run([sglang_python, "-c", METADATA], stdout=subprocess.PIPE, check=True, timeout=120)
    meta = json.loads(out.stdout)
    release = _release()
    assert meta["requires_python"] == release["requires_python"]
    torch_pins = [req for req in meta["requires"] if re.match(r"^torch\s*==", req)]
    assert torch_pins == ["torch==%s" % release["torch"]]
    pins = _constraints()
    # Every exact pin of the wheel (without a marker or extra) is what the constraints hold.
    for req in meta["requires"]:
        match = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==([^;,\s]+)$", req)
        if match:
            name = re.sub(r"[-_.]+", "-", match.group(1)).lower()
            assert pins.get(name) == match.group(2), req


def _render_unit(**facts):
    with open(os.path.join(ROOT, "roles", "sglang", "templates", "sglang.service.j2")) as handle:
        source = handle.read()
    variables = dict(ansible_managed="managed", sglang_instance="itest", sglang_user="sglang", sglang_group="sglang",
                     sglang_service={"config": "/etc/sglang/itest.yaml", "env_file": "/etc/sglang/itest.env"},
                     sglang_python="/opt/sglang/0.5.23/bin/python", sglang_launch_module="sglang.launch_server",
                     _sglang_target="/srv/models/kimi/abc", _sglang_drafter="", sglang_protect_home=True,
                     sglang_stop_timeout=900, sglang_start_limit_interval=3600, sglang_start_limit_burst=5)
    variables.update(facts)
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(source)).splitlines()


def test_unit_on_a_gpu_host_runs_nvidia_modprobe_and_waits_for_the_fabric_manager():
    lines = _render_unit(_sglang_fabricmanager=True, _sglang_nvidia_modprobe="/usr/bin/nvidia-modprobe",
                         sglang_protect_home=False)
    assert "ExecStartPre=+/usr/bin/nvidia-modprobe -u -c0" in lines
    exec_start = [number for number, line in enumerate(lines) if line.startswith("ExecStart=")]
    assert lines.index("ExecStartPre=+/usr/bin/nvidia-modprobe -u -c0") < exec_start[0]
    assert lines.index("After=nvidia-fabricmanager.service") < lines.index("[Service]")
    assert "Wants=nvidia-fabricmanager.service" in lines
    assert "ProtectHome=read-only" in lines and "ProtectHome=yes" not in lines
    assert "NoNewPrivileges=yes" in lines


def test_unit_without_those_facts_keeps_the_sandbox_and_sets_the_compose_stack_limit():
    lines = _render_unit()
    assert not [line for line in lines if line.startswith("ExecStartPre") or "fabricmanager" in line]
    assert "ProtectHome=yes" in lines
    # SGLang's docker/compose.yaml: "ulimits: memlock: -1, stack: 67108864".
    assert "LimitSTACK=67108864" in lines and "LimitMEMLOCK=infinity" in lines
