# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Markers shared by every unit test.

``playbook``: the test runs a real ansible-playbook on localhost (seconds each). ``sglang_real``: the
test runs SGLang 0.5.23's own parser from the lab's verified SGLang venv (it uses the ``sglang_python``
fixture, tests/unit/plugins/module_utils/fixtures/sglang_env.py; marked here, from that). ``make test``
runs them all, and fails on a skipped one; the fast lane (``make units-fast``) leaves both out with
``-m "not playbook and not sglang_real"``.
"""
from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "playbook: runs a real ansible-playbook on localhost (left out of the fast lane)")
    config.addinivalue_line("markers", "sglang_real: runs SGLang 0.5.23's own parser from the lab's SGLang venv (left out of the fast lane)")


@pytest.hookimpl(tryfirst=True)  # before -m selects on the markers
def pytest_collection_modifyitems(config, items):  # pylint: disable=unused-argument
    for item in items:
        if "sglang_python" in getattr(item, "fixturenames", ()):
            item.add_marker("sglang_real")
