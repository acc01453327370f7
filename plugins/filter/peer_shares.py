# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: peer_shares
short_description: Split a repository listing between the hosts that fetch it from the Hub
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Assigns every path of a listing (the C(files) of gpufleet.llm.hf_snapshot's C(resolve_only) result) to
    exactly one of O(hosts) - largest files first, each to the host with the fewest bytes so far. Each host
    then fetches its share from the Hub and the others take it from that host (C(model_distribution=peers)).
  - Deterministic - equal sizes are taken in path order and a tie between hosts goes to the host whose name
    sorts first, so every run (and every controller) makes the same plan from the same listing.
  - Every host of O(hosts) is a key of the result, with an empty list when it gets nothing.
options:
  _input:
    description: The listing, a list of dicts with at least C(path) (str) and C(size) (int, bytes).
    type: list
    elements: dict
    required: true
  hosts:
    description: The hosts with Hub access. Must not be empty unless the listing is.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Who fetches what from the Hub
  ansible.builtin.debug:
    msg: "{{ model_pinned_listings.kimi | gpufleet.llm.peer_shares(['gpu1', 'gpu2']) }}"
  # {'gpu1': ['model-00001-of-000004.safetensors', ...], 'gpu2': ['model-00002-of-000004.safetensors', ...]}
"""

RETURN = r"""
_value:
  description: Host name -> the paths that host fetches from the Hub, largest first.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.module_utils._peerserve import shares as _shares


def peer_shares(listing: object, hosts: object) -> dict[str, list[str]]:
    try:
        return _shares.peer_shares(listing, hosts)
    except _shares.SharesError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule(object):
    def filters(self):
        return {"peer_shares": peer_shares}
