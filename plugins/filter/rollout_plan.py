# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_plan
short_description: Batches of servers for a rolling deploy, leaving out every server whose stage failed on any rank
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Groups hosts into servers (a multi-node server is all its ranks), keeps the servers whose every rank staged
    (fetched and verified every model in this run) and cuts them into batches of O(per_batch) servers, the ranks
    of one server always in one batch. playbooks/deploy.yml rolls these batches.
  - A server with a rank whose stage failed is not rolled; its other ranks are left out with it, and a message
    says so.
options:
  _input:
    description:
      - The hosts in roll order, each C(name), C(ranks) (every rank of its multi-node server in the play, sorted;
        empty or absent for a single-node server) and C(staged) (bool).
    type: list
    elements: dict
    required: true
  per_batch:
    description: Servers per batch (C(gpufleet_serial)); values below 1 count as 1.
    type: int
    required: true
  staged:
    description:
      - When given, O(_input) is the servers (each the list of its ranks, as gpufleet.llm.rank_groups returns them)
        and this lists the hosts whose stage succeeded.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Plan two servers per batch
  ansible.builtin.debug:
    msg: "{{ [{'name': 'gpu1', 'staged': true}, {'name': 'gpu2', 'staged': false}] | gpufleet.llm.rollout_plan(2) }}"

- name: The same plan from servers and the hosts that staged
  ansible.builtin.debug:
    msg: "{{ [['gpu1'], ['gpu2']] | gpufleet.llm.rollout_plan(2, staged=['gpu1']) }}"
"""

RETURN = r"""
_value:
  description:
    - C(servers) (each C(ranks), C(staged), C(not_staged)), C(batches) (lists of hosts) and C(left_out) (one message
      per server that is not rolled).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def rollout_plan(hosts: list, per_batch: int, staged: list | None = None) -> dict:
    if not isinstance(hosts, list):
        raise AnsibleFilterError("rollout_plan: expected a list of hosts, got %s" % type(hosts).__name__)
    try:
        if staged is not None:
            hosts = _rollout.hosts_of(hosts, staged)
        return _rollout.plan(hosts, per_batch=per_batch)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rollout_plan: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"rollout_plan": rollout_plan}
