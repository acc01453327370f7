# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Issue 10 items 12 and 14: strays and valid layouts.

A partial download is a problem even with allow_stray; unreferenced weights SGLang never loads
(consolidated*.safetensors beside an index, anything under original/) are notices; a
huggingface_hub cache snapshot verifies; repo_id mode takes hf_snapshot's allow/ignore patterns.
Real safetensors trees (model_trees.py) and real huggingface_hub downloads from the lab Hub,
nothing mocked.
"""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._common import hashing as _hashing
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import verify as _verify
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import hashes as _verify_hashes
from ansible_collections.gpufleet.llm.plugins.module_utils._verify import steps as vs
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import model_trees as mt

S1, S2 = mt.shard_name(1), mt.shard_name(2)
TARGET = "gpufleet-lab/Kimi-K2.6-mini"  # a repo of the lab Hub (tests/lab/fixtures.py)


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


# --- item 14 (a): the huggingface_hub cache layout --------------------------------------------------
#
# snapshot_download (huggingface_hub's own) against the lab Hub builds the real thing:
# <cache>/models--org--name/{blobs/<hash>, snapshots/<commit>/<path> -> ../../blobs/<hash>, refs/main}.
# Links may resolve inside that repo folder (Layout.within), never outside it: the shard and hash
# steps honour it through _paths.dest_path(..., within=...).


def _cache_snapshot(lab_hub, tmp_path, **kwargs):
    from huggingface_hub import snapshot_download  # pylint: disable=import-outside-toplevel

    return snapshot_download(TARGET, cache_dir=str(tmp_path / "hub"), endpoint=lab_hub.api, **kwargs)


def test_cache_repo_dir_recognises_the_cache_layout_only(tmp_path):
    repo = tmp_path / "hub" / "models--org--name"
    snap = repo / "snapshots" / ("c" * 40)
    os.makedirs(str(snap))
    assert vs.cache_repo_dir(str(snap)) is None  # no blobs/: not huggingface_hub's layout
    os.makedirs(str(repo / "blobs"))
    assert vs.cache_repo_dir(str(snap)) == os.path.realpath(str(repo))
    assert vs.cache_repo_dir(str(snap) + "/") == os.path.realpath(str(repo))
    # A symlink to the snapshot (a "current" link) is the snapshot.
    os.symlink(str(snap), str(tmp_path / "current"))
    assert vs.cache_repo_dir(str(tmp_path / "current")) == os.path.realpath(str(repo))
    other = tmp_path / "models" / "snapshots" / "x"
    os.makedirs(str(other))
    os.makedirs(str(tmp_path / "models" / "blobs"))
    assert vs.cache_repo_dir(str(other)) is None  # not a models--/datasets--/spaces-- folder
    assert vs.cache_repo_dir(str(repo)) is None


def test_layout_step_of_a_real_cache_snapshot(lab_hub, tmp_path):
    path = _cache_snapshot(lab_hub, tmp_path)
    assert os.path.islink(os.path.join(path, "config.json"))
    report = vs.Report()
    layout = vs.check_layout(report, path, path)
    assert layout.within == os.path.realpath(str(tmp_path / "hub" / ("models--" + TARGET.replace("/", "--"))))
    assert "huggingface_hub cache snapshot" in report.checks[0]["detail"]
    plain = vs.check_layout(vs.Report(), str(tmp_path / "hub"), "x")
    assert plain.within is None


@pytest.mark.parametrize("mode", ["quick", "full", "auto"])
def test_real_cache_snapshot_verifies(lab_hub, tmp_path, mode):
    path = _cache_snapshot(lab_hub, tmp_path)
    res = _verify.verify(path, mode=mode, repo_id=TARGET, endpoint=lab_hub.api, token=False)
    assert res["ok"], res["problems"]
    assert res["shards"] == 4 and res["expected_from"] == "hub"
    if mode == "full":
        assert len([h for h in res["hashed"] if h.endswith(".safetensors")]) == 4


def test_cache_snapshot_link_leading_out_of_the_repo_folder_is_refused(lab_hub, tmp_path):
    path = _cache_snapshot(lab_hub, tmp_path)
    outside = str(tmp_path / "elsewhere.safetensors")
    shutil.copy(os.path.join(path, S1), outside)
    os.unlink(os.path.join(path, S1))
    os.symlink(outside, os.path.join(path, S1))
    res = _verify.verify(path, mode="quick", repo_id=TARGET, endpoint=lab_hub.api, token=False)
    assert not res["ok"]
    assert any(p.startswith(S1) and "outside" in p for p in res["problems"]), res["problems"]
    # A link into another cache repo folder is outside too.
    sibling = tmp_path / "hub" / "models--other--repo" / "blobs"
    os.makedirs(str(sibling))
    shutil.move(outside, str(sibling / "x"))
    os.unlink(os.path.join(path, S1))
    os.symlink(os.path.relpath(str(sibling / "x"), path), os.path.join(path, S1))
    res = _verify.verify(path, mode="quick", repo_id=TARGET, endpoint=lab_hub.api, token=False)
    assert any(p.startswith(S1) and "outside" in p for p in res["problems"]), res["problems"]


# --- item 14 (b): repo_id mode takes hf_snapshot's allow/ignore patterns --------------------------------

def test_repo_id_mode_with_the_patterns_of_the_fetch(lab_hub, tmp_path):
    from huggingface_hub import snapshot_download  # pylint: disable=import-outside-toplevel

    ignore = ["*.md", "*.jinja"]
    path = snapshot_download(TARGET, local_dir=str(tmp_path / "model"), endpoint=lab_hub.api, ignore_patterns=ignore)
    kw = dict(repo_id=TARGET, endpoint=lab_hub.api, token=False)
    res = _verify.verify(path, mode="full", **kw)
    assert not res["ok"] and any(p.startswith("README.md is missing") for p in res["problems"]), res["problems"]
    res = _verify.verify(path, mode="full", ignore_patterns=ignore, **kw)
    assert res["ok"], res["problems"]
    res = _verify.verify(path, mode="full", allow_patterns=["*.safetensors", "*.json"], **kw)
    assert res["ok"], res["problems"]
    assert {h for h in res["hashed"] if not h.endswith((".safetensors", ".json"))} == set()
    # A trailing '/' means the folder, as in hf_snapshot (and huggingface_hub).
    res = _verify.verify(path, mode="quick", allow_patterns=["nothing/"], **kw)
    assert res["ok"] and res["files_checked"] == 0


@pytest.mark.parametrize("params,needle", [
    ({"allow_patterns": ["*.json"]}, "allow_patterns selects files of the Hub's listing and only applies with repo_id"),
    ({"ignore_patterns": ["*.md"], "manifest": "/x"}, "ignore_patterns selects files"),
    ({"repo_id": "org/x", "allow_patterns": [""]}, "allow_patterns must be a list of non-empty glob strings"),
    ({"repo_id": "org/x", "ignore_patterns": "*.md"}, "ignore_patterns must be a list"),
])
def test_pattern_parameters(params, needle):
    with pytest.raises(_verify.ParamError, match=re.escape(needle)):
        _verify.check_params(**params)


# --- item 15 (docs): what quick hashes, and the read sizes, as the code does them ---------------------------

COLLECTION = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", ".."))


def _manifest_lfs(root, rel, lfs):
    path = os.path.join(root, ".gpufleet", "manifest.json")
    with open(path) as handle:
        manifest = json.load(handle)
    if lfs is None:
        manifest["files"][rel].pop("lfs", None)
    else:
        manifest["files"][rel]["lfs"] = lfs
    with open(path, "w") as handle:
        json.dump(manifest, handle)


@pytest.mark.parametrize("lfs", [True, None])
def test_quick_checks_an_lfs_tiktoken_model_by_size_only(trees, lfs):
    target, _drafter = trees
    _manifest_lfs(target, "tiktoken.model", lfs)  # LFS on the Hub; None: an older manifest without the flag
    res = _verify.verify(target, mode="quick")
    assert res["ok"], res["problems"]
    assert "tiktoken.model" not in res["hashed"] and "config.json" in res["hashed"]
    res = _verify.verify(target, mode="full")
    assert "tiktoken.model" in res["hashed"]
    _manifest_lfs(target, "tiktoken.model", False)  # a small (non-LFS) file is hashed in every mode
    assert "tiktoken.model" in _verify.verify(target, mode="quick")["hashed"]


def test_docs_state_the_read_sizes_and_quick_hashing_the_code_uses():
    doc = os.path.join(COLLECTION, "docs", "model_verify.md")
    if not os.path.exists(doc):
        pytest.skip("docs/ is not part of this tree")
    with open(doc) as handle:
        text = handle.read()
    assert "%d MiB reads per thread" % (_verify_hashes.HASH_BLOCK >> 20) in text
    assert "%d MiB reads, `_hashing.BLOCK`" % (_hashing.BLOCK >> 20) in text
    assert "`tiktoken.model`: size only" in text
    for suffix in _verify_hashes.WEIGHT_SUFFIXES:
        assert "`%s`" % suffix in text, suffix


# --- item 14 (d): metadata.total_size is advisory --------------------------------------------------------

def _set_total(root, value):
    path = os.path.join(root, "model.safetensors.index.json")
    with open(path) as handle:
        index = json.load(handle)
    real = index["metadata"]["total_size"]
    index["metadata"]["total_size"] = value(real) if callable(value) else value
    with open(path, "w") as handle:
        json.dump(index, handle)
    return real


@pytest.mark.parametrize("value,needle", [
    (lambda real: real + 1, "off by +1"),
    (lambda real: real - 0.875 * 8, "off by -7"),  # transformers' old dtype_byte_size: a bool element = 1/8 byte
    (lambda real: real + 0.5, "off by +0.5"),
    (lambda real: real * 2, "off by +"),  # huggingface_hub counts a view's whole storage
    ("12", "not a number"),
])
def test_total_size_that_disagrees_is_a_notice(trees, value, needle):
    target, _drafter = trees
    _set_total(target, value)
    # No manifest: the index's own bytes changed, which the hashes step would (rightly) report.
    res = _verify.verify(target, mode="quick", manifest=os.path.join(target, "no-manifest.json"))
    assert res["ok"], res["problems"]
    check = [c for c in res["checks"] if c["name"] == "total_size"][0]
    assert check["status"] == "warn" and needle in check["detail"], check
    assert [c["status"] for c in res["checks"] if c["name"] in ("index", "tensors")] == ["ok", "ok"]


def test_a_wrong_index_is_still_caught_by_the_tensors_check(trees):
    target, _drafter = trees
    path = os.path.join(target, "model.safetensors.index.json")
    with open(path) as handle:
        index = json.load(handle)
    name = sorted(index["weight_map"])[0]
    index["weight_map"][name + ".renamed"] = index["weight_map"].pop(name)
    with open(path, "w") as handle:
        json.dump(index, handle)
    res = _verify.verify(target, mode="quick", manifest=os.path.join(target, ".gpufleet", "none.json"))
    assert not res["ok"] and any("renamed" in p for p in res["problems"]), res["problems"]
