# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""_strays: what is not part of the revision, what counts as a partial, and what prune removes."""
from __future__ import annotations

import json
import os

from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import manifest as _manifest
from ansible_collections.gpufleet.llm.plugins.module_utils._modeltree import strays as _strays
from ansible_collections.gpufleet.llm.plugins.modules import model_verify
from ansible_collections.gpufleet.llm.tests.unit.plugins.modules.module_runner import run_module
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

WANTED = {"model.safetensors", "sub/config.json"}
PARTIALS = [".cache/huggingface/download/x.incomplete", "model.safetensors.aria2", "c.part", "d.tmp.download",
            "e.crdownload", "f.partial", "g.tmp"]
EXTRAS = ["notes.txt", "sub/README.md", "h.tmp.bak"]


def tree(dest):
    for rel in sorted(WANTED) + PARTIALS + EXTRAS:
        sf.write(dest, rel, b"x" * 100)
    sf.write_manifest(dest, {})
    sf.write(_manifest.meta_dir(str(dest)), "lock", b"")
    staging = os.path.join(_manifest.meta_dir(str(dest)), "staging")
    for name in ("kept", "kept.aria2", "kept.direct", "old", "old.aria2", "old.direct"):
        sf.write(staging, name, b"s" * 10)
    return staging


def test_scan_strays_partial_extra_and_staging_leftovers(tmp_path):
    staging = tree(tmp_path)
    strays = _strays.scan_strays(str(tmp_path), wanted=WANTED, staging=staging, staging_keys={"kept"})
    kinds = {s["path"]: s["kind"] for s in strays}
    expected = dict({p: "partial" for p in PARTIALS}, **{p: "extra" for p in EXTRAS})
    # staging files whose content key this run still fetches are not strays; the others are partials
    # (a direct download's .direct mark belongs to its file like aria2's control file: not a stray
    # while the run still fetches that key, else pruning would lose the resume)
    expected.update({".gpufleet/staging/old": "partial", ".gpufleet/staging/old.aria2": "partial",
                     ".gpufleet/staging/old.direct": "partial"})
    assert kinds == expected  # nothing else of .gpufleet (manifest, lock) is a stray
    assert [s["path"] for s in strays] == sorted(expected)
    assert all(s["bytes"] == (10 if "staging" in s["path"] else 100) for s in strays)
    # no staging directory given: only the tree itself
    without = {s["path"] for s in _strays.scan_strays(str(tmp_path), wanted=WANTED)}
    assert without == set(PARTIALS + EXTRAS)


def test_prune_removes_only_regular_partials(tmp_path):
    dest = tmp_path / "d"
    staging = tree(dest)
    outside = sf.write(tmp_path / "outside", "target.incomplete", b"keep me")
    os.symlink(outside, str(dest / "link.incomplete"))
    strays = _strays.scan_strays(str(dest), wanted=WANTED, staging=staging, staging_keys={"kept"})
    assert {"path": "link.incomplete", "kind": "partial", "bytes": 7} in strays
    strays.append({"path": "already-gone.part", "kind": "partial", "bytes": 0})
    pruned = _strays.prune(str(dest), strays)
    assert sorted(pruned) == sorted(PARTIALS + [".gpufleet/staging/old", ".gpufleet/staging/old.aria2",
                                                ".gpufleet/staging/old.direct"])
    assert os.path.isfile(os.path.join(staging, "kept.direct"))  # a resume this run still needs
    for rel in PARTIALS:
        assert not os.path.lexists(dest / rel)
    for rel in EXTRAS + sorted(WANTED):
        assert (dest / rel).read_bytes() == b"x" * 100
    assert os.path.islink(dest / "link.incomplete")  # never a symlink, nor what it points at
    with open(outside, "rb") as handle:
        assert handle.read() == b"keep me"
    meta = _manifest.meta_dir(str(dest))
    assert os.path.isfile(os.path.join(meta, _manifest.MANIFEST))
    assert sorted(os.listdir(os.path.join(meta, "staging"))) == ["kept", "kept.aria2", "kept.direct"]


def test_allocated_bytes(tmp_path):
    path = sf.write(tmp_path, "f", b"y" * 5000)
    assert _strays.allocated_bytes(path) == 5000
    assert _strays.allocated_bytes(str(tmp_path / "missing")) == 0
    with open(str(tmp_path / "sparse"), "wb") as handle:
        handle.truncate(1 << 20)  # a preallocation-free file aria2 has not written yet
    assert _strays.allocated_bytes(str(tmp_path / "sparse")) < 1 << 20


def test_model_verify_and_hf_snapshot_share_one_partial_table(capsys, trees):
    """Every name hf_snapshot would prune, model_verify fails on as a partial, and no other."""
    target, _drafter = trees
    names = ["x" + suffix for suffix in _strays.PARTIAL_SUFFIXES] + ["y.tmp.download", "notes.txt", "z.bak",
                                                                     "w.partial.json"]
    for name in names:
        sf.write(target, name, b"leftover")
    with open(os.path.join(target, ".gpufleet", "manifest.json")) as handle:
        wanted = set(json.load(handle)["files"])
    snapshot_partials = {s["path"] for s in _strays.scan_strays(target, wanted=wanted) if s["kind"] == "partial"}
    res = run_module(model_verify.main, capsys, {"path": target, "mode": "quick", "fail_on_problem": False})
    verify_partials = {n for n in names for p in res["problems"]
                       if p.startswith(n + ": ") and ("partial download" in p or "aria2 control file" in p)}
    assert snapshot_partials == verify_partials == {n for n in names if _strays.is_partial(n)}
    assert {"notes.txt", "z.bak", "w.partial.json"}.isdisjoint(snapshot_partials)
    assert len(snapshot_partials) == len(_strays.PARTIAL_SUFFIXES) + 1
