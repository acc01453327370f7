# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_lineup
short_description: Line hosts up in batches, each batch opened by its marker
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Turns batches of hosts into the lineup that playbooks/stage.yml and playbooks/deploy.yml add to their batch group
    with C(ansible.builtin.add_host) - each batch opened by its marker C(<prefix>-<n>), a name that is never
    contacted and ends itself at once, so that a batch in which every host fails is never "all failed" (which
    would make Ansible end the run before the later plays).
  - The first marker is there even when there is no batch at all - the play over the lineup then holds its
    marker alone and does nothing, where an empty group would end a run under C(host_pattern_mismatch = error).
options:
  _input:
    description: The batches, each a list of host names.
    type: list
    elements: list
    required: true
  prefix:
    description: The markers' name before C(-<n>), e.g. C(gpufleet-roll-batch).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Line up two batches
  ansible.builtin.debug:
    msg: "{{ [['gpu1'], ['gpu2', 'gpu3']] | gpufleet.llm.rollout_lineup('gpufleet-roll-batch') }}"
  # [{'name': 'gpufleet-roll-batch-1', 'marker': true, 'batch': 1}, {'name': 'gpu1', 'marker': false, 'batch': 1},
  #  {'name': 'gpufleet-roll-batch-2', 'marker': true, 'batch': 2}, {'name': 'gpu2', ...}, {'name': 'gpu3', ...}]
"""

RETURN = r"""
_value:
  description: The lineup in play order, each C(name), C(marker) (bool) and C(batch) (its number, from 1).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def rollout_lineup(batches: list, prefix: str) -> list:
    try:
        return _rollout.lineup(batches, prefix)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rollout_lineup: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"rollout_lineup": rollout_lineup}
