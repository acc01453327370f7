# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""URLs of routers and workers: checked once, matched across the spellings sglang-router 0.3.2 keeps apart."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common.failure import ModuleFailure
from ansible_collections.gpufleet.llm.plugins.module_utils._router import urls


def test_clean_strips_blanks_and_trailing_slashes():
    assert urls.clean(" http://10.0.4.11:30000/ ", "url") == "http://10.0.4.11:30000"
    assert urls.clean("https://router.example:8443//", "url") == "https://router.example:8443"


@pytest.mark.parametrize("value, words", [
    ("", ["url is empty", "http://10.0.4.11:30000"]),
    (None, ["url is empty"]),
    ("10.0.4.11:30000", ["scheme must be http or https"]),
    ("ftp://10.0.4.11", ["scheme must be http or https", "'ftp'"]),
    ("http://:30000", ["has no host"]),
    ("http://10.0.4.11:port", ["is not a valid URL"]),
    ("http://u:sk-secret@10.0.4.11:30000", ["must not contain credentials", "api_key"]),
    ("http://10.0.4.11:30000/?x=1", ["query or fragment"]),
])
def test_clean_refuses_what_is_no_base_url(value, words):
    with pytest.raises(ModuleFailure) as exc:
        urls.clean(value, "url")
    for word in words:
        assert word in exc.value.msg
    assert "sk-secret" not in exc.value.msg


def test_same_worker_across_spellings_the_router_keeps_apart():
    assert urls.same_worker("http://127.0.0.1:31102", "http://127.0.0.1:31102/")
    assert urls.same_worker("http://LOCALHOST:31102", "http://localhost:31102")
    assert urls.same_worker("HTTP://host", "http://host:80/")
    assert urls.same_worker("https://host", "https://host:443")
    assert not urls.same_worker("http://host:30000", "http://host:30001")
    assert not urls.same_worker("http://host:30000", "https://host:30000")
    assert not urls.same_worker("http://10.0.4.11:30000", "http://10.0.4.12:30000")
    assert not urls.same_worker("http://host:x", "http://host:30000")  # an unparsable listing matches nothing real
