# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_router_urls
short_description: The base URLs of the SGLang routers of a group, from their inventory variables
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Returns C(http://address:port) for every host of the router group, in the group's order.
  - The address is the host's C(sglang_router_address), else its C(model_peer_address) (the cluster address),
    else its C(ansible_host), else its inventory name. An IPv6 literal is bracketed (RFC 3986).
  - The port is the host's C(sglang_router_port), else O(port).
  - The sglang role's roll takes a server out of these routers before it restarts it and adds it back
    after its probe (docs/rollout.md); the sglang_router role listens there.
options:
  _input:
    description: The inventory names of the router hosts (C(groups[sglang_router_group])).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  port:
    description: The port of a router host that does not set C(sglang_router_port).
    type: int
    default: 30080
"""

EXAMPLES = r"""
- name: Where the routers listen
  ansible.builtin.debug:
    msg: "{{ groups.get('sglang_routers', []) | gpufleet.llm.sglang_router_urls(hostvars, 30080) }}"
"""

RETURN = r"""
_value:
  description: One C(http://address:port) per router host; empty when the group is empty or absent.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.llm.plugins.filter.host_port import host_port

_ADDRESS_VARS = ("sglang_router_address", "model_peer_address", "ansible_host")


def _first_set(host_vars, names):
    for name in names:
        value = host_vars.get(name) if name in host_vars else None
        if value not in (None, ""):
            return str(value).strip()
    return None


def sglang_router_urls(hosts, hostvars, port=30080):
    if hosts is None:
        return []
    if isinstance(hosts, str) or not isinstance(hosts, (list, tuple)):
        raise AnsibleFilterError("sglang_router_urls: expected a list of router hosts, got %s" % type(hosts).__name__)
    urls = []
    for host in hosts:
        host_vars = hostvars[host] if host in hostvars else {}
        address = _first_set(host_vars, _ADDRESS_VARS) or str(host)
        host_port_value = host_vars.get("sglang_router_port") if "sglang_router_port" in host_vars else None
        urls.append("http://%s" % host_port(address, port if host_port_value in (None, "") else host_port_value))
    return urls


class FilterModule(object):
    def filters(self):
        return {"sglang_router_urls": sglang_router_urls}
