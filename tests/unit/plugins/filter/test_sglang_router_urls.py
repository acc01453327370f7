# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.sglang_router_urls: the routers the sglang role's roll takes a server out of and back
into, from the router group's inventory variables (the real hostvars: tests/unit/roles/test_sglang_router_roll_facts.py)."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter.sglang_router_urls import FilterModule, sglang_router_urls

HOSTVARS = {
    "r1": {"sglang_router_address": "10.0.9.1", "model_peer_address": "10.0.8.1", "ansible_host": "mgmt-r1"},
    "r2": {"model_peer_address": "fd00::2", "ansible_host": "mgmt-r2", "sglang_router_port": 31000},
    "r3": {"ansible_host": "mgmt-r3", "sglang_router_address": ""},
    "r4": {},
    "r5": {"sglang_router_port": "", "sglang_router_address": "[fd00::5]"},
}


@pytest.mark.parametrize("hosts, urls", [
    (["r1"], ["http://10.0.9.1:30080"]),
    (["r2"], ["http://[fd00::2]:31000"]),
    (["r3"], ["http://mgmt-r3:30080"]),
    (["r4"], ["http://r4:30080"]),
    (["r5"], ["http://[fd00::5]:30080"]),
    (["r4", "r1"], ["http://r4:30080", "http://10.0.9.1:30080"]),
    (["elsewhere"], ["http://elsewhere:30080"]),
    ([], []),
    (None, []),
])
def test_urls(hosts, urls):
    assert sglang_router_urls(hosts, HOSTVARS, 30080) == urls


def test_default_port():
    assert sglang_router_urls(["r4"], HOSTVARS) == ["http://r4:30080"]
    assert sglang_router_urls(["r4"], HOSTVARS, 30099) == ["http://r4:30099"]


@pytest.mark.parametrize("bad", ["r1", {"r1": 1}, 3])
def test_refuses_what_is_not_a_list(bad):
    with pytest.raises(AnsibleFilterError, match="expected a list of router hosts"):
        sglang_router_urls(bad, HOSTVARS)


def test_registered():
    assert FilterModule().filters()["sglang_router_urls"] is sglang_router_urls
