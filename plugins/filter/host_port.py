# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: host_port
short_description: Join a host and a port as C(host:port), bracketing an IPv6 literal
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Returns C(host:port). A host that contains C(:) and is not bracketed yet is an IPv6 literal and
    is written as C([host]:port) (RFC 3986), the form URLs and SGLang's C(dist-init-addr) require.
options:
  _input:
    description: Host name, IPv4 address or IPv6 address (bracketed or not).
    type: str
    required: true
  port:
    description: Port number.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: The probe URL of a server listening on an IPv6 address
  ansible.builtin.debug:
    msg: "http://{{ 'fd00::7' | gpufleet.llm.host_port(30000) }}"  # http://[fd00::7]:30000
"""

RETURN = r"""
_value:
  description: C(host:port), or C([host]:port) for an IPv6 literal.
  type: str
"""

from ansible.errors import AnsibleFilterError


def host_port(host, port):
    host = "" if host is None else str(host).strip()
    if not host:
        raise AnsibleFilterError("host_port: the host is empty; give a host name or an IP address")
    try:
        port = int(port)
    except (TypeError, ValueError):
        raise AnsibleFilterError("host_port: port %r is not a number; give an integer from 1 to 65535" % (port,))
    if not 0 < port < 65536:
        raise AnsibleFilterError("host_port: port %d is out of range; give an integer from 1 to 65535" % port)
    if ":" in host and not host.startswith("["):
        host = "[%s]" % host
    return "%s:%d" % (host, port)


class FilterModule(object):
    def filters(self):
        return {"host_port": host_port}
