# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpufleet.llm.sglang_url: where a prober reaches the server of given options. The role renders it
for sglang_service.url (tests/unit/roles/test_sglang_service_url.py) and for the restored server on a
rollback (tests/unit/roles/test_sglang_rollback_url.py); this tests the rule itself."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.llm.plugins.filter.sglang_url import FilterModule, sglang_url


@pytest.mark.parametrize("options, url", [
    ({}, "http://127.0.0.1:30000"),
    (None, "http://127.0.0.1:30000"),
    ({"host": "", "port": None}, "http://127.0.0.1:30000"),
    ({"host": "0.0.0.0", "port": 31000}, "http://127.0.0.1:31000"),
    ({"host": "::"}, "http://127.0.0.1:30000"),
    ({"host": "[::]", "port": "8000"}, "http://127.0.0.1:8000"),
    ({"host": "fd00::7", "port": 30002}, "http://[fd00::7]:30002"),
    ({"host": "[fd00::7]"}, "http://[fd00::7]:30000"),
    ({"host": "gpu1.example.net", "port": 30001, "model-path": "/m"}, "http://gpu1.example.net:30001"),
])
def test_url(options, url):
    assert sglang_url(options) == url


@pytest.mark.parametrize("options, words", [
    (["host", "x"], "expected the server's options as a dict"),
    ({"port": 70000}, "out of range"),
    ({"port": "http"}, "not a number"),
])
def test_bad_options_name_the_problem(options, words):
    with pytest.raises(AnsibleFilterError, match=words):
        sglang_url(options)


def test_registered():
    assert FilterModule().filters()["sglang_url"] is sglang_url
