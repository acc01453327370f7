# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rank_groups
short_description: Group hosts into servers, a multi-node server being all its ranks
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Groups host names into servers. A host whose multi-node group (C(sglang_multinode_group)) is an inventory group
    is one rank of the server made of that group's hosts; any other host is a single-node server.
  - Each server is its ranks, sorted (rank 0 first); each host is in one server; servers come in the order of their
    first host among the sorted O(_input).
  - playbooks/deploy.yml plans its roll and sums it up with it, the sglang role works out a host's rank with it.
  - A host that is not in its own multi-node group (within O(within)) is an error.
options:
  _input:
    description: The host names.
    type: list
    elements: str
    required: true
  groups:
    description: The inventory groups (the C(groups) magic variable).
    type: dict
    required: true
  multinode:
    description:
      - The multi-node group of each host, a dict host name -> group name, or one group name for every host.
        Empty, absent or not a group of O(groups) - a single-node server.
    type: raw
    required: true
  within:
    description: When given, a server's ranks are only those among these hosts (e.g. the hosts of the play).
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: The servers of the play
  ansible.builtin.debug:
    msg: >-
      {{ ansible_play_hosts_all | gpufleet.llm.rank_groups(groups,
           dict(ansible_play_hosts_all | zip(ansible_play_hosts_all | map('extract', hostvars)
                | map(attribute='sglang_multinode_group', default=''))),
           within=ansible_play_hosts_all) }}
  # [['gpu1'], ['gpu2', 'gpu3']]
"""

RETURN = r"""
_value:
  description: The servers, each the sorted list of its ranks.
  type: list
  elements: list
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def rank_groups(hosts: list, groups: dict, multinode, within: list | None = None) -> list:
    try:
        return _rollout.rank_groups(hosts, groups, multinode, within=within)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rank_groups: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"rank_groups": rank_groups}
