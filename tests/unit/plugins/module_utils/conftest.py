# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the model_verify checks: a golden Kimi-shaped target + drafter, and fresh copies."""
from __future__ import annotations

import pytest

from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils import model_trees


@pytest.fixture(scope="session")
def golden(tmp_path_factory):
    base = tmp_path_factory.mktemp("golden")
    model_trees.make_golden(str(base))
    return str(base)


@pytest.fixture
def trees(golden, tmp_path):
    """(target, drafter): fresh copies with hf_snapshot-style manifests, for one test to break."""
    return model_trees.fresh_copy(golden, str(tmp_path / "models"))
