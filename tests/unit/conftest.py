# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Markers shared by every unit test.

``playbook``: the test runs a real ansible-playbook on localhost (seconds each). ``make test`` runs them
all; the fast lane (``make units-fast``) leaves them out with ``-m "not playbook"``.
"""
from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line("markers", "playbook: runs a real ansible-playbook on localhost (left out of the fast lane)")
