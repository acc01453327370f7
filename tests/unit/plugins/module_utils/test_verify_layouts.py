# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 10 items 12 and 14: strays and valid layouts.

A partial download is a problem even with allow_stray; unreferenced weights SGLang never loads
(consolidated*.safetensors beside an index, anything under original/) are notices. Real
safetensors trees (model_trees.py), nothing mocked.
"""
from __future__ import annotations

import os
import shutil

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils import _strays, _verify
from ansible_collections.gpufleet.llm.plugins.module_utils import _verify_steps as vs
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils import model_trees as mt

S1, S2 = mt.shard_name(1), mt.shard_name(2)


def _copy(root, src, dst):
    os.makedirs(os.path.dirname(os.path.join(root, dst)) or root, exist_ok=True)
    shutil.copy(os.path.join(root, src), os.path.join(root, dst))


# --- item 12: allow_stray never silences a partial ---------------------------------------------------

@pytest.mark.parametrize("suffix", _strays.PARTIAL_SUFFIXES)
@pytest.mark.parametrize("allow_stray", [False, True])
def test_partial_beside_a_shard_is_a_problem_even_with_allow_stray(trees, suffix, allow_stray):
    target, _drafter = trees
    with open(os.path.join(target, S2 + suffix), "wb") as handle:
        handle.write(b"half a shard")
    res = _verify.verify(target, mode="quick", allow_stray=allow_stray)
    assert not res["ok"], res["checks"]
    hits = [p for p in res["problems"] if p.startswith(S2 + suffix + ":")]
    assert len(hits) == 1, res["problems"]
    assert ("allow_stray does not cover partial downloads" in hits[0]) is allow_stray
    assert not any(S2 + suffix in n for n in res["notices"])


def test_allow_stray_tolerates_a_complete_extra_shard_only(trees):
    target, _drafter = trees
    _copy(target, S1, mt.shard_name(5))
    refused = _verify.verify(target, mode="quick")
    assert any(p.startswith(mt.shard_name(5) + ": a .safetensors file") for p in refused["problems"])
    res = _verify.verify(target, mode="quick", allow_stray=True)
    assert res["ok"], res["problems"]
    stray = [c for c in res["checks"] if c["name"] == "stray"]
    assert stray[0]["status"] == "warn" and stray[0]["detail"].startswith("allow_stray; " + mt.shard_name(5))
    # The partial of that extra file is still a problem.
    with open(os.path.join(target, mt.shard_name(5) + ".aria2"), "wb") as handle:
        handle.write(b"\x00\x01aria2 control")
    res = _verify.verify(target, mode="quick", allow_stray=True)
    assert [p.split(":")[0] for p in res["problems"]] == [mt.shard_name(5) + ".aria2"]


# --- item 14 (c): unreferenced weights SGLang never loads are notices ----------------------------------

@pytest.mark.parametrize("mode", ["quick", "full"])
def test_consolidated_and_original_beside_an_index_are_notices(trees, mode):
    target, _drafter = trees
    _copy(target, S1, "consolidated.safetensors")
    _copy(target, S2, "consolidated-00001-of-00002.safetensors")
    _copy(target, S1, "original/model.safetensors")
    _copy(target, S2, "original/sub/x.safetensors")
    res = _verify.verify(target, mode=mode)
    assert res["ok"], res["problems"]
    noted = sorted(n.split(":")[0] for n in res["notices"] if "not referenced by the weights" in n)
    assert noted == ["consolidated-00001-of-00002.safetensors", "consolidated.safetensors",
                     "original/model.safetensors", "original/sub/x.safetensors"]
    stray = [c for c in res["checks"] if c["name"] == "stray"][0]
    assert stray["status"] == "warn"
    # Any other unreferenced shard at the top level is still a stray.
    _copy(target, S1, "model-00009-of-000004.safetensors")
    res = _verify.verify(target, mode=mode)
    assert [p.split(":")[0] for p in res["problems"]] == ["model-00009-of-000004.safetensors"]


def test_single_file_model_and_consolidated(trees):
    target, _drafter = trees
    single = os.path.join(os.path.dirname(target), "single")
    os.makedirs(single)
    shutil.copy(os.path.join(target, "config.json"), single)
    shutil.copy(os.path.join(target, S1), os.path.join(single, "model.safetensors"))
    # SGLang drops consolidated.safetensors when it and model.safetensors are the only weight files...
    shutil.copy(os.path.join(target, S2), os.path.join(single, "consolidated.safetensors"))
    res = _verify.verify(single, mode="quick")
    assert res["ok"], res["problems"]
    assert any(n.startswith("consolidated.safetensors: not referenced") for n in res["notices"])
    # ...and loads every top-level .safetensors file otherwise: then both extras are strays.
    shutil.copy(os.path.join(target, S2), os.path.join(single, "extra.safetensors"))
    res = _verify.verify(single, mode="quick")
    assert sorted(p.split(":")[0] for p in res["problems"]) == ["consolidated.safetensors", "extra.safetensors"]


def test_step_strays_judges_by_what_sglang_loads():
    layout = vs.Layout(kind="index", weight_map={"t": "a.safetensors"}, total_size=None, shard_rels=["a.safetensors"])
    files = ["a.safetensors", "consolidated.safetensors", "original/b.safetensors", "c.safetensors",
             "original/b.safetensors.incomplete"]
    report = vs.Report()
    vs.check_strays(report, layout, files, allow_stray=False)
    assert [p.split(":")[0] for p in report.problems] == ["c.safetensors", "original/b.safetensors.incomplete"]
    assert [w.split(":")[0] for w in report.warnings] == ["consolidated.safetensors", "original/b.safetensors"]
    report = vs.Report()
    vs.check_strays(report, layout, files, allow_stray=True)
    assert [p.split(":")[0] for p in report.problems] == ["original/b.safetensors.incomplete"]
    assert [w.split(":")[0] for w in report.warnings] == ["c.safetensors", "consolidated.safetensors",
                                                          "original/b.safetensors"]
