# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_modeltree/patterns.py: which files allow/ignore patterns select (hf_snapshot's and model_verify's)."""
from __future__ import annotations

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import listing as _fetch_listing
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import patterns as _patterns


def test_patterns_semantics():
    assert _patterns.matches_patterns("a/b.json", ["*.json"], None)
    assert not _patterns.matches_patterns("a.bin", ["*.json"], None)
    assert not _patterns.matches_patterns("sub/x.bin", None, ["sub/"])
    assert _patterns.matches_patterns("x", None, None)
    assert _patterns.matches_patterns("a.json", "*.json", None)  # a single pattern as a string


def test_a_trailing_slash_means_the_folder_in_allow_too():
    assert _patterns.matches_patterns("sub/x.bin", ["sub/"], None)
    assert not _patterns.matches_patterns("subx/x.bin", ["sub/"], None)
    assert not _patterns.matches_patterns("a.json", ["*.json"], "a.*")  # ignore wins over allow


def test_hf_snapshot_selects_with_the_same_function():
    assert _fetch_listing.matches_patterns is _patterns.matches_patterns
