# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_serial
short_description: The batch sizes of a lineup, counting a marker only when --limit admits it
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - The C(serial:) list of the play over a lineup (gpufleet.llm.rollout_lineup) - each batch's hosts, plus its marker
    when the C(--limit) lets the marker into the play.
  - C(--limit) filters the hosts C(ansible.builtin.add_host) adds too - a limit that does not name the markers keeps
    them out of the play, and counting them anyway would make every batch take a host of the next one.
options:
  _input:
    description: The lineup, each C(name), C(marker) and C(batch), as gpufleet.llm.rollout_lineup returns it.
    type: list
    elements: dict
    required: true
  in_limit:
    description: The hosts the limit admits, C(query('inventory_hostnames', ansible_limit | default('all'))).
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Batch sizes under --limit gpu1,gpu2,gpu3 (the markers left out)
  ansible.builtin.debug:
    msg: >-
      {{ [['gpu1'], ['gpu2', 'gpu3']] | gpufleet.llm.rollout_lineup('gpufleet-roll-batch')
         | gpufleet.llm.rollout_serial(['gpu1', 'gpu2', 'gpu3']) }}
  # [1, 2]
"""

RETURN = r"""
_value:
  description: One size per batch, in batch order.
  type: list
  elements: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def rollout_serial(hosts: list, in_limit: list) -> list:
    try:
        return _rollout.serial(hosts, in_limit)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rollout_serial: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"rollout_serial": rollout_serial}
