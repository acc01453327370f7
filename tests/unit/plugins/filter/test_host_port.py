# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter.host_port import FilterModule, host_port


@pytest.mark.parametrize("host, port, expected", [
    ("10.20.0.7", 50000, "10.20.0.7:50000"),
    ("gpu1.example.net", "30000", "gpu1.example.net:30000"),  # a port from a template is a string
    ("fd00::7", 50000, "[fd00::7]:50000"),  # SGLang's NetworkAddress.parse refuses a bare IPv6
    ("[fd00::7]", 50000, "[fd00::7]:50000"),
    ("::1", 1, "[::1]:1"),
])
def test_host_port(host, port, expected):
    assert host_port(host, port) == expected
    assert FilterModule().filters()["host_port"] is host_port


@pytest.mark.parametrize("host, port, message", [
    ("", 50000, "the host is empty"),
    (None, 50000, "the host is empty"),
    ("gpu1", "http", "port 'http' is not a number"),
    ("gpu1", 0, "port 0 is out of range"),
    ("gpu1", 65536, "port 65536 is out of range"),
])
def test_host_port_refuses_bad_input(host, port, message):
    with pytest.raises(AnsibleFilterError, match=message):
        host_port(host, port)
