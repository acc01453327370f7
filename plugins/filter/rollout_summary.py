# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_summary
short_description: Which servers of a rolling deploy moved to the new revision, which stayed on the old one and why
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - "A server moved when every rank finished its roll. Otherwise it stayed on its old revision, for one of these
    reasons: its stage failed (on the ranks named), its batch failed (on the ranks named; rolled back when the
    sglang role restored the previous config), it was halted after an earlier batch failed, or the run ended
    before its batch."
options:
  _input:
    description: The servers, each the list of its ranks (rank 0 first).
    type: list
    elements: list
    required: true
  hosts:
    description:
      - Per host C(staged), C(started), C(rolled), C(halted), C(rolled_back) (booleans) and C(commits) (model name
        to commit, read from rank 0 for a server that moved).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Say what moved
  ansible.builtin.debug:
    msg: "{{ (servers | gpufleet.llm.rollout_summary(flags)).lines }}"
  vars:
    servers: [[gpu1], [gpu2]]
    flags: {gpu1: {staged: true, started: true, rolled: true}, gpu2: {staged: true, halted: true}}
"""

RETURN = r"""
_value:
  description:
    - C(moved) and C(stayed) (each C(server), C(ranks); C(commits) when moved, C(why) when stayed), C(lines) (one
      per server) and C(ok) (every server moved).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils import _rollout


def rollout_summary(servers: list, hosts: dict) -> dict:
    try:
        return _rollout.summary(servers, hosts)
    except _rollout.RolloutError as exc:
        raise AnsibleFilterError("rollout_summary: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {"rollout_summary": rollout_summary}
