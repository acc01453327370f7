# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_host_problems
short_description: What keeps an SGLang host from installing or starting the sglang role's unit
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Takes facts the sglang role gathered on a host and returns one message per problem, each naming what is
    wrong and the fix. An empty list means the host is fit. Each check runs only when its facts are given.
  - "Interpreter (C(python_version) given): the Python that creates the versioned venv must satisfy SGLang's
    C(Requires-Python) (C(requires_python), a PEP 440 specifier such as C(>=3.11))."
  - "Driver (C(driver_version) given): the NVIDIA driver must be at least C(min_driver), the minimum of the CUDA
    build of the torch that SGLang pins."
  - "Devices (C(uvm) given): with no C(nvidia_modprobe), C(/dev/nvidia-uvm) must exist (the unit's
    C(NoNewPrivileges=yes) stops CUDA from creating it through the setuid nvidia-modprobe); with C(mig) on,
    C(/dev/nvidia-caps) must exist."
  - "Home (C(paths) given): no path may lie under C(/home), C(/root) or C(/run/user) while C(protect_home) is on
    (the unit's C(ProtectHome=yes) hides them)."
options:
  _input:
    description:
      - "The facts: C(python), C(python_version), C(python_error), C(requires_python), C(sglang_version),
        C(driver_version), C(min_driver), C(cuda), C(torch), C(nvidia_modprobe) (path or empty), C(uvm), C(mig),
        C(caps) (booleans), C(protect_home) (boolean, default true) and C(paths) (a dict of description to path)."
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Refuse an interpreter older than SGLang's Requires-Python
  ansible.builtin.assert:
    that: problems | length == 0
    fail_msg: "{{ problems | join(' | ') }}"
  vars:
    problems: "{{ {'python': '/usr/bin/python3', 'python_version': '3.9.2', 'requires_python': '>=3.11'}
                  | gpufleet.llm.sglang_host_problems }}"
"""

RETURN = r"""
_value:
  description: One message per problem; empty when the host is fit.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils._sglang import host as _sglang_host


def sglang_host_problems(facts: dict) -> list[str]:
    if not isinstance(facts, dict):
        raise AnsibleFilterError("sglang_host_problems: expected a dict of host facts, got %s" % type(facts).__name__)
    return _sglang_host.host_problems(facts)


class FilterModule(object):
    def filters(self):
        return {"sglang_host_problems": sglang_host_problems}
