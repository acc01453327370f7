# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.llm contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_url
short_description: The URL a prober reaches an SGLang server at, from the server's options
version_added: 0.1.0
author: gpufleet.llm contributors
description:
  - Returns C(http://host:port) for a server started with these dash-form options (C(host), C(port)).
  - An unset host is SGLang's default C(127.0.0.1) and an unset port its default C(30000). A wildcard
    listen address (C(0.0.0.0), C(::)) is reached on loopback; an IPv6 literal is bracketed (RFC 3986).
  - The sglang role derives the new server's URL (C(sglang_service.url)) and, on a rollback, the
    restored server's from the same rule.
options:
  _input:
    description: The server's options in dash form, as written to C(/etc/sglang/<instance>.yaml).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Where the server of these options answers
  ansible.builtin.debug:
    msg: "{{ {'host': '0.0.0.0', 'port': 31000} | gpufleet.llm.sglang_url }}"  # http://127.0.0.1:31000
"""

RETURN = r"""
_value:
  description: C(http://host:port).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.llm.plugins.filter.host_port import host_port

# SGLang 0.5.23's ServerArgs defaults for host and port.
_DEFAULT_HOST = "127.0.0.1"
_DEFAULT_PORT = 30000
_WILDCARDS = ("0.0.0.0", "::", "[::]")


def sglang_url(options):
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise AnsibleFilterError("sglang_url: expected the server's options as a dict, got %s" % type(options).__name__)
    host = options.get("host")
    host = _DEFAULT_HOST if host in (None, "") else str(host).strip()
    port = options.get("port")
    port = _DEFAULT_PORT if port in (None, "") else port
    return "http://%s" % host_port(_DEFAULT_HOST if host in _WILDCARDS else host, port)


class FilterModule(object):
    def filters(self):
        return {"sglang_url": sglang_url}
