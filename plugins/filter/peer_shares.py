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


def _check_hosts(hosts: object) -> list[str]:
    if isinstance(hosts, (str, bytes)) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("peer_shares: hosts must be a list of host names, got %s" % type(hosts).__name__)
    names = [str(h) for h in hosts]
    if any(not n for n in names):
        raise AnsibleFilterError("peer_shares: hosts holds an empty name; give inventory host names")
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise AnsibleFilterError("peer_shares: hosts lists %s more than once; give each host once" % ", ".join(dups))
    return names


def _check_listing(listing: object) -> list[tuple[str, int]]:
    if isinstance(listing, (str, bytes, dict)) or not isinstance(listing, (list, tuple)):
        raise AnsibleFilterError("peer_shares: the input must be a listing (a list of {path, size}), got %s"
                                 % type(listing).__name__)
    rows: list[tuple[str, int]] = []
    seen: set[str] = set()
    for index, row in enumerate(listing):
        path = row.get("path") if isinstance(row, dict) else None
        if not isinstance(path, str) or not path:
            raise AnsibleFilterError("peer_shares: listing entry %d has no path; pass hf_snapshot's resolve_only `files`" % index)
        size = row.get("size")
        # bool is an int subclass: a True size is a template mistake, not one byte
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise AnsibleFilterError("peer_shares: listing entry %s has size %r; every entry needs its size in bytes (an integer >= 0)"
                                     % (path, size))
        if path in seen:
            raise AnsibleFilterError("peer_shares: listing holds %s twice; each path must appear once" % path)
        seen.add(path)
        rows.append((path, size))
    return rows


def peer_shares(listing: object, hosts: object) -> dict[str, list[str]]:
    names = _check_hosts(hosts)
    rows = _check_listing(listing)
    shares: dict[str, list[str]] = {n: [] for n in names}
    if not rows:
        return shares
    if not names:
        raise AnsibleFilterError("peer_shares: no host has Hub access to fetch %d files; set model_peer_hub_access "
                                 "true on at least one host" % len(rows))
    loads = {n: 0 for n in names}
    # Largest first, each to the lightest host (greedy LPT): within 4/3 of the best split, and a big
    # shard never lands last on an already loaded host.
    for path, size in sorted(rows, key=lambda r: (-r[1], r[0])):
        host = min(names, key=lambda n: (loads[n], n))
        shares[host].append(path)
        loads[host] += size
    return shares


class FilterModule(object):
    def filters(self):
        return {"peer_shares": peer_shares}
