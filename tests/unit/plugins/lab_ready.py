# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tests/lab/ready.py ("start a lab server and wait until it is ready") for the unit tests.

The units environment cannot import tests/lab as a package, so the module is loaded by its path
from the collection root. In an installed collection tests/lab is absent: ``load`` skips the test
that needs it, saying so.
"""
from __future__ import annotations

import importlib.util
import os
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
LAB = os.path.join(ROOT, "tests", "lab")
PATH = os.path.join(LAB, "ready.py")
_NAME = "gpufleet_lab_ready"


def load():
    """The module tests/lab/ready.py (loaded once per process)."""
    module = sys.modules.get(_NAME)
    if module is not None:
        return module
    if not os.path.isfile(PATH):
        pytest.skip("tests/lab is not part of this tree (installed collection): no %s" % PATH)
    spec = importlib.util.spec_from_file_location(_NAME, PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[_NAME] = module
    return module
