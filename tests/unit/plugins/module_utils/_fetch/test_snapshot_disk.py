# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""hf_snapshot's resolve-only listing and its disk preflight (issue 10, item 2), against the real lab
Hub with real aria2c and real files.

A volume holding the current revision must be able to move to a commit that changes a few files:
the role's resolve must only list, the preflight must count what hard links supply, and check mode
must report the figures instead of failing.

The disk cannot be shrunk for a test: where a test needs "free space below the whole model", it
either asks for a headroom (min_free_bytes) no disk has, or replaces the free-space figure of
_snapshot_plan.free_bytes (the statvfs reading) with a fixed number. That figure is the one mocked
thing; files, links, the Hub and aria2c are real.
"""
from __future__ import annotations

import os
import tempfile

import pytest

from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import snapshot as _snapshot
from ansible_collections.gpufleet.llm.plugins.module_utils._fetch import plan as _snapshot_plan
from ansible_collections.gpufleet.llm.tests.unit.plugins.module_utils.fixtures import snapshot_files as sf

TARGET = "gpufleet-lab/Kimi-K2.6-mini"
SHARD3 = "model-00003-of-000004.safetensors"
# More than any disk has: a fetch that needs it can never fit.
NO_DISK_HAS = 10 ** 18


def run(hub, dest, check_mode=False, warnings=None, **params):
    base = dict(repo_id=TARGET, revision="main", dest=str(dest), endpoint=hub.api, min_free_bytes=0,
                retry_wait=1, connections=4, splits=4, min_split_size="1M")
    base.update(params)
    return _snapshot.snapshot(base, check_mode=check_mode,
                              warn=warnings.append if warnings is not None else None)


def fixed_free_space(monkeypatch, free):
    """The one mocked thing: the filesystem reports ``free`` bytes available (see the docstring)."""
    real = _snapshot_plan.free_bytes

    def free_bytes(path):
        return free, real(path)[1]

    monkeypatch.setattr(_snapshot_plan, "free_bytes", free_bytes)


def test_resolve_only_lists_without_touching_dest(lab_hub, tmp_path):
    dest = tmp_path / "models" / "kimi" / "anything"
    res = run(lab_hub, dest, resolve_only=True, min_free_bytes=NO_DISK_HAS, aria2c="/nonexistent/aria2c")
    commit, files = lab_hub.files_at(TARGET, "main")
    assert res["commit"] == commit and res["resolve_only"] and not res["changed"]
    assert sorted(f["path"] for f in res["files"]) == sorted(files)
    assert {f["action"] for f in res["files"]} == {"listed"}
    assert res["bytes_total"] == sum(f["size"] for f in files.values())
    assert "disk" not in res
    assert not (tmp_path / "models").exists()
    # no file body was asked for: only the listing
    assert lab_hub.log(server="cdn") == []


def test_check_mode_reports_too_little_space_instead_of_failing(lab_hub, aria2c, tmp_path):
    dest = tmp_path / "d"
    warnings = []
    res = run(lab_hub, dest, check_mode=True, warnings=warnings, min_free_bytes=NO_DISK_HAS)
    disk = res["disk"]
    assert res["changed"] and disk["needed_bytes"] == res["bytes_total"] > 0
    assert disk["short_bytes"] == disk["needed_bytes"] + NO_DISK_HAS - disk["free_bytes"] > 0
    assert len(res["blocked"]) == 1 and "not enough disk space" in res["blocked"][0]
    assert len(warnings) == 1 and warnings[0].startswith("check mode: a real run would fail: not enough disk space")
    assert not dest.exists()
    # a real run still refuses, before any byte travels
    with pytest.raises(_snapshot.SnapshotError) as err:
        run(lab_hub, dest, min_free_bytes=NO_DISK_HAS)
    assert err.value.details["disk"]["short_bytes"] > 0
    assert lab_hub.log(server="cdn") == []


def test_check_mode_reports_missing_aria2c_instead_of_failing(lab_hub, tmp_path):
    warnings = []
    res = run(lab_hub, tmp_path / "d", check_mode=True, warnings=warnings, aria2c="/nonexistent/aria2c")
    assert res["changed"] and res["disk"]["short_bytes"] == 0
    assert len(res["blocked"]) == 1 and "aria2c not found at /nonexistent/aria2c" in res["blocked"][0]
    assert warnings == ["check mode: a real run would fail: " + res["blocked"][0]]
    with pytest.raises(_snapshot.SnapshotError, match="aria2c not found"):
        run(lab_hub, tmp_path / "d", aria2c="/nonexistent/aria2c")


def test_update_whose_shards_link_fits_where_the_whole_model_does_not(lab_hub, aria2c, tmp_path, monkeypatch):
    v1 = tmp_path / "v1"
    run(lab_hub, v1, revision="v1.0")
    files = lab_hub.files_at(TARGET, "main")[1]
    whole = sum(f["size"] for f in files.values())
    changed = files[SHARD3]["size"] + files["config.json"]["size"]
    # free space: the changed files and a little more, far less than the whole model
    fixed_free_space(monkeypatch, changed + (1 << 20))
    assert changed + (1 << 20) < whole

    # without link_from nothing can be linked: check mode says so with figures, a real run refuses
    res = run(lab_hub, tmp_path / "alone", check_mode=True)
    assert res["disk"]["short_bytes"] > 0 and res["disk"]["linked_bytes"] == 0 and res["blocked"]

    lab_hub.reset()
    main = tmp_path / "main"
    res = run(lab_hub, main, link_from=[str(v1)])
    disk = res["disk"]
    assert disk["needed_bytes"] == changed and disk["short_bytes"] == 0
    assert disk["linked_bytes"] == whole - changed
    actions = {f["path"]: f["action"] for f in res["files"]}
    assert {p for p, a in actions.items() if a == "fetched"} == {SHARD3, "config.json"}
    assert os.stat(v1 / "model-00001-of-000004.safetensors").st_ino == os.stat(main / "model-00001-of-000004.safetensors").st_ino


def _other_filesystem(path):
    """A writable directory on another filesystem than ``path`` (tmpfs /dev/shm), or None."""
    for base in ("/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(base) and os.access(base, os.W_OK) and os.stat(base).st_dev != os.stat(path).st_dev:
            return base
    return None


def test_links_from_another_filesystem_count_as_needed(tmp_path):
    other = _other_filesystem(str(tmp_path))
    if other is None:
        pytest.skip("no writable directory on another filesystem than %s" % tmp_path)
    with tempfile.TemporaryDirectory(dir=other) as elsewhere:
        dest = tmp_path / "new"
        shard = b"shard-bytes " * 700
        here = sf.item_for(tmp_path / "old", "a.safetensors", shard)
        sf.write(tmp_path / "old", "a.safetensors", shard)
        there = sf.item_for(elsewhere, "b.safetensors", shard * 2)
        sf.write(elsewhere, "b.safetensors", shard * 2)
        for item in (here, there):
            item.action = "link"
            item.source = (item.final, {})
        disk = _snapshot_plan.disk_figures(str(dest), to_fetch={}, staging=str(dest / "staging"), min_free_bytes=0,
                                           to_link=[here, there])
    # os.link across filesystems fails (EXDEV) and the file is fetched: its bytes need space
    assert disk["linked_bytes"] == len(shard)
    assert disk["needed_bytes"] == 2 * len(shard)
